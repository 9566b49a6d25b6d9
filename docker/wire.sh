#!/bin/sh
# Wire the containers of docker-compose.yml into the Global Hawk chain, in
# satbed's vocabulary: each link is a veth pair created inside node a's
# network namespace with its peer in node b's, offloads off (tso gso gro tx),
# MTU 1500, up; the end hosts get their addresses; the PEP and emulator
# entrypoints then bridge their ports and start on their own.
#
#   docker/wire.sh [PROJECT]      (default: $COMPOSE_PROJECT_NAME, else the
#                                  name docker-compose gives this checkout)
#
#   clientA.eth0 = pepA.lan   pepA.wan = emulator.a   emulator.b = pepB.wan
#   pepB.lan = clientB.eth0   clientA 10.99.99.2/24   clientB 10.99.99.254/24
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
project=${1:-${COMPOSE_PROJECT_NAME:-$(basename "$here" | tr 'A-Z' 'a-z' | tr -cd 'a-z0-9_-')}}

pid_of() {
	id=$(docker ps -q --filter "label=com.docker.compose.project=$project" \
		--filter "label=com.docker.compose.service=$1")
	[ -n "$id" ] || { echo "wire: no running $1 container in compose project $project (docker-compose up -d first)" >&2; exit 1; }
	docker inspect --format '{{.State.Pid}}' "$id"
}

# in NODE CMD...: run CMD in NODE's network namespace (host tools).
in_ns() {
	pid=$1
	shift
	nsenter -t "$pid" -n -- "$@"
}

prepare() {
	in_ns "$1" ip link set dev "$2" mtu 1500
	in_ns "$1" ethtool -K "$2" tso off gso off gro off tx off >/dev/null
	in_ns "$1" ip link set dev "$2" up
}

link() {
	pa=$(pid_of "$1") pb=$(pid_of "$3")
	if in_ns "$pa" ip link show dev "$2" >/dev/null 2>&1; then
		echo "wire: $1.$2 exists already (wired before?)"
		return
	fi
	in_ns "$pa" ip link add name "$2" type veth peer name "$4" netns "$pb"
	prepare "$pa" "$2"
	prepare "$pb" "$4"
	echo "wire: $1.$2 = $3.$4"
}

# Bridged frames must not reach the PEPs' iptables/nft ip hooks twice; the
# key exists only where br_netfilter is loaded, and only the host may write it.
for pep in pepA pepB; do
	pid=$(pid_of "$pep")
	if [ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]; then
		in_ns "$pid" sysctl -q -w net.bridge.bridge-nf-call-iptables=0
	fi
done

link clientA eth0 pepA lan
link pepA wan emulator a
link emulator b pepB wan
link pepB lan clientB eth0

for host in clientA:10.99.99.2/24 clientB:10.99.99.254/24; do
	pid=$(pid_of "${host%%:*}")
	in_ns "$pid" ip addr replace "${host#*:}" dev eth0
done

# Ready when Client A reaches Client B through both PEPs and the emulator.
pa=$(pid_of clientA)
tries=60
until in_ns "$pa" ping -c 1 -W 2 10.99.99.254 >/dev/null 2>&1; do
	sleep 1
	tries=$((tries - 1))
	[ "$tries" -gt 0 ] || { echo "wire: clientB unreachable after 120 s (docker-compose logs pepA emulator pepB)" >&2; exit 1; }
done
echo "wire: clientA reaches clientB through pepA, emulator, pepB"
