"""RTT and SACK figures computed from every packet of a capture.

tcptrace 6.6.7 takes RTT samples only from segments that were never
retransmitted and stops trusting a connection's timing after early loss (Karn's
rule applied with a long memory), so under BER it keeps a handful of samples
from the first seconds of a transfer: avg/max read one satellite RTT while the
ACKs of the rest of the transfer took two to eight.  Its "sacks sent" counts
ACKs carrying a SACK option, not the blocks in them.

So both are computed here, the way Wireshark's TCP analysis does (its
tcp.analysis.ack_rtt and tcp.options.sack.count), because that is the figure
researchers cross-check against:

* Every segment with payload, SYN or FIN is remembered with its capture time and
  next sequence number, retransmissions included (at most 10,000 unacknowledged
  at once, Wireshark's TCP_MAX_UNACKED_SEGMENTS).
* An ACK forgets every remembered segment it covers; if one of them ends exactly
  at the ACK number, the ACK is an RTT sample: its time minus the time of the
  *oldest* such segment.  A segment that was retransmitted therefore measures
  from its first transmission: the delay the application saw, loss recovery
  included.
* SACK blocks are the (left, right) pairs in the SACK option, summed over the
  ACKs of the reverse direction.

The samples describe the path as seen from the capture point: at the sender's
port the full RTT, at a port in the middle the part from there to the receiver
and back.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from .pcap import TH_ACK, TH_FIN, TH_SYN, Packets, TcpPacket, columns, unwrap

MOD = 1 << 32
# Wireshark stops remembering segments beyond this many unacknowledged ones.
MAX_UNACKED = 10000


class Unwrapper:
    """32-bit sequence numbers -> monotonic-ish integers (wrap-safe)."""

    def __init__(self) -> None:
        self.last: int | None = None

    def __call__(self, seq: int) -> int:
        if self.last is None:
            self.last = seq
            return seq
        d = (seq - self.last) % MOD
        if d >= MOD // 2:
            d -= MOD
        self.last += d
        return self.last


@dataclass
class RttStats:
    samples: int = 0
    min_ms: float | None = None
    avg_ms: float | None = None
    max_ms: float | None = None
    stdev_ms: float | None = None
    # (capture time, rtt ms) of every sample, for the RTT graph.
    series: list[tuple[float, float]] = field(default_factory=list)

    def to_dict(self, with_series: bool = False) -> dict[str, Any]:
        # Not asdict: it would deep-copy every sample of the series first.
        d = {"samples": self.samples, "min_ms": self.min_ms, "avg_ms": self.avg_ms,
             "max_ms": self.max_ms, "stdev_ms": self.stdev_ms}
        if with_series:
            d["series"] = list(self.series)
        return d


@dataclass
class SackStats:
    blocks: int = 0  # SACK blocks in all ACKs of the direction
    acks_with_sack: int = 0
    max_blocks_per_ack: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _split(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host, int(port)


def ack_rtt(packets: Packets, sender: str, receiver: str) -> RttStats:
    """RTT samples for data sender -> receiver ("ip:port"), Wireshark's way.

    On arrays: a remembered segment is forgotten by the first ACK after it
    whose number reaches its end, found for all segments at once by a binary
    search over a table of the ACK numbers' range maxima. Wireshark's limit of
    remembered segments changes which are remembered only when it is reached;
    then the segments are walked one by one (ack_rtt_walk)."""
    cols = columns(packets)
    s, r = cols.endpoint(sender), cols.endpoint(receiver)
    fl = cols.flags
    seg = cols.flow(s, r) & ((cols.payload > 0) | ((fl & (TH_SYN | TH_FIN)) != 0))
    ackm = cols.flow(r, s) & ((fl & TH_ACK) != 0)
    seg_at, ack_at = np.flatnonzero(seg), np.flatnonzero(ackm)
    if len(seg_at) == 0 or len(ack_at) == 0:
        return _rtt_stats([])
    # The sender's sequence space and the receiver's ACK numbers share one unwrapping.
    both = np.flatnonzero(seg | ackm)
    values = np.where(seg[both], cols.seq[both], cols.ack[both])
    unwrapped = np.empty(len(cols), dtype=np.int64)
    unwrapped[both] = unwrap(values)
    nxt = unwrapped[seg_at] + cols.payload[seg_at] + ((fl[seg_at] & (TH_SYN | TH_FIN)) != 0)
    acks = unwrapped[ack_at]
    # The first ACK after each segment, and the first from there that covers it.
    first = np.searchsorted(ack_at, seg_at)
    popped_by = _first_at_least(acks, first, nxt)
    # Remembered at once: pushed so far minus forgotten so far, at each push.
    forgotten = np.bincount(popped_by[popped_by < len(acks)], minlength=len(acks)).cumsum()
    before = np.concatenate([[0], forgotten])[first]        # forgotten before each segment arrived
    if (np.arange(len(seg_at)) - before).max(initial=0) >= MAX_UNACKED:
        return ack_rtt_walk(cols.packets(), sender, receiver)
    hit = (popped_by < len(acks))
    hit[hit] &= nxt[hit] == acks[popped_by[hit]]
    # Per ACK, the oldest remembered segment that ends at its number.
    ack_idx, seg_idx = popped_by[hit], np.flatnonzero(hit)
    order = np.lexsort((seg_idx, ack_idx))
    ack_idx, seg_idx = ack_idx[order], seg_idx[order]
    lead = np.concatenate([[True], ack_idx[1:] != ack_idx[:-1]]) if len(ack_idx) else np.zeros(0, bool)
    t_ack = cols.ts[ack_at[ack_idx[lead]]]
    rtt = (t_ack - cols.ts[seg_at[seg_idx[lead]]]) * 1000.0
    return _rtt_stats(list(zip(t_ack.tolist(), rtt.tolist())))


def _first_at_least(values: np.ndarray, start: np.ndarray, want: np.ndarray) -> np.ndarray:
    """For each query, the first index i >= start with values[i] >= want, else len(values).

    A sparse table of maxima over power-of-two spans, then for all queries
    at once the largest jumps over spans whose maximum falls short."""
    n = len(values)
    table = [values]
    while (1 << len(table)) <= n:
        prev, half = table[-1], 1 << (len(table) - 1)
        table.append(np.maximum(prev[:-half], prev[half:]))
    pos = start.copy()
    for k in range(len(table) - 1, -1, -1):
        span = table[k]
        can = pos < len(span)
        idx = np.flatnonzero(can)
        short = span[pos[idx]] < want[idx]
        pos[idx[short]] += 1 << k
    return np.minimum(pos, n)


def ack_rtt_walk(packets: Sequence[TcpPacket], sender: str, receiver: str) -> RttStats:
    """ack_rtt one segment at a time, with Wireshark's limit of remembered segments."""
    s, r = _split(sender), _split(receiver)
    seq_unwrap = Unwrapper()
    # The sender's sequence space and the receiver's ACK numbers share one unwrapper.
    pending: list[tuple[int, int, float]] = []  # (nextseq, arrival order, time)
    order = 0
    samples: list[tuple[float, float]] = []
    for p in packets:
        key_src = (p.src, p.sport)
        key_dst = (p.dst, p.dport)
        if key_src == s and key_dst == r:
            if (p.payload > 0 or p.syn or p.fin) and len(pending) < MAX_UNACKED:
                nxt = seq_unwrap(p.seq) + p.payload + (1 if (p.syn or p.fin) else 0)
                heapq.heappush(pending, (nxt, order, p.ts))
                order += 1
        elif key_src == r and key_dst == s and p.has_ack and pending:
            ack = seq_unwrap(p.ack)
            matched: float | None = None
            while pending and pending[0][0] <= ack:
                nxt, _, ts = heapq.heappop(pending)
                # Equal next-sequence entries pop oldest first: the first match wins.
                if nxt == ack and matched is None:
                    matched = ts
            if matched is not None:
                samples.append((p.ts, (p.ts - matched) * 1000.0))
    return _rtt_stats(samples)


