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

import numpy as np

from .pcap import TH_ACK, TH_SYN, Packets, columns, flows, unwrap


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


def spoofing_throughput(packets: Packets, sender: str,
                        receiver: str) -> SpoofingThroughput | None:
    """Compute both views for data flowing sender -> receiver ("ip:port").

    Returns None when the capture holds no data or no ACK for any of it.
    """
    cols = columns(packets)
    s, r = cols.endpoint(sender), cols.endpoint(receiver)
    fl, ts = cols.flags, cols.ts
    syn, has_ack = (fl & TH_SYN) != 0, (fl & TH_ACK) != 0
    fwd, rev = cols.flow(s, r), cols.flow(r, s)
    data = np.flatnonzero(fwd & (cols.payload > 0))
    if len(data) == 0:
        return None
    acks = np.flatnonzero(rev & has_ack & ~syn)
    if len(acks) == 0:
        return None
    # Data sequence and ACK numbers unwrapped in capture-time order with one
    # unwrapper (one sequence space): transfers beyond 4 GB wrap it. Data
    # before ACKs at equal times.
    merged = np.concatenate([data, acks])
    order = np.argsort(ts[merged], kind="stable")
    is_data = np.arange(len(merged))[order] < len(data)
    at = merged[order]
    values = unwrap(np.where(is_data, cols.seq[at], cols.ack[at]))
    seq_of = np.empty(len(data), dtype=np.int64)
    ack_of = np.empty(len(acks), dtype=np.int64)
    seq_of[order[is_data]] = values[is_data]
    ack_of[order[~is_data] - len(data)] = values[~is_data]
    first = int(seq_of.min())
    sent_end = int((seq_of + cols.payload[data]).max())
    # A time-limited transfer is stopped before its last byte is acknowledged:
    # measure what it delivered, up to the highest cumulative ACK.
    end = min(sent_end, int(ack_of.max()))
    if end <= first:
        return None
    last_ack_ts = float(ts[acks[np.flatnonzero(ack_of >= end)[0]]])
    method_parts: list[str] = []
    if end < sent_end:
        method_parts.append(f"cut short: {sent_end - end} bytes sent but never acknowledged")

    rtt_s = rtt_r = 0.0
    syns = np.flatnonzero(syn & ~has_ack & (fwd | rev))
    start: float
    initiator: tuple[int, int] | None = None
    if len(syns):
        # The transfer starts with the first SYN: a retransmitted SYN is part
        # of the time the application waited.
        first_syn, last = float(ts[syns[0]]), syns[-1]
        initiator = (int(cols.src[last]), int(cols.sport[last]))
        responder = (int(cols.dst[last]), int(cols.dport[last]))
        synack = _first(syn & has_ack & (ts >= ts[last]) & cols.flow(responder, initiator))
        if synack is not None:
            ack3 = _first((ts >= ts[synack]) & has_ack & ~syn & cols.flow(initiator, responder))
            # The last SYN is the one the SYN/ACK answers: the vantage's RTT to the responder.
            rtt_resp = float(ts[synack] - ts[last])
            rtt_init = float(ts[ack3] - ts[synack]) if ack3 is not None else 0.0
            if initiator == s:
                rtt_s, rtt_r = rtt_init, rtt_resp
            else:
                rtt_s, rtt_r = rtt_resp, rtt_init
            method_parts.append("handshake split")
            if len(syns) > 1:
                method_parts.append(f"{len(syns) - 1} SYN retransmission(s): start at the first SYN")
            if ack3 is None:
                method_parts.append("no third ACK: initiator side counted as 0")
            start = first_syn - rtt_init / 2
        else:
            method_parts.append("no SYN/ACK: vantage RTTs counted as 0")
            start = first_syn
    else:
        start = float(ts[data[0]])
        method_parts.append("no SYN: start at first data segment, vantage RTTs counted as 0")

    nbytes = end - first
    sender_end = last_ack_ts + rtt_s / 2
    receiver_end = last_ack_ts - rtt_r / 2
    sv = sender_end - start
    rv = receiver_end - start
    return SpoofingThroughput(
        data_bytes=nbytes,
        start=start,
        last_ack_at_vantage=last_ack_ts,
        rtt_vantage_sender_ms=rtt_s * 1000,
        rtt_vantage_receiver_ms=rtt_r * 1000,
        sender_view_s=sv,
        receiver_view_s=rv,
        sender_bps=8 * nbytes / sv if sv > 0 else 0.0,
        receiver_bps=8 * nbytes / rv if rv > 0 else 0.0,
        method="; ".join(method_parts),
        sender_end=sender_end,
        receiver_end=receiver_end,
        initiator=f"{cols.addrs[initiator[0]]}:{initiator[1]}" if initiator else None,
        complete=end >= sent_end,
        first_syn=float(ts[syns[0]]) if len(syns) else None,
    )


def _first(mask: np.ndarray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if len(hits) else None


def direction_times(packets: Packets) -> dict[tuple[str, str], tuple[float, float]]:
    """First and last packet time per direction, keyed ("src:port", "dst:port")."""
    cols = columns(packets)
    if len(cols) == 0:
        return {}
    rows, _, inverse = flows(cols.src, cols.sport, cols.dst, cols.dport, len(cols.addrs))
    first = np.full(len(rows), np.inf)
    last = np.full(len(rows), -np.inf)
    np.minimum.at(first, inverse, cols.ts)
    np.maximum.at(last, inverse, cols.ts)
    a = cols.addrs
    return {(f"{a[src]}:{sport}", f"{a[dst]}:{dport}"): (t0, t1)
            for (src, sport, dst, dport), t0, t1 in zip(rows.tolist(), first.tolist(), last.tolist())}
