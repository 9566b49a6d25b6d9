#!/bin/bash
# Regenerate tests/data/golden.pcap and tests/data/golden_expected.json.
#
# Three throw-away namespaces: sender 10.99.99.1, a bridge in the middle that
# shapes with TBF (its queue builds a visible RTT; this kernel has no netem),
# receiver 10.99.99.2.  Additionally an nftables rule on the RECEIVER's input
# drops ~1% of data segments.  The drop is on the receiver side on purpose:
# tcpdump runs on the sender's veth, so every dropped original is still in the
# capture and its retransmission shows up as a real retransmission to tcptrace
# (a drop in the sender's own output path would happen before the tap).
#
# Expected values are extracted from tcptrace's own text with awk, not with the
# analysis package, so the golden test checks the parser against tcptrace.
#
# Usage (root): tests/data/make_golden.sh [outdir]   (default: this directory)
set -euo pipefail

OUT=${1:-$(cd "$(dirname "$0")" && pwd)}
SIZE=${SIZE:-2000000}  # bytes; override for a bigger stress capture
PORT=5001
TAG=g$(od -An -N2 -tx1 /dev/urandom | tr -d ' \n')
NS_S=${TAG}s
NS_R=${TAG}r
NS_M=${TAG}m
IF_S=${TAG}a
IF_R=${TAG}b
TMP=$(mktemp -d)
TCPDUMP_PID=""
SERVER_PID=""

