# Transparent split-TCP interception on an IP-less Linux bridge, shared by
# the PEP adapters (POSIX sh; needs ip and nft only). Source this file, then
# call intercept_setup / intercept_teardown inside the PEP's namespace.
#
# How a frame reaches the proxy (docs/components/pepd.md, "Interception"):
#  1. bridge prerouting: TCP frames from a port are marked and rewritten to
#     the bridge's own MAC with pkttype host, so the bridge hands them to
#     the IP stack instead of forwarding them.
#  2. ip prerouting: packets of sockets the proxy already owns (transparent
#     sockets) get fwmark bit 1; a SYN from a port with interception on is
#     sent to the proxy's TPROXY port, also with bit 1.
#  3. fwmark 1/1 -> table 100 -> "local 0.0.0.0/0 dev lo": delivered locally
#     whatever the destination address. (1/1, not 1: the TPROXY mark is
#     OR-ed into the port mark.)
#  4. A split flow whose proxy sockets are gone (the proxy reset the pair:
#     no TIME_WAIT socket) still gets late packets from its peers, e.g. a
#     retransmitted FIN or a RST from the WAN host. Routed on, they would
#     reach the other host with the other leg's sequence numbers (a bogus
#     4 GB jump in its stream). So every diverted SYN puts its 4-tuple, both
#     ways round, into the timed set @split, every packet a proxy socket
#     takes refreshes it, and a packet of a tuple in @split that no socket
#     takes is dropped. SYNs are diverted before that drop, so a new
#     connection on a reused tuple is split again; a SYN not diverted
#     (proxy not listening) removes its tuple, so its flow passes unsplit;
#     flows never diverted never enter the set and pass as before.
#  5. Everything else (a TCP flow the proxy does not own, e.g. while it
#     refuses new connections) is routed back out of the bridge unsplit,
#     hence ip_forward=1 and no ICMP redirects. Routing costs a hop of TTL,
#     which a bridge must not: the last rule adds it back first (a vmap on
#     the TTL into one-rule chains; this nft cannot set a field from a map).
#
# Variables (set before calling, defaults in brackets):
#   INTERCEPT_TABLE   nft table name in the bridge and ip families [satbed_pep]
#   INTERCEPT_RTABLE  routing table for the local route [100]
#   INTERCEPT_SAVE    file to remember sysctl values and routes we changed
#                     [$SATBED_STATE_DIR/intercept.saved]
#   INTERCEPT_QUEUE   NFQUEUE number for the end-to-end handshake [empty: off].
#                     Intercepted SYNs are queued (iptables raw PREROUTING,
#                     before the TPROXY rule) for the proxy to release once
#                     its upstream connect succeeded; a SYN released with
#                     mark bit 8 (upstream refused) is routed instead of
#                     diverted and answered with a TCP reset by the forward
#                     chain. Needs iptables (this kernel has xt_NFQUEUE but
#                     not nft's queue expression).
#
# intercept_setup BRIDGE LAN WAN LAN_PORT [WAN_PORT]
#   SYNs arriving on LAN go to TPROXY port LAN_PORT (mark 2); SYNs arriving
#   on WAN go to WAN_PORT (mark 4) if given, else are not intercepted (a
#   one-directional PEP such as PEPsal). Other TCP frames from both ports
#   go to the IP stack so replies reach the proxy's sockets. Prints one
#   error line and returns non-zero on failure (after undoing itself).
# intercept_teardown BRIDGE
#   Removes everything setup added and restores the saved sysctls.
#   Idempotent.

INTERCEPT_TABLE=${INTERCEPT_TABLE:-satbed_pep}
INTERCEPT_RTABLE=${INTERCEPT_RTABLE:-100}
INTERCEPT_SAVE=${INTERCEPT_SAVE:-${SATBED_STATE_DIR:-/tmp}/intercept.saved}
# A metric nobody else uses marks the on-link route as ours for teardown.
INTERCEPT_METRIC=4242

# How long a split flow's tuple outlives its last packet taken by a proxy
# socket: late packets are dropped for that long. It covers a peer's FIN
# retransmissions (8 with backoff: ~4 min at a 1 s satellite RTO).
INTERCEPT_SPLIT_TIMEOUT=5m

_icpt_err() { echo "$*" >&2; }

# _icpt_split_delete: a SYN not diverted (the proxy closed its listener,
# e.g. overflow=passthrough, or is gone) starts an unsplit flow; its tuple
# must leave @split, or the flow's own packets would be dropped.
_icpt_split_delete() {
	printf '%s' 'delete @split { ip saddr . tcp sport . ip daddr . tcp dport } delete @split { ip daddr . tcp dport . ip saddr . tcp sport }'
}

