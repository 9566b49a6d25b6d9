# Sourced by the image entrypoints: wait for the ports satbed (or
# docker/wire.sh) moves into this container after it started with
# --network none, then prepare them the way satbed prepares every testbed port.

# wait_port NAME SECONDS: the port exists, or fail with one line.
wait_port() {
	_n=0
	while ! ip link show dev "$1" >/dev/null 2>&1; do
		_n=$((_n + 1))
		if [ "$_n" -gt $(( $2 * 10 )) ]; then
			echo "satbed: port $1 did not appear in $2 s (wire the container: docker/wire.sh)" >&2
			return 1
		fi
		sleep 0.1
	done
}

# prepare_port NAME: 1500-byte MTU, offloads off (captures and raw sockets
# must see real frames), promiscuous (frames for the far host's MAC), up.
prepare_port() {
	ip link set dev "$1" mtu "${SATBED_MTU:-1500}"
	ethtool -K "$1" tso off gso off gro off tx off >/dev/null 2>&1 || true
	ip link set dev "$1" promisc on
	ip link set dev "$1" up
}