def _rtt_stats(samples: list[tuple[float, float]]) -> RttStats:
    if not samples:
        return RttStats()
    vals = [v for _, v in samples]
    n = len(vals)
    avg = sum(vals) / n
    # Sample standard deviation, as tcptrace prints it.
    sd = math.sqrt(sum((v - avg) ** 2 for v in vals) / (n - 1)) if n > 1 else 0.0
    return RttStats(samples=n, min_ms=min(vals), avg_ms=avg, max_ms=max(vals),
                    stdev_ms=sd, series=samples)


def sack_stats(packets: Packets, sender: str, receiver: str) -> SackStats:
    """SACK blocks the receiver sent back for sender -> receiver data."""
    cols = columns(packets)
    blocks = cols.sack[cols.flow(cols.endpoint(receiver), cols.endpoint(sender)) & (cols.sack > 0)]
    return SackStats(blocks=int(blocks.sum()), acks_with_sack=len(blocks),
                     max_blocks_per_ack=int(blocks.max(initial=0)))


@dataclass
class Retransmissions:
    """Data segments that start below the highest sequence already seen here.

    That is the sender's retransmissions as they pass this capture point,
    including those that fill a hole left by a loss upstream; Wireshark flags
    exactly these (tcp.analysis.retransmission, fast_retransmission,
    spurious_retransmission or out_of_order together).  tcptrace's "rexmt data
    pkts" counts only bytes this capture saw twice, so next to the receiver it
    reads ~0 however much the sender resent.
    """
    pkts: int = 0
    bytes: int = 0
    first: float | None = None  # capture time of the first one

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def retransmissions(packets: Packets, sender: str, receiver: str) -> Retransmissions:
    cols = columns(packets)
    data = np.flatnonzero(cols.flow(cols.endpoint(sender), cols.endpoint(receiver)) & (cols.payload > 0))
    seq = unwrap(cols.seq[data])
    end = seq + cols.payload[data]
    # Below the highest end of the data before it.
    again = np.flatnonzero(seq[1:] < np.maximum.accumulate(end)[:-1]) + 1
    return Retransmissions(pkts=len(again), bytes=int(cols.payload[data[again]].sum()),
                           first=float(cols.ts[data[again[0]]]) if len(again) else None)