# _icpt_split_update: the statements (re)adding a packet's 4-tuple, both
# ways round, to @split with the set's timeout. Placed after tproxy, so
# only a SYN that found the proxy's listener enters; a SYN passed unsplit
# (proxy not listening) does not.
_icpt_split_update() {
	printf '%s' 'update @split { ip saddr . tcp sport . ip daddr . tcp dport } update @split { ip daddr . tcp dport . ip saddr . tcp sport }'
}

# _icpt_ttl_chains: chains ttlN setting TTL N+1, for N = 1..254 (255
# cannot grow; such a packet leaves with 254).
_icpt_ttl_chains() {
	i=1
	while [ "$i" -le 254 ]; do
		echo "	chain ttl$i { ip ttl set $((i + 1)); }"
		i=$((i + 1))
	done
}

# _icpt_ttl_vmap: the "N : goto ttlN" elements for the chains above.
_icpt_ttl_vmap() {
	i=1
	while [ "$i" -le 254 ]; do
		[ "$i" -gt 1 ] && printf ', '
		printf '%d : goto ttl%d' "$i" "$i"
		i=$((i + 1))
	done
}

_icpt_mac() {
	ip -o link show dev "$1" 2>/dev/null | sed -n 's/.*link\/ether \([0-9a-fA-F:]*\).*/\1/p'
}

# _icpt_sysctl PATH VALUE: set a /proc/sys value, remembering the old one.
_icpt_sysctl() {
	[ -w "$1" ] || return 0
	old=$(cat "$1" 2>/dev/null) || return 0
	if ! grep -q "^sysctl $1 " "$INTERCEPT_SAVE" 2>/dev/null; then
		echo "sysctl $1 $old" >>"$INTERCEPT_SAVE"
	fi
	echo "$2" >"$1"
}

intercept_setup() {
	br=$1 lan=$2 wan=$3 lport=$4 wport=${5:-}
	for tool in ip nft; do
		command -v "$tool" >/dev/null 2>&1 || { _icpt_err "intercept: required tool '$tool' not found in PATH"; return 1; }
	done
	for dev in "$br" "$lan" "$wan"; do
		ip link show dev "$dev" >/dev/null 2>&1 || { _icpt_err "intercept: interface '$dev' not found"; return 1; }
	done
	# Leftovers of a run that died without stop would duplicate rules.
	intercept_teardown "$br"
	mac=$(_icpt_mac "$br")
	[ -n "$mac" ] || { _icpt_err "intercept: cannot read MAC address of bridge '$br'"; return 1; }
	: >>"$INTERCEPT_SAVE" || { _icpt_err "intercept: cannot write $INTERCEPT_SAVE"; return 1; }

	# Frames the bridge hands up must not also be fed to iptables as
	# bridged traffic, or TPROXY would see them twice.
	_icpt_sysctl /proc/sys/net/bridge/bridge-nf-call-iptables 0
	_icpt_sysctl /proc/sys/net/ipv4/ip_forward 1
	_icpt_sysctl /proc/sys/net/ipv4/conf/all/send_redirects 0
	_icpt_sysctl "/proc/sys/net/ipv4/conf/$br/send_redirects" 0

	refuse_rule="" forward_chain=""
	if [ -n "${INTERCEPT_QUEUE:-}" ]; then
		command -v iptables >/dev/null 2>&1 || { _icpt_err "intercept: handshake=end-to-end needs iptables (NFQUEUE), not found in PATH"; return 1; }
		refuse_rule="meta mark & 8 == 8 accept"
		forward_chain="chain forward { type filter hook forward priority 0; policy accept; meta mark & 8 == 8 reject with tcp reset; }"
	fi
	if [ -n "$wport" ]; then
		wan_rule="iifname \"$wan\" ip protocol tcp meta mark set 4 meta pkttype set host ether daddr set $mac"
		wan_tproxy="meta mark & 4 == 4 tcp flags & (syn|ack) == syn tproxy to :$wport meta mark set meta mark | 1 $(_icpt_split_update) accept"
	else
		wan_rule="iifname \"$wan\" ip protocol tcp meta pkttype set host ether daddr set $mac"
		wan_tproxy=""
	fi
	if ! nft -f - <<EOF
table bridge $INTERCEPT_TABLE {
	chain prerouting {
		type filter hook prerouting priority -300; policy accept;
		iifname "$lan" ip protocol tcp meta mark set 2 meta pkttype set host ether daddr set $mac
		$wan_rule
	}
}
table ip $INTERCEPT_TABLE {
	set split {
		type ipv4_addr . inet_service . ipv4_addr . inet_service
		flags dynamic, timeout
		timeout $INTERCEPT_SPLIT_TIMEOUT
		size 65536
	}
	chain prerouting {
		type filter hook prerouting priority -150; policy accept;
		$refuse_rule
		meta l4proto tcp socket transparent 1 meta mark set meta mark | 1 $(_icpt_split_update) accept
		meta mark & 2 == 2 tcp flags & (syn|ack) == syn tproxy to :$lport meta mark set meta mark | 1 $(_icpt_split_update) accept
		$wan_tproxy
		meta l4proto tcp tcp flags & (syn|ack) == syn $(_icpt_split_delete)
		meta l4proto tcp ip saddr . tcp sport . ip daddr . tcp dport @split counter drop
		meta l4proto tcp ip ttl vmap { $(_icpt_ttl_vmap) }
	}
	$forward_chain
$(_icpt_ttl_chains)
}
EOF
	then
		_icpt_err "intercept: nft rejected the interception rules (kernel without nft tproxy/socket support?)"
		intercept_teardown "$br"
		return 1
	fi

	if [ -n "${INTERCEPT_QUEUE:-}" ]; then
		for m in 2 4; do
			[ "$m" = 4 ] && [ -z "$wport" ] && continue
			if ! out=$(iptables -w -t raw -A PREROUTING $(_icpt_queue_rule "$m") 2>&1); then
				_icpt_err "intercept: iptables rejected the SYN queue rule: $out"
				intercept_teardown "$br"
				return 1
			fi
		done
		echo "queue $INTERCEPT_QUEUE" >>"$INTERCEPT_SAVE"
	fi
	if ! ip rule show | grep -q "fwmark 0x1/0x1 lookup $INTERCEPT_RTABLE"; then
		ip rule add fwmark 1/1 lookup "$INTERCEPT_RTABLE" || { _icpt_err "intercept: ip rule add fwmark 1/1 lookup $INTERCEPT_RTABLE failed"; intercept_teardown "$br"; return 1; }
	fi
	# Diverted packets are delivered through lo.
	ip link set dev lo up
	ip route replace local 0.0.0.0/0 dev lo table "$INTERCEPT_RTABLE" ||
		{ _icpt_err "intercept: cannot add local route to table $INTERCEPT_RTABLE"; intercept_teardown "$br"; return 1; }
	ip link set dev "$br" up
	# The bridge has no address; an on-link default route lets the proxy
	# reach both end hosts (any subnet) through it.
	ip route replace default dev "$br" metric "$INTERCEPT_METRIC" ||
		{ _icpt_err "intercept: cannot add on-link route via $br"; intercept_teardown "$br"; return 1; }
	return 0
}

