"""Minimal classic-pcap reader for TCP header fields.

tcptrace reports per-connection statistics only; a few metrics (per-direction
first/last packet times, the handshake timing used to place a vantage point on
the path, the time of the final ACK) need the packets themselves.  Captures are
headers-only, so payload lengths come from the IP length fields, not from the
captured length.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, NamedTuple

MAGIC_US = 0xA1B2C3D4
MAGIC_NS = 0xA1B23C4D
MAGIC_PCAPNG = 0x0A0D0D0A

LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_RAW_ALT = 12
LINKTYPE_LINUX_SLL = 113
LINKTYPE_LINUX_SLL2 = 276

TH_FIN = 0x01
TH_SYN = 0x02
TH_RST = 0x04
TH_ACK = 0x10


class PcapError(Exception):
    """The file is not a readable classic pcap."""


class TcpPacket(NamedTuple):
    """One TCP segment's header fields. A NamedTuple, not a frozen dataclass:
    a 100 MB transfer's four captures make ~450k of them, and a frozen
    dataclass's __init__ (a setattr per field) was half of reading them."""
    ts: float
    src: str
    sport: int
    dst: str
    dport: int
    seq: int
    ack: int
    flags: int
    win: int
    payload: int
    # SACK blocks (left, right) the packet carried; () without the option or
    # when the snap length cut the options off.
    sack: tuple[tuple[int, int], ...] = ()

    @property
    def syn(self) -> bool:
        return bool(self.flags & TH_SYN)

    @property
    def fin(self) -> bool:
        return bool(self.flags & TH_FIN)

    @property
    def has_ack(self) -> bool:
        return bool(self.flags & TH_ACK)


@dataclass(frozen=True)
class UdpPacket:
    """A UDP datagram (Saratoga runs over UDP); payload from the UDP length."""
    ts: float
    src: str
    sport: int
    dst: str
    dport: int
    payload: int


@dataclass
class PcapSummary:
    linktype: int
    packets: list[TcpPacket] = field(default_factory=list)
    udp: list[UdpPacket] = field(default_factory=list)
    records: int = 0
    truncated: bool = False  # the file ends inside a record


def file_magic(path: Path) -> int | None:
    """First four bytes as a big-endian integer, or None if shorter."""
    with open(path, "rb") as f:
        head = f.read(4)
    if len(head) < 4:
        return None
    return struct.unpack(">I", head)[0]


def is_pcapng(path: Path) -> bool:
    return file_magic(path) == MAGIC_PCAPNG


