"""Minimal classic-pcap reader for TCP and UDP header fields, into arrays.

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
from functools import cached_property
from typing import Callable, NamedTuple, Sequence, Union

import numpy as np

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
    """One TCP segment's header fields, for code that wants objects
    (TcpColumns.packets; the views work on the columns). A NamedTuple, made
    from a ready tuple, without a frozen dataclass's setattr per field."""
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


class TcpColumns:
    """Every TCP segment of a capture as columns (numpy arrays, capture order).

    A 100 MB transfer's four captures hold ~450k segments: as Python objects
    their reading and the RTT, retransmission and throughput views cost
    3.3 CPU-s a cell; as arrays a tenth of that. Addresses are indexes into
    `addrs`; `sack` is the number of SACK blocks a segment carried. `packets()`
    gives the same segments as TcpPacket tuples for code that wants objects."""

    def __init__(self, ts, src, sport, dst, dport, seq, ack, flags, win, payload, sack,
                 addrs: list[str], sack_edges: Callable[[int], tuple[tuple[int, int], ...]] | None = None):
        self.ts = np.asarray(ts, dtype=np.float64)
        self.src, self.dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        self.sport, self.dport = np.asarray(sport, dtype=np.int64), np.asarray(dport, dtype=np.int64)
        self.seq, self.ack = np.asarray(seq, dtype=np.int64), np.asarray(ack, dtype=np.int64)
        self.flags, self.win = np.asarray(flags, dtype=np.int64), np.asarray(win, dtype=np.int64)
        self.payload, self.sack = np.asarray(payload, dtype=np.int64), np.asarray(sack, dtype=np.int64)
        self.addrs = addrs
        self._sack_edges = sack_edges

    def __len__(self) -> int:
        return len(self.ts)

    @classmethod
    def from_packets(cls, packets: Sequence[TcpPacket]) -> "TcpColumns":
        ids: dict[str, int] = {}
        rows = [(p.ts, ids.setdefault(p.src, len(ids)), p.sport, ids.setdefault(p.dst, len(ids)), p.dport,
                 p.seq, p.ack, p.flags, p.win, p.payload, len(p.sack)) for p in packets]
        cols = list(zip(*rows)) if rows else [()] * 11
        sacks = [p.sack for p in packets]
        return cls(*cols, addrs=list(ids), sack_edges=sacks.__getitem__)

    def endpoint(self, addr: str) -> tuple[int, int]:
        """("ip:port") -> (address index, port); index -1 when the capture never saw the address."""
        host, _, port = addr.rpartition(":")
        try:
            return self.addrs.index(host), int(port)
        except ValueError:
            return -1, int(port)

    def flow(self, a: tuple[int, int], b: tuple[int, int]) -> np.ndarray:
        """Mask of the segments a -> b."""
        return (self.src == a[0]) & (self.sport == a[1]) & (self.dst == b[0]) & (self.dport == b[1])

    def packets(self) -> list[TcpPacket]:
        addrs, edges = self.addrs, self._sack_edges
        return [_new_tcp(TcpPacket, (ts, addrs[src], sport, addrs[dst], dport, seq, ack, flags, win, payload,
                                     edges(i) if nsack and edges else ()))
                for i, (ts, src, sport, dst, dport, seq, ack, flags, win, payload, nsack) in enumerate(zip(
                    self.ts.tolist(), self.src.tolist(), self.sport.tolist(), self.dst.tolist(),
                    self.dport.tolist(), self.seq.tolist(), self.ack.tolist(), self.flags.tolist(),
                    self.win.tolist(), self.payload.tolist(), self.sack.tolist()))]


class UdpColumns:
    """Every UDP datagram of a capture as columns, like TcpColumns."""

    def __init__(self, ts, src, sport, dst, dport, payload, addrs: list[str]):
        self.ts = np.asarray(ts, dtype=np.float64)
        self.src, self.dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        self.sport, self.dport = np.asarray(sport, dtype=np.int64), np.asarray(dport, dtype=np.int64)
        self.payload = np.asarray(payload, dtype=np.int64)
        self.addrs = addrs

    def __len__(self) -> int:
        return len(self.ts)

    def packets(self) -> list[UdpPacket]:
        a = self.addrs
        return [UdpPacket(ts=ts, src=a[src], sport=sport, dst=a[dst], dport=dport, payload=payload)
                for ts, src, sport, dst, dport, payload in zip(
                    self.ts.tolist(), self.src.tolist(), self.sport.tolist(), self.dst.tolist(),
                    self.dport.tolist(), self.payload.tolist())]