cleanup() {
    [ -n "$TCPDUMP_PID" ] && kill "$TCPDUMP_PID" 2>/dev/null || true
    [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true
    ip netns del "$NS_S" 2>/dev/null || true
    ip netns del "$NS_R" 2>/dev/null || true
    ip netns del "$NS_M" 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT

ip netns add "$NS_S"
ip netns add "$NS_M"
ip netns add "$NS_R"
ip link add "$IF_S" netns "$NS_S" type veth peer name "${TAG}ms" netns "$NS_M"
ip link add "$IF_R" netns "$NS_R" type veth peer name "${TAG}mr" netns "$NS_M"
ip -n "$NS_M" link add br0 type bridge
for pair in "$NS_S:$IF_S:10.99.99.1/24" "$NS_R:$IF_R:10.99.99.2/24" "$NS_M:${TAG}ms:" "$NS_M:${TAG}mr:"; do
    IFS=: read -r ns ifc addr <<<"$pair"
    ip -n "$ns" link set lo up
    if [ -n "$addr" ]; then
        ip -n "$ns" addr add "$addr" dev "$ifc"
    else
        ip -n "$ns" link set "$ifc" master br0
    fi
    ip -n "$ns" link set "$ifc" up
    # Without this the tap sees 64 KB super-frames and partial checksums.
    ip netns exec "$ns" ethtool -K "$ifc" tso off gso off gro off tx off >/dev/null
done
ip -n "$NS_M" link set br0 up
# The bottleneck sits in the middle box, after the capture point, so its queue
# shows up as RTT in the sender-side capture (this kernel has no netem).
# 16 Mbit/s: the 2 MB transfer lasts about a second.
ip netns exec "$NS_M" tc qdisc add dev "${TAG}mr" root tbf rate 16mbit burst 16kb latency 100ms

ip netns exec "$NS_R" nft -f - <<EOF
table inet ${TAG} {
    chain in {
        type filter hook input priority 0;
        tcp dport $PORT meta length > 200 numgen random mod 100 < 1 counter drop
    }
}
EOF

ip netns exec "$NS_R" /usr/bin/python3 -c "
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('10.99.99.2', $PORT)); s.listen(1)
c, _ = s.accept(); n = 0
while True:
    b = c.recv(65536)
    if not b: break
    n += len(b)
c.close(); open('$TMP/received', 'w').write(str(n))
" &
SERVER_PID=$!

ip netns exec "$NS_S" tcpdump -i "$IF_S" -s 128 -n --immediate-mode -w "$TMP/golden.pcap" -U tcp port $PORT 2>"$TMP/tcpdump.log" &
TCPDUMP_PID=$!
# Wait until tcpdump has opened the interface so the SYN is captured.
for _ in $(seq 50); do grep -q listening "$TMP/tcpdump.log" && break; sleep 0.1; done
sleep 0.3

ip netns exec "$NS_S" timeout 60 /usr/bin/python3 -c "
import socket
s = socket.create_connection(('10.99.99.2', $PORT), timeout=30)
s.sendall(bytes(range(256)) * ($SIZE // 256) + bytes($SIZE % 256))
s.shutdown(socket.SHUT_WR); s.recv(1); s.close()
"
wait "$SERVER_PID"; SERVER_PID=""
sleep 1.5  # let tcpdump drain its ring before it is stopped
kill "$TCPDUMP_PID"; wait "$TCPDUMP_PID" 2>/dev/null || true; TCPDUMP_PID=""

DROPS=$(ip netns exec "$NS_R" nft list table inet "$TAG" | sed -n 's/.*counter packets \([0-9]*\).*/\1/p')
RECEIVED=$(cat "$TMP/received")
[ "$RECEIVED" = "$SIZE" ] || { echo "receiver got $RECEIVED of $SIZE bytes" >&2; exit 1; }

tcptrace -l -r -n "$TMP/golden.pcap" >"$TMP/long.txt"
# A capture missing its SYN or FIN would make a poor reference.
grep -q 'complete conn: yes' "$TMP/long.txt" || { cat "$TMP/tcpdump.log" >&2; echo "incomplete capture" >&2; exit 1; }
cp "$TMP/golden.pcap" "$OUT/golden.pcap"

# First token after "LABEL:" in the a->b (column 1) or b->a (column 2) half
# of tcptrace's two-column lines.
num() {  # num LABEL COLUMN
    awk -v lab="$1:" -v col="$2" '
        {
            # Only the two-column lines hold the label twice; this skips the
            # per-connection header ("total packets:" appears there too).
            rest = $0; hits = 0
            while ((p = index(rest, lab)) > 0) { hits++; rest = substr(rest, p + length(lab)) }
            if (hits != 2) next
            rest = $0
            for (i = 1; i <= col; i++) {
                p = index(rest, lab)
                if (p == 0) next
                rest = substr(rest, p + length(lab))
            }
            split(rest, tok, " "); print tok[1]; exit
        }' "$TMP/long.txt"
}

CONNS=$(sed -n 's/^\([0-9]*\) TCP connections\{0,1\} traced:.*/\1/p' "$TMP/long.txt")
cat >"$OUT/golden_expected.json" <<EOF
{
  "transfer_bytes": $SIZE,
  "nft_drops": $DROPS,
  "connections": $CONNS,
  "a2b": {
    "unique_bytes": $(num "unique bytes sent" 1),
    "data_pkts": $(num "actual data pkts" 1),
    "data_bytes": $(num "actual data bytes" 1),
    "rexmt_pkts": $(num "rexmt data pkts" 1),
    "rexmt_bytes": $(num "rexmt data bytes" 1),
    "sack_pkts": $(num "sacks sent" 1),
    "rtt_samples": $(num "RTT samples" 1),
    "rtt_min_ms": $(num "RTT min" 1),
    "rtt_max_ms": $(num "RTT max" 1),
    "rtt_avg_ms": $(num "RTT avg" 1),
    "rtt_stdev_ms": $(num "RTT stdev" 1),
    "dup_acks": $(num "duplicate acks" 1),
    "triple_dupacks": $(num "triple dupacks" 1),
    "throughput_Bps": $(num "throughput" 1),
    "max_win_adv": $(num "max win adv" 1),
    "total_pkts": $(num "total packets" 1)
  },
  "b2a": {
    "unique_bytes": $(num "unique bytes sent" 2),
    "sack_pkts": $(num "sacks sent" 2),
    "max_win_adv": $(num "max win adv" 2),
    "total_pkts": $(num "total packets" 2)
  }
}
EOF
echo "wrote $OUT/golden.pcap ($(stat -c %s "$OUT/golden.pcap") bytes), $DROPS drops" >&2