def read_tcp(path: Path) -> PcapSummary:
    """Read every IPv4/IPv6 TCP packet (and UDP datagram); raise PcapError for a
    non-pcap file."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 24:
        raise PcapError(f"{path.name}: too short for a pcap header ({len(data)} bytes)")
    magic_le = struct.unpack("<I", data[:4])[0]
    if magic_le in (MAGIC_US, MAGIC_NS):
        endian = "<"
    elif struct.unpack(">I", data[:4])[0] in (MAGIC_US, MAGIC_NS):
        endian = ">"
    elif struct.unpack(">I", data[:4])[0] == MAGIC_PCAPNG:
        raise PcapError(f"{path.name}: pcapng, not classic pcap")
    else:
        raise PcapError(f"{path.name}: not a pcap file (magic {data[:4].hex()})")
    magic = struct.unpack(endian + "I", data[:4])[0]
    tsdiv = 1e9 if magic == MAGIC_NS else 1e6
    linktype = struct.unpack(endian + "I", data[20:24])[0] & 0x0FFFFFFF
    summary = PcapSummary(linktype=linktype)
    rec = struct.Struct(endian + "IIII")
    addrs: dict[bytes, str] = {}
    off = 24
    while off < len(data):
        if off + 16 > len(data):
            summary.truncated = True
            break
        sec, frac, caplen, _wirelen = rec.unpack_from(data, off)
        off += 16
        if caplen > 262144 or off + caplen > len(data):
            summary.truncated = True
            break
        summary.records += 1
        ts = sec + frac / tsdiv
        pkt = _fast_tcp(data, off, caplen, ts, addrs) if linktype == LINKTYPE_ETHERNET else None
        if pkt is None:
            pkt = _decode(data[off:off + caplen], linktype, ts)
        off += caplen
        if isinstance(pkt, TcpPacket):
            summary.packets.append(pkt)
        elif pkt is not None:
            summary.udp.append(pkt)
    return summary


# Ethernet, IPv4 without options, TCP: nearly every record of a testbed's
# capture, read with one unpack (a 100 MB transfer's four captures hold ~450k).
_ETH_IP4_TCP = struct.Struct(">12xHBxH2xHxB2x4s4sHHIIHH")


def _fast_tcp(data: bytes, off: int, caplen: int, ts: float, addrs: dict[bytes, str]) -> TcpPacket | None:
    """The record at off decoded as _decode would, or None where it is not an
    untagged Ethernet/IPv4/TCP frame without IP options (_decode reads those)."""
    if caplen < _ETH_IP4_TCP.size:
        return None
    (etype, vihl, total_len, frag, proto, src4, dst4,
     sport, dport, seq, ack, offflags, win) = _ETH_IP4_TCP.unpack_from(data, off)
    if etype != 0x0800 or vihl != 0x45 or proto != 6 or frag & 0x1FFF:
        return None
    src = addrs.get(src4) or addrs.setdefault(src4, socket.inet_ntoa(src4))
    dst = addrs.get(dst4) or addrs.setdefault(dst4, socket.inet_ntoa(dst4))
    hdr = (offflags >> 12) * 4
    sack: tuple[tuple[int, int], ...] = ()
    if hdr > 20:
        opts = data[off + 54:off + min(34 + hdr, caplen)]
        if b"\x05" in opts:  # no byte 5 anywhere: no SACK option to look for
            sack = _sack_blocks(opts)
    return _new_tcp(TcpPacket, (ts, src, sport, dst, dport, seq, ack, offflags & 0x3F, win,
                                max(0, total_len - 20 - hdr), sack))


_new_tcp = tuple.__new__  # TcpPacket from a ready tuple, without the keyword-argument __new__


def _decode(frame: bytes, linktype: int, ts: float) -> TcpPacket | UdpPacket | None:
    ethertype, off = _l3_start(frame, linktype)
    if off is None:
        return None
    try:
        if ethertype == 0x0800:
            return _decode_ipv4(frame, off, ts)
        if ethertype == 0x86DD:
            return _decode_ipv6(frame, off, ts)
    except (struct.error, IndexError, ValueError, OSError):
        return None  # snapped or malformed header (a short address: ValueError for IPv6, OSError for IPv4)
    return None


def _l3_start(frame: bytes, linktype: int) -> tuple[int, int | None]:
    if linktype == LINKTYPE_ETHERNET:
        if len(frame) < 14:
            return 0, None
        etype = struct.unpack_from(">H", frame, 12)[0]
        off = 14
        while etype in (0x8100, 0x88A8) and len(frame) >= off + 4:
            etype = struct.unpack_from(">H", frame, off + 2)[0]
            off += 4
        return etype, off
    if linktype == LINKTYPE_LINUX_SLL:
        if len(frame) < 16:
            return 0, None
        return struct.unpack_from(">H", frame, 14)[0], 16
    if linktype == LINKTYPE_LINUX_SLL2:
        if len(frame) < 20:
            return 0, None
        return struct.unpack_from(">H", frame, 0)[0], 20
    if linktype in (LINKTYPE_RAW, LINKTYPE_RAW_ALT):
        if not frame:
            return 0, None
        return (0x0800 if frame[0] >> 4 == 4 else 0x86DD), 0
    if linktype == LINKTYPE_NULL:
        if len(frame) < 4:
            return 0, None
        family = struct.unpack_from("<I", frame, 0)[0]
        return (0x0800 if family == 2 else 0x86DD), 4
    return 0, None


def _decode_ipv4(frame: bytes, off: int, ts: float) -> TcpPacket | UdpPacket | None:
    if len(frame) < off + 20:
        return None  # snapped inside the IP header (inet_ntoa would refuse a short address)
    vihl = frame[off]
    ihl = (vihl & 0x0F) * 4
    total_len = struct.unpack_from(">H", frame, off + 2)[0]
    frag = struct.unpack_from(">H", frame, off + 6)[0]
    proto = frame[off + 9]
    if proto not in (6, 17) or frag & 0x1FFF:
        return None
    # inet_ntoa: a 100 MB transfer's capture holds ~140k packets, and ipaddress costs a fifth of the read.
    src = socket.inet_ntoa(frame[off + 12:off + 16])
    dst = socket.inet_ntoa(frame[off + 16:off + 20])
    if proto == 17:
        return _decode_udp(frame, off + ihl, src, dst, ts)
    return _decode_tcp(frame, off + ihl, total_len - ihl, src, dst, ts)


def _decode_udp(frame: bytes, off: int, src: str, dst: str, ts: float) -> UdpPacket:
    sport, dport, length = struct.unpack_from(">HHH", frame, off)
    return UdpPacket(ts=ts, src=src, sport=sport, dst=dst, dport=dport, payload=max(0, length - 8))


def _decode_ipv6(frame: bytes, off: int, ts: float) -> TcpPacket | UdpPacket | None:
    payload_len = struct.unpack_from(">H", frame, off + 4)[0]
    nxt = frame[off + 6]
    if nxt not in (6, 17):
        return None  # extension headers are not followed; testbed traffic has none
    src = str(ipaddress.IPv6Address(frame[off + 8:off + 24]))
    dst = str(ipaddress.IPv6Address(frame[off + 24:off + 40]))
    if nxt == 17:
        return _decode_udp(frame, off + 40, src, dst, ts)
    return _decode_tcp(frame, off + 40, payload_len, src, dst, ts)


def _decode_tcp(frame: bytes, off: int, seg_len: int, src: str, dst: str,
                ts: float) -> TcpPacket | None:
    sport, dport, seq, ack, offflags, win = struct.unpack_from(">HHIIHH", frame, off)
    hdr = (offflags >> 12) * 4
    sack = _sack_blocks(frame[off + 20:off + hdr]) if hdr > 20 else ()
    return TcpPacket(ts=ts, src=src, sport=sport, dst=dst, dport=dport, seq=seq,
                     ack=ack, flags=offflags & 0x3F, win=win,
                     payload=max(0, seg_len - hdr), sack=sack)


TCPOPT_EOL = 0
TCPOPT_NOP = 1
TCPOPT_SACK = 5


def _sack_blocks(opts: bytes) -> tuple[tuple[int, int], ...]:
    """The SACK option's (left, right) edges; a malformed or snapped option
    list yields what was complete before the damage, like tshark shows it."""
    i = 0
    while i < len(opts):
        kind = opts[i]
        if kind == TCPOPT_EOL:
            break
        if kind == TCPOPT_NOP:
            i += 1
            continue
        if i + 1 >= len(opts) or opts[i + 1] < 2:
            break
        length = opts[i + 1]
        if kind == TCPOPT_SACK:
            body = opts[i + 2:i + length]
            n = min(len(body), length - 2) // 8
            return tuple(struct.unpack_from(">II", body, 8 * k) for k in range(n))
        i += length
    return ()


def iter_connection(packets: list[TcpPacket], a: tuple[str, int],
                    b: tuple[str, int]) -> Iterator[tuple[bool, TcpPacket]]:
    """Packets of the a<->b connection as (from_a, packet)."""
    for p in packets:
        if (p.src, p.sport) == a and (p.dst, p.dport) == b:
            yield True, p
        elif (p.src, p.sport) == b and (p.dst, p.dport) == a:
            yield False, p
