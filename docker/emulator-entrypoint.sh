#!/bin/sh
# The emulator image entrypoint, for standing testbeds (docker-compose.yml):
#   run (default)  wait for ports a and b, then run satemu with the link from
#                  SATBED_RATE_BPS, SATBED_CEIL_BPS, SATBED_RTT_MS (split evenly),
#                  SATBED_BER and SATBED_QUEUE_PACKETS, both directions alike.
#                  When a neighbour is recreated (a PEP swapped) its veth and
#                  with it this port go away and satemu stops: it is started
#                  again once satbed has rewired the port, from the config
#                  file, which `satbed compose link` keeps up to date.
#   idle           do nothing (satbed's Docker backend starts satemu itself)
set -eu
A=${SATBED_EMU_A:-eth0} B=${SATBED_EMU_B:-eth1}
STATE=${SATBED_STATE_DIR:-/run/satbed/emulator}
. /opt/satbed/lib/wait-ports.sh

case "${1:-run}" in
idle) exec sleep infinity ;;
run) ;;
*) echo "usage: satbed-emulator [run|idle]" >&2; exit 2 ;;
esac

mkdir -p "$STATE"
rate=${SATBED_RATE_BPS:-8000000}
ceil=${SATBED_CEIL_BPS:-10000000}
delay=$(awk -v r="${SATBED_RTT_MS:-600}" 'BEGIN { printf "%g", r / 2 }')
dir="{\"rate_bps\": $rate, \"ceil_bps\": $ceil, \"cburst_bytes\": 131072, \"delay_ms\": $delay,
  \"ber\": ${SATBED_BER:-0}, \"queue_packets\": ${SATBED_QUEUE_PACKETS:-1000}}"
printf '{"seed": %s, "sample_ms": 100, "a_to_b": %s, "b_to_a": %s}\n' \
	"${SATBED_SEED:-1}" "$dir" "$dir" >"$STATE/satemu.json"

stopping=0 child=
trap 'stopping=1; [ -n "$child" ] && kill -TERM "$child" 2>/dev/null' TERM INT
while [ "$stopping" = 0 ]; do
	wait_port "$A" "${SATBED_WAIT_S:-600}"
	wait_port "$B" "${SATBED_WAIT_S:-600}"
	prepare_port "$A" && prepare_port "$B" || { sleep 0.5; continue; }
	satemu -a "$A" -b "$B" -config "$STATE/satemu.json" -control "$STATE/satemu.sock" -stats-dir "$STATE" &
	child=$!
	# wait returns early when the trap runs; then wait for satemu itself.
	rc=0
	wait "$child" || rc=$?
	[ "$stopping" = 1 ] && wait "$child" 2>/dev/null || true
	child=
	[ "$stopping" = 1 ] && break
	echo "satbed-emulator: satemu ended (status $rc); restarting once ports $A and $B are back" >&2
	sleep 0.5
done
exit 0
