"""Sender-view and receiver-view throughput, as the TCP spoofing study defines them.

The study (ns-2, one global clock) measures a transfer from its start to

* sender view: the moment the sender RECEIVES the last ACK, and
* receiver view: the moment the receiver SENDS the last ACK,

and divides the data bytes by each duration.  The start is the FIRST SYN: a
retransmitted SYN is time the application waited.  A capture gives every event at
one vantage point V instead, so the times at the end hosts are reconstructed
from V's position on the path, which the three-way handshake reveals:

    SYN seen at t1, SYN/ACK at t2, the initiator's ACK at t3
    rtt(V <-> responder) = t2 - t1,   rtt(V <-> initiator) = t3 - t2

With the final ACK (the first ACK from the receiver that covers the last data
byte) seen at V at time tA, and one-way delays taken as half of those RTTs:

    start         = t1 - rtt(V <-> initiator) / 2       (the initiator sent the SYN)
    sender end    = tA + rtt(V <-> sender) / 2          (ACK travels on to the sender)
    receiver end  = tA - rtt(V <-> receiver) / 2        (ACK left the receiver earlier)

At a vantage right next to the sender rtt(V <-> sender) ~ 0, so the sender view
is simply "last ACK seen - SYN seen"; next to the receiver the receiver view is.
Without a SYN in the capture the first data segment is the start and the
missing RTT parts count as zero (reported in "method").  Data bytes are the
bytes acknowledged (highest sequence acknowledged minus the first data sequence):
what the application moved, independent of retransmissions.  A transfer cut
short (a time limit, a stall) is measured up to the highest cumulative ACK
(complete = False).

When a PEP splits the connection, each capture sees the segment it is on (e.g.
lan_a: client <-> PEP A), so the values describe that segment's endpoints;
analysis.run.end_to_end combines the LAN captures into the whole transfer's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .acks import Unwrapper
from .pcap import TcpPacket


@dataclass
class SpoofingThroughput:
    data_bytes: int
    start: float  # epoch seconds, reconstructed at the initiator
    last_ack_at_vantage: float
    rtt_vantage_sender_ms: float
    rtt_vantage_receiver_ms: float
    sender_view_s: float
    receiver_view_s: float
    sender_bps: float
    receiver_bps: float
    method: str
    sender_end: float | None = None  # epoch seconds, reconstructed at the sender
    receiver_end: float | None = None  # ... at the receiver
    initiator: str | None = None  # "ip:port" that sent the SYN
    complete: bool = True  # False: the capture ends before the last byte was acknowledged
    first_syn: float | None = None  # capture time of the first SYN at this vantage

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _split(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host, int(port)


def spoofing_throughput(packets: list[TcpPacket], sender: str,
                        receiver: str) -> SpoofingThroughput | None:
    """Compute both views for data flowing sender -> receiver ("ip:port").

    Returns None when the capture holds no data or no ACK for any of it.
    """
    s = _split(sender)
    r = _split(receiver)
    fwd = [p for p in packets if (p.src, p.sport) == s and (p.dst, p.dport) == r]
    rev = [p for p in packets if (p.src, p.sport) == r and (p.dst, p.dport) == s]
    data = [p for p in fwd if p.payload > 0]
    if not data:
        return None
    acks = [p for p in rev if p.has_ack and not p.syn]
    if not acks:
        return None
    # Data sequence and ACK numbers unwrapped in capture order with one
    # unwrapper (one sequence space): transfers beyond 4 GB wrap it.
    unwrap = Unwrapper()
    seq_of: dict[int, int] = {}
    ack_of: dict[int, int] = {}
    for p in sorted(data + acks, key=lambda p: p.ts):
        if p.payload > 0 and (p.src, p.sport) == s:
            seq_of[id(p)] = unwrap(p.seq)
        else:
            ack_of[id(p)] = unwrap(p.ack)
    first = min(seq_of.values())
    sent_end = max(seq_of[id(p)] + p.payload for p in data)
    # A time-limited transfer is stopped before its last byte is acknowledged:
    # measure what it delivered, up to the highest cumulative ACK.
    end = min(sent_end, max(ack_of.values()))
    if end <= first:
        return None
    last_ack = next(p for p in acks if ack_of[id(p)] >= end)
    method_parts: list[str] = []
    if end < sent_end:
        method_parts.append(f"cut short: {sent_end - end} bytes sent but never acknowledged")

    rtt_s = rtt_r = 0.0
    syns = [p for p in packets if p.syn and not p.has_ack
            and {(p.src, p.sport), (p.dst, p.dport)} == {s, r}]
    start: float
    initiator: tuple[str, int] | None = None
    if syns:
        # The transfer starts with the first SYN: a retransmitted SYN is part
        # of the time the application waited.
        first_syn, syn = syns[0], syns[-1]
        initiator = (syn.src, syn.sport)
        synack = next((p for p in packets if p.syn and p.has_ack and p.ts >= syn.ts
                       and (p.src, p.sport) == (syn.dst, syn.dport)
                       and (p.dst, p.dport) == (syn.src, syn.sport)), None)
        if synack is not None:
            ack3 = next((p for p in packets if p.ts >= synack.ts and p.has_ack and not p.syn
                         and (p.src, p.sport) == initiator
                         and (p.dst, p.dport) == (syn.dst, syn.dport)), None)
            # The last SYN is the one the SYN/ACK answers: the vantage's RTT to the responder.
            rtt_resp = synack.ts - syn.ts
            rtt_init = (ack3.ts - synack.ts) if ack3 is not None else 0.0
            if initiator == s:
                rtt_s, rtt_r = rtt_init, rtt_resp
            else:
                rtt_s, rtt_r = rtt_resp, rtt_init
            method_parts.append("handshake split")
            if len(syns) > 1:
                method_parts.append(f"{len(syns) - 1} SYN retransmission(s): start at the first SYN")
            if ack3 is None:
                method_parts.append("no third ACK: initiator side counted as 0")
            start = first_syn.ts - rtt_init / 2
        else:
            method_parts.append("no SYN/ACK: vantage RTTs counted as 0")
            start = first_syn.ts
    else:
        start = data[0].ts
        method_parts.append("no SYN: start at first data segment, vantage RTTs counted as 0")

    nbytes = end - first
    sender_end = last_ack.ts + rtt_s / 2
    receiver_end = last_ack.ts - rtt_r / 2
    sv = sender_end - start
    rv = receiver_end - start
    return SpoofingThroughput(
        data_bytes=nbytes,
        start=start,
        last_ack_at_vantage=last_ack.ts,
        rtt_vantage_sender_ms=rtt_s * 1000,
        rtt_vantage_receiver_ms=rtt_r * 1000,
        sender_view_s=sv,
        receiver_view_s=rv,
        sender_bps=8 * nbytes / sv if sv > 0 else 0.0,
        receiver_bps=8 * nbytes / rv if rv > 0 else 0.0,
        method="; ".join(method_parts),
        sender_end=sender_end,
        receiver_end=receiver_end,
        initiator=f"{initiator[0]}:{initiator[1]}" if initiator else None,
        complete=end >= sent_end,
        first_syn=syns[0].ts if syns else None,
    )


def direction_times(packets: list[TcpPacket]) -> dict[tuple[str, str], tuple[float, float]]:
    """First and last packet time per direction, keyed ("src:port", "dst:port").

    One pass over the capture: captures with hundreds of connections are common.
    """
    times: dict[tuple[str, int, str, int], list[float]] = {}
    for p in packets:
        key = (p.src, p.sport, p.dst, p.dport)
        t = times.get(key)
        if t is None:
            times[key] = [p.ts, p.ts]
        else:
            if p.ts < t[0]:
                t[0] = p.ts
            if p.ts > t[1]:
                t[1] = p.ts
    return {(f"{k[0]}:{k[1]}", f"{k[2]}:{k[3]}"): (v[0], v[1]) for k, v in times.items()}