@dataclass
class PcapSummary:
    linktype: int
    tcp: TcpColumns
    udp_columns: UdpColumns
    records: int = 0
    truncated: bool = False  # the file ends inside a record

    @cached_property
    def packets(self) -> list[TcpPacket]:
        return self.tcp.packets()

    @cached_property
    def udp(self) -> list[UdpPacket]:
        return self.udp_columns.packets()


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
    offs, truncated = _record_offsets(data, endian)
    return _decode_records(data, np.asarray(offs, dtype=np.int64), endian, tsdiv, linktype, truncated)


def _record_offsets(data: bytes, endian: str) -> tuple[list[int], bool]:
    """Where each whole record's header starts; True when the file ends inside one.
    The one walk that cannot be done on arrays: each record says where the next starts."""
    caplen_at = struct.Struct(endian + "I").unpack_from
    offs: list[int] = []
    off, n = 24, len(data)
    while off < n:
        if off + 16 > n:
            return offs, True
        caplen = caplen_at(data, off + 8)[0]
        if caplen > 262144 or off + 16 + caplen > n:
            return offs, True
        offs.append(off)
        off += 16 + caplen
    return offs, False


# The first 54 bytes of an Ethernet/IPv4/TCP frame (UDP's length is the top
# half of `seq`), and a record header, as numpy reads them from a row of bytes.
_FRAME = np.dtype({"names": ["etype", "vihl", "total_len", "frag", "proto", "src", "dst", "sport", "dport",
                             "seq", "ack", "offflags", "win"],
                   "formats": [">u2", "u1", ">u2", ">u2", "u1", ">u4", ">u4", ">u2", ">u2", ">u4", ">u4",
                               ">u2", ">u2"],
                   "offsets": [12, 14, 16, 20, 23, 26, 30, 34, 36, 38, 42, 46, 48], "itemsize": 54})


