"""Build small classic pcaps with hand-made TCP conversations (no root needed)."""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass
from pathlib import Path

SYN, FIN, ACK, PSH = 0x02, 0x01, 0x10, 0x08


@dataclass
class Seg:
    ts: float
    src: str
    sport: int
    dst: str
    dport: int
    seq: int
    ack: int
    flags: int
    payload: int = 0
    win: int = 65535


def frame(s: Seg) -> tuple[bytes, int]:
    """Headers only (like tcpdump -s 54); returns (captured bytes, wire length)."""
    tcp = struct.pack(">HHIIHHHH", s.sport, s.dport, s.seq & 0xFFFFFFFF, s.ack & 0xFFFFFFFF,
                      (5 << 12) | s.flags, s.win, 0, 0)
    total = 20 + len(tcp) + s.payload
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, total, 0, 0x4000, 64, 6, 0,
                     ipaddress.IPv4Address(s.src).packed, ipaddress.IPv4Address(s.dst).packed)
    eth = b"\x02\x00\x00\x00\x00\x01\x02\x00\x00\x00\x00\x02\x08\x00"
    head = eth + ip + tcp
    return head, len(head) + s.payload


def write_pcap(path: Path, segs: list[Seg]) -> Path:
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    for s in sorted(segs, key=lambda x: x.ts):
        data, wire = frame(s)
        usec_total = int(round(s.ts * 1e6))  # rounding per part could yield usec == 1e6
        sec, usec = divmod(usec_total, 1_000_000)
        out.append(struct.pack("<IIII", sec, usec, len(data), wire) + data)
    path.write_bytes(b"".join(out))
    return path


def two_connections(t0: float = 1_700_000_000.0) -> list[Seg]:
    """A small control connection, then a 40 kB download server -> client.

    Captured next to the client: the server is 300 ms away (SYN -> SYN/ACK),
    the client 0.1 ms.  Segment 10 is sent twice (one retransmission).
    """
    c, s = "10.99.99.2", "10.99.99.254"
    segs: list[Seg] = []
    # Connection 1: client 40000 -> server 21, 100 bytes each way.
    segs += [Seg(t0, c, 40000, s, 21, 1000, 0, SYN),
             Seg(t0 + 0.3, s, 21, c, 40000, 5000, 1001, SYN | ACK),
             Seg(t0 + 0.3001, c, 40000, s, 21, 1001, 5001, ACK),
             Seg(t0 + 0.31, c, 40000, s, 21, 1001, 5001, ACK | PSH, 100),
             Seg(t0 + 0.61, s, 21, c, 40000, 5001, 1101, ACK | PSH, 100),
             Seg(t0 + 0.6101, c, 40000, s, 21, 1101, 5101, ACK)]
    # Connection 2: client 40001 opens, server 20 sends 40 x 1000 bytes.
    t = t0 + 1.0
    cs, ss = 7000, 90000
    segs += [Seg(t, c, 40001, s, 20, cs, 0, SYN),
             Seg(t + 0.3, s, 20, c, 40001, ss, cs + 1, SYN | ACK),
             Seg(t + 0.3001, c, 40001, s, 20, cs + 1, ss + 1, ACK)]
    t += 0.6
    for i in range(40):
        seq = ss + 1 + i * 1000
        segs.append(Seg(t, s, 20, c, 40001, seq, cs + 1, ACK, 1000))
        segs.append(Seg(t + 0.0001, c, 40001, s, 20, cs + 1, seq + 1000, ACK))
        t += 0.01
    again = ss + 1 + 10 * 1000
    segs.append(Seg(t, s, 20, c, 40001, again, cs + 1, ACK, 1000))
    segs.append(Seg(t + 0.0001, c, 40001, s, 20, cs + 1, ss + 1 + 40000, ACK))
    t += 0.01
    end = ss + 1 + 40000
    segs += [Seg(t, s, 20, c, 40001, end, cs + 1, FIN | ACK),
             Seg(t + 0.0001, c, 40001, s, 20, cs + 1, end + 1, FIN | ACK),
             Seg(t + 0.3001, s, 20, c, 40001, end + 1, cs + 2, ACK)]
    return segs
