#!/bin/sh
# The emulator image entrypoint, for standing testbeds (docker-compose.yml):
#   run (default)  wait for ports a and b, then run satemu with the link from
#                  SATBED_RATE_BPS, SATBED_CEIL_BPS, SATBED_RTT_MS (split evenly),
#                  SATBED_BER and SATBED_QUEUE_PACKETS, both directions alike
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

wait_port "$A" "${SATBED_WAIT_S:-600}"
wait_port "$B" "${SATBED_WAIT_S:-600}"
prepare_port "$A"
prepare_port "$B"
mkdir -p "$STATE"
rate=${SATBED_RATE_BPS:-8000000}
ceil=${SATBED_CEIL_BPS:-10000000}
delay=$(awk -v r="${SATBED_RTT_MS:-600}" 'BEGIN { printf "%g", r / 2 }')
dir="{\"rate_bps\": $rate, \"ceil_bps\": $ceil, \"cburst_bytes\": 131072, \"delay_ms\": $delay,
  \"ber\": ${SATBED_BER:-0}, \"queue_packets\": ${SATBED_QUEUE_PACKETS:-1000}}"
printf '{"seed": %s, "sample_ms": 100, "a_to_b": %s, "b_to_a": %s}\n' \
	"${SATBED_SEED:-1}" "$dir" "$dir" >"$STATE/satemu.json"
exec satemu -a "$A" -b "$B" -config "$STATE/satemu.json" -control "$STATE/satemu.sock" -stats-dir "$STATE"