def _rows(b: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """width bytes from each offset, one contiguous row per offset."""
    return b[at[:, None] + np.arange(width)]


def _decode_records(data: bytes, offs: np.ndarray, endian: str, tsdiv: float, linktype: int,
                    truncated: bool) -> PcapSummary:
    # Padded so that a row read past a short last frame stays inside.
    b = np.frombuffer(data + bytes(64), dtype=np.uint8)
    head = _rows(b, offs, 16).view(endian + "u4").astype(np.int64)
    sec, frac, caplen = head[:, 0], head[:, 1], head[:, 2]
    ts = sec + frac / tsdiv
    at = offs + 16                                   # each record's frame
    n = len(offs)
    # Ethernet, IPv4 without options, not a fragment, TCP or UDP: nearly every
    # record of a testbed's capture, decoded on arrays. _decode reads the rest
    # (other link types, VLAN tags, IP options, IPv6, snapped headers).
    f = _rows(b, at, 54).view(_FRAME)[:, 0] if linktype == LINKTYPE_ETHERNET else np.zeros(0, _FRAME)
    if len(f):
        base = (f["etype"] == 0x0800) & (f["vihl"] == 0x45) & ((f["frag"] & 0x1FFF) == 0)
        is_tcp = base & (f["proto"] == 6) & (caplen >= 54)
        is_udp = base & (f["proto"] == 17) & (caplen >= 42)
    else:
        is_tcp = is_udp = np.zeros(n, dtype=bool)
    tcp_rows, udp_rows = np.flatnonzero(is_tcp), np.flatnonzero(is_udp)
    slow = np.flatnonzero(~(is_tcp | is_udp))

    # One index per address text, whichever path read the packet.
    addr_ids: dict[str, int] = {}
    addrs: list[str] = []

    def str_index(a: str) -> int:
        if a not in addr_ids:
            addr_ids[a] = len(addrs)
            addrs.append(a)
        return addr_ids[a]

    def addr_index(ips: np.ndarray) -> np.ndarray:
        uniq, inverse = np.unique(ips, return_inverse=True)
        idx = np.array([str_index(socket.inet_ntoa(ip.to_bytes(4, "big"))) for ip in uniq.tolist()],
                       dtype=np.int64)
        return idx[inverse].reshape(ips.shape)

    # TCP on arrays.
    t = f[tcp_rows]
    offflags = t["offflags"].astype(np.int64)
    hdr = (offflags >> 12) * 4
    lo = at[tcp_rows] + 54
    hi = at[tcp_rows] + np.minimum(34 + hdr, caplen[tcp_rows])
    opts = hdr > 20
    tcp = {"ts": ts[tcp_rows], "src": t["src"].astype(np.int64), "dst": t["dst"].astype(np.int64),
           "sport": t["sport"].astype(np.int64), "dport": t["dport"].astype(np.int64),
           "seq": t["seq"].astype(np.int64), "ack": t["ack"].astype(np.int64), "flags": offflags & 0x3F,
           "win": t["win"].astype(np.int64),
           "payload": np.maximum(0, t["total_len"].astype(np.int64) - 20 - hdr),
           "sack": _sack_counts(b, np.where(opts, lo, 0), np.where(opts, hi, 0))}
    # UDP on arrays: its length field sits where TCP's sequence number starts.
    u = f[udp_rows]
    udp = {"ts": ts[udp_rows], "src": u["src"].astype(np.int64), "dst": u["dst"].astype(np.int64),
           "sport": u["sport"].astype(np.int64), "dport": u["dport"].astype(np.int64),
           "payload": np.maximum(0, (u["seq"].astype(np.int64) >> 16) - 8)}
    if len(tcp_rows) or len(udp_rows):
        both = addr_index(np.concatenate([tcp["src"], tcp["dst"], udp["src"], udp["dst"]]))
        k, m = len(tcp_rows), len(udp_rows)
        tcp["src"], tcp["dst"], udp["src"], udp["dst"] = both[:k], both[k:2 * k], both[2 * k:2 * k + m], both[2 * k + m:]
    # Everything else, one record at a time, merged back in capture order.
    slow_tcp: list[tuple[int, TcpPacket]] = []
    slow_udp: list[tuple[int, UdpPacket]] = []
    ts_list, at_list, cl_list = ts[slow].tolist(), at[slow].tolist(), caplen[slow].tolist()
    for row, rts, a, c in zip(slow.tolist(), ts_list, at_list, cl_list):
        pkt = _decode(data[a:a + c], linktype, rts)
        if isinstance(pkt, TcpPacket):
            slow_tcp.append((row, pkt))
        elif pkt is not None:
            slow_udp.append((row, pkt))
    edges: dict[int, tuple[tuple[int, int], ...]] = {}
    tcp_lo, tcp_hi = lo, hi
    if slow_tcp:
        order = np.argsort(np.concatenate([tcp_rows, [r for r, _ in slow_tcp]]), kind="stable")
        extra = {"ts": [p.ts for _, p in slow_tcp], "src": [str_index(p.src) for _, p in slow_tcp],
                 "dst": [str_index(p.dst) for _, p in slow_tcp], "sport": [p.sport for _, p in slow_tcp],
                 "dport": [p.dport for _, p in slow_tcp], "seq": [p.seq for _, p in slow_tcp],
                 "ack": [p.ack for _, p in slow_tcp], "flags": [p.flags for _, p in slow_tcp],
                 "win": [p.win for _, p in slow_tcp], "payload": [p.payload for _, p in slow_tcp],
                 "sack": [len(p.sack) for _, p in slow_tcp]}
        tcp = {k: np.concatenate([v.astype(np.float64 if k == "ts" else np.int64),
                                  np.asarray(extra[k], dtype=np.float64 if k == "ts" else np.int64)])[order]
               for k, v in tcp.items()}
        fast_count = len(tcp_rows)
        where = np.argsort(order)            # original position -> merged position
        for j, (_, p) in enumerate(slow_tcp):
            edges[int(where[fast_count + j])] = p.sack
        pos_lo = np.full(len(order), -1, dtype=np.int64)
        pos_hi = np.full(len(order), -1, dtype=np.int64)
        pos_lo[where[:fast_count]], pos_hi[where[:fast_count]] = lo, hi
        tcp_lo, tcp_hi = pos_lo, pos_hi
    if slow_udp:
        order = np.argsort(np.concatenate([udp_rows, [r for r, _ in slow_udp]]), kind="stable")
        extra = {"ts": [p.ts for _, p in slow_udp], "src": [str_index(p.src) for _, p in slow_udp],
                 "dst": [str_index(p.dst) for _, p in slow_udp], "sport": [p.sport for _, p in slow_udp],
                 "dport": [p.dport for _, p in slow_udp], "payload": [p.payload for _, p in slow_udp]}
        udp = {k: np.concatenate([v.astype(np.float64 if k == "ts" else np.int64),
                                  np.asarray(extra[k], dtype=np.float64 if k == "ts" else np.int64)])[order]
               for k, v in udp.items()}

    def sack_edges(i: int) -> tuple[tuple[int, int], ...]:
        if i in edges:
            return edges[i]
        return _sack_blocks(data[int(tcp_lo[i]):int(tcp_hi[i])])

    return PcapSummary(linktype=linktype, tcp=TcpColumns(**tcp, addrs=addrs, sack_edges=sack_edges),
                       udp_columns=UdpColumns(**udp, addrs=addrs), records=n, truncated=truncated)


def _sack_counts(b: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """_sack_blocks's block count for the options at b[lo:hi] of every segment,
    walked on arrays: at most 40 option bytes, so at most 40 steps."""
    count = np.zeros(len(lo), dtype=np.int64)
    cur = lo.copy()
    live = np.flatnonzero(hi > lo)
    while len(live):
        c, h = cur[live], hi[live]
        kind = b[c]
        nop = kind == TCPOPT_NOP
        cur[live[nop]] += 1
        opt = (kind != TCPOPT_EOL) & ~nop & (c + 1 < h)
        length = np.where(opt, b[np.where(opt, c + 1, 0)], 0).astype(np.int64)
        opt &= length >= 2
        sack = opt & (kind == TCPOPT_SACK)
        count[live[sack]] = np.maximum(0, np.minimum(h[sack], c[sack] + length[sack]) - (c[sack] + 2)) // 8
        step = opt & ~sack
        cur[live[step]] += length[step]
        keep = nop | step
        live = live[keep]
        live = live[cur[live] < hi[live]]
    return count


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


Packets = Union[TcpColumns, Sequence[TcpPacket]]


def columns(packets: Packets) -> TcpColumns:
    """The segments as columns, from columns or from TcpPacket tuples."""
    return packets if isinstance(packets, TcpColumns) else TcpColumns.from_packets(packets)


def unwrap(values: np.ndarray) -> np.ndarray:
    """32-bit sequence numbers in the order given -> wrap-safe integers: each
    step is the signed distance from the one before (acks.Unwrapper on arrays)."""
    if len(values) == 0:
        return values.astype(np.int64)
    step = np.diff(values.astype(np.int64)) % (1 << 32)
    step[step >= 1 << 31] -= 1 << 32
    return int(values[0]) + np.concatenate([[0], np.cumsum(step)])


def flows(src: np.ndarray, sport: np.ndarray, dst: np.ndarray, dport: np.ndarray,
          addresses: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct (src, sport, dst, dport) rows, each packet's row and each
    row's first packet: np.unique's answer, on one integer per packet where
    the addresses are few enough (a sort of rows is ten times slower)."""
    if addresses < 1 << 15:
        key = ((src * 65536 + sport) * addresses + dst) * 65536 + dport
        uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        rows = np.stack([uniq // 65536 // addresses // 65536, uniq // 65536 // addresses % 65536,
                         uniq // 65536 % addresses, uniq % 65536], axis=1)
        return rows, first, inverse.reshape(-1)
    uniq, first, inverse = np.unique(np.stack([src, sport, dst, dport], axis=1), axis=0,
                                     return_index=True, return_inverse=True)
    return uniq, first, inverse.reshape(-1)