# _icpt_queue_rule MARK [QUEUE]: the iptables match and target queueing the
# SYNs from the port marked MARK. --queue-bypass: with nobody bound to the
# queue (the proxy died) SYNs go on to TPROXY, find no listener and pass
# unsplit, as they do in the local handshake mode; the proxy binds the
# queue before these rules exist, so no SYN bypasses a running proxy.
_icpt_queue_rule() {
	echo "-p tcp --tcp-flags SYN,ACK SYN -m mark --mark $1/$1 -j NFQUEUE --queue-num ${2:-$INTERCEPT_QUEUE} --queue-bypass"
}

intercept_teardown() {
	br=$1
	nft delete table bridge "$INTERCEPT_TABLE" 2>/dev/null
	nft delete table ip "$INTERCEPT_TABLE" 2>/dev/null
	while ip rule del fwmark 1/1 lookup "$INTERCEPT_RTABLE" 2>/dev/null; do :; done
	ip route del local 0.0.0.0/0 dev lo table "$INTERCEPT_RTABLE" 2>/dev/null
	ip route del default dev "$br" metric "$INTERCEPT_METRIC" 2>/dev/null
	if [ -f "$INTERCEPT_SAVE" ]; then
		q=$(sed -n 's/^queue //p' "$INTERCEPT_SAVE" | head -n 1)
		if [ -n "$q" ]; then
			for m in 2 4; do
				while iptables -w -t raw -D PREROUTING $(_icpt_queue_rule "$m" "$q") 2>/dev/null; do :; done
			done
			# iptables-nft leaves its (now empty) raw table behind; the
			# namespace is the PEP's own, so an empty one was ours.
			if ! iptables -w -t raw -S 2>/dev/null | grep -q '^-A'; then
				nft delete table ip raw 2>/dev/null
			fi
		fi
		while read -r kind path val; do
			[ "$kind" = sysctl ] && [ -w "$path" ] && echo "$val" >"$path"
		done <"$INTERCEPT_SAVE"
		rm -f "$INTERCEPT_SAVE"
	fi
	return 0
}
