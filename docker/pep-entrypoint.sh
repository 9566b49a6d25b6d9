#!/bin/sh
# The PEP image entrypoint (pep/CONTRACT.md, "The image contract").
#   run (default)             wait for the LAN and WAN ports, bridge them, start
#                             the PEP, check its health; on SIGTERM write final
#                             stats and stop it cleanly, exit 0
#   start|stop|health|stats   the image's adapter, verbatim
#   idle                      do nothing (satbed's Docker backend drives the adapter)
set -eu

ADAPTER=${SATBED_PEP_ADAPTER:-/opt/satbed/pep/adapter}
export SATBED_PEP_LAN="${SATBED_PEP_LAN:-eth0}" SATBED_PEP_WAN="${SATBED_PEP_WAN:-eth1}"
export SATBED_PEP_BRIDGE="${SATBED_PEP_BRIDGE:-br0}" SATBED_STATE_DIR="${SATBED_STATE_DIR:-/run/satbed/pep}"
export SATBED_BIN_DIR="${SATBED_BIN_DIR:-/opt/satbed/bin}" SATBED_PEP_ROLE="${SATBED_PEP_ROLE:-a}"
export SATBED_RATE_BPS="${SATBED_RATE_BPS:-8000000}" SATBED_RTT_MS="${SATBED_RTT_MS:-600}"
export SATBED_BER="${SATBED_BER:-0}" SATBED_BUFFER_BYTES="${SATBED_BUFFER_BYTES:-1514000}"
export SATBED_PEP_OPTS="${SATBED_PEP_OPTS:-}"

. /opt/satbed/lib/wait-ports.sh

bridge_ports() {
	ip link show dev "$SATBED_PEP_BRIDGE" >/dev/null 2>&1 ||
		ip link add name "$SATBED_PEP_BRIDGE" type bridge forward_delay 0 stp_state 0
	for p in "$SATBED_PEP_LAN" "$SATBED_PEP_WAN"; do
		prepare_port "$p"
		ip link set dev "$p" master "$SATBED_PEP_BRIDGE"
	done
	ip link set dev "$SATBED_PEP_BRIDGE" up
	# Frames crossing the bridge reach iptables only if the adapter asks.
	sysctl -q -w net.bridge.bridge-nf-call-iptables=0 2>/dev/null || true
}

stopping=0
shutdown() {
	[ "$stopping" = 1 ] && return
	stopping=1
	"$ADAPTER" stats >"$SATBED_STATE_DIR/final-stats.json" 2>/dev/null || true
	if "$ADAPTER" stop; then
		echo "satbed-pep: stopped cleanly"
		exit 0
	fi
	echo "satbed-pep: adapter stop failed" >&2
	exit 1
}

case "${1:-run}" in
start | stop | health | stats)
	exec "$ADAPTER" "$1"
	;;
idle)
	exec sleep infinity
	;;
run)
	mkdir -p "$SATBED_STATE_DIR"
	rm -f "$SATBED_STATE_DIR/ready"
	trap shutdown TERM INT
	wait_port "$SATBED_PEP_LAN" "${SATBED_WAIT_S:-600}"
	wait_port "$SATBED_PEP_WAN" "${SATBED_WAIT_S:-600}"
	bridge_ports
	"$ADAPTER" start
	touch "$SATBED_STATE_DIR/ready"
	echo "satbed-pep: $(cat /opt/satbed/pep/name 2>/dev/null || echo pep) running on $SATBED_PEP_LAN/$SATBED_PEP_WAN"
	while :; do
		# sleep in the background so SIGTERM is handled at once.
		sleep 5 &
		wait $! || true
		[ "$stopping" = 1 ] && continue
		if ! "$ADAPTER" health >/dev/null 2>&1; then
			echo "satbed-pep: health check failed" >&2
		fi
	done
	;;
*)
	echo "usage: satbed-pep [run|idle|start|stop|health|stats]" >&2
	exit 2
	;;
esac
