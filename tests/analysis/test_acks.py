"""RTT from every ACK and SACK block counts (analysis/acks.py), Wireshark's rules."""

from __future__ import annotations

import random
import struct

import pytest

from analysis import acks
from analysis.acks import MOD, Unwrapper, ack_rtt, sack_stats
from analysis.pcap import TH_ACK, TH_FIN, TH_SYN, TcpPacket, _sack_blocks

S, R = ("10.0.0.1", 1000), ("10.0.0.2", 2000)
SENDER, RECEIVER = "10.0.0.1:1000", "10.0.0.2:2000"


def seg(ts: float, seq: int, payload: int, flags: int = TH_ACK) -> TcpPacket:
    return TcpPacket(ts, S[0], S[1], R[0], R[1], seq, 1, flags, 1000, payload)


def ack(ts: float, n: int, sack: tuple[tuple[int, int], ...] = ()) -> TcpPacket:
    return TcpPacket(ts, R[0], R[1], S[0], S[1], 1, n, TH_ACK, 1000, 0, sack)


@pytest.mark.parametrize("name,packets,want", [
    ("one segment, one ACK", [seg(0.0, 100, 10), ack(0.6, 110)], [600.0]),
    # A cumulative ACK ending exactly at a segment measures from that segment.
    ("cumulative", [seg(0.0, 100, 10), seg(0.1, 110, 10), ack(0.7, 120)], [600.0]),
    # An ACK in the middle of a segment is no sample (no segment ends there).
    ("partial", [seg(0.0, 100, 10), ack(0.6, 105), ack(0.7, 110)], [700.0]),
    # A retransmitted segment measures from its FIRST transmission.
    ("retransmitted", [seg(0.0, 100, 10), seg(2.0, 100, 10), ack(2.6, 110)], [2600.0]),
    # Duplicate ACKs cover nothing new.
    ("duplicates", [seg(0.0, 100, 10), ack(0.6, 110), ack(0.7, 110)], [600.0]),
    # SYN and FIN count one sequence number each.
    ("syn and fin", [seg(0.0, 99, 0, TH_SYN), ack(0.6, 100), seg(1.0, 100, 5, TH_ACK | TH_FIN),
                     ack(1.6, 106)], [600.0, 600.0]),
    # Sequence numbers wrap at 2^32.
    ("wrap", [seg(0.0, MOD - 5, 10), ack(0.5, 5)], [500.0]),
])
def test_ack_rtt_rules(name: str, packets: list[TcpPacket], want: list[float]) -> None:
    st = ack_rtt(packets, SENDER, RECEIVER)
    assert [round(v, 6) for _, v in st.series] == want, name
    assert st.samples == len(want)


def test_ack_rtt_stats_and_empty() -> None:
    st = ack_rtt([seg(0.0, 100, 10), ack(0.6, 110), seg(1.0, 110, 10), ack(1.8, 120)],
                 SENDER, RECEIVER)
    assert (st.min_ms, st.max_ms) == pytest.approx((600.0, 800.0))
    assert st.avg_ms == pytest.approx(700.0)
    assert st.stdev_ms == pytest.approx(141.42, abs=0.01)
    assert ack_rtt([], SENDER, RECEIVER).samples == 0
    assert ack_rtt([], SENDER, RECEIVER).avg_ms is None


def test_sack_stats_counts_blocks_not_acks() -> None:
    pk = [ack(0.1, 10, ((20, 30),)), ack(0.2, 10, ((20, 30), (40, 50), (60, 70))), ack(0.3, 70)]
    st = sack_stats(pk, SENDER, RECEIVER)
    assert (st.blocks, st.acks_with_sack, st.max_blocks_per_ack) == (4, 2, 3)
    # SACKs of the other direction are not this direction's.
    assert sack_stats(pk, RECEIVER, SENDER).blocks == 0


def _opts(*parts: bytes) -> bytes:
    return b"".join(parts)


@pytest.mark.parametrize("opts,want", [
    (b"", ()),
    (_opts(b"\x01\x01\x08\x0a" + b"\x00" * 8), ()),  # NOP NOP timestamps
    (_opts(b"\x01\x01\x05\x0a", struct.pack(">II", 5, 9)), ((5, 9),)),
    (_opts(b"\x01\x01\x08\x0a" + b"\x00" * 8, b"\x01\x01\x05\x12",
           struct.pack(">IIII", 1, 2, 3, 4)), ((1, 2), (3, 4))),
    (_opts(b"\x05\x12", struct.pack(">II", 1, 2)), ((1, 2),)),  # snapped after one block
    (b"\x05\x01\x05", ()),  # length below 2: malformed, stop
    (b"\x00\x05\x0a" + b"\x00" * 8, ()),  # end of options before SACK
])
def test_sack_option_parsing(opts: bytes, want: tuple[tuple[int, int], ...]) -> None:
    assert _sack_blocks(opts) == want


def test_sack_option_parser_never_raises_on_garbage() -> None:
    rng = random.Random(25)
    for _ in range(5000):
        blob = bytes(rng.randrange(256) for _ in range(rng.randrange(41)))
        blocks = _sack_blocks(blob)
        assert all(len(b) == 2 for b in blocks) and len(blocks) <= 5


def test_unwrapper() -> None:
    u = Unwrapper()
    assert [u(x) for x in (MOD - 2, MOD - 1, 0, 3, MOD - 1)] == [MOD - 2, MOD - 1, MOD, MOD + 3,
                                                                  MOD - 1]


def _random_exchange(rng: random.Random, n: int, base: int) -> list[TcpPacket]:
    """Segments (new, resent, SYN, FIN, empty) and ACKs (cumulative, in the
    middle of a segment, duplicate, reordered, behind), sequence numbers near base."""
    out: list[TcpPacket] = []
    sent, ts = base, 0.0
    ends: list[int] = []
    for _ in range(n):
        ts += rng.choice((0.0, 0.001, 0.01))
        if rng.random() < 0.55:
            if ends and rng.random() < 0.2:
                start = rng.choice(ends) - rng.choice((1, 10, 100))
            else:
                start = sent
            payload = rng.choice((0, 1, 10, 100))
            flags = rng.choice((TH_ACK, TH_ACK, TH_SYN, TH_ACK | TH_FIN))
            out.append(seg(ts, start % MOD, payload, flags))
            end = start + payload + (1 if flags & (TH_SYN | TH_FIN) else 0)
            ends.append(end)
            sent = max(sent, end)
        else:
            n_ack = rng.choice(ends) if ends and rng.random() < 0.6 else sent - rng.randrange(0, 300)
            flags = TH_ACK if rng.random() < 0.9 else 0
            out.append(TcpPacket(ts, R[0], R[1], S[0], S[1], 1, n_ack % MOD, flags, 1000, 0))
    return out


@pytest.mark.parametrize("limit", [10000, 3])
def test_ack_rtt_on_arrays_matches_the_walk(limit: int, monkeypatch) -> None:
    """The array form forgets and matches segments as the one-at-a-time walk
    does, across sequence wraps, and hands over to the walk when Wireshark's
    limit of remembered segments is reached (3 here, to reach it often)."""
    monkeypatch.setattr(acks, "MAX_UNACKED", limit)
    rng = random.Random(41)
    for trial in range(400):
        base = rng.choice((1000, MOD - 500, rng.randrange(MOD)))
        packets = _random_exchange(rng, rng.randrange(1, 60), base)
        want = acks.ack_rtt_walk(packets, SENDER, RECEIVER)
        got = ack_rtt(packets, SENDER, RECEIVER)
        assert got.series == want.series, (trial, packets)
        assert (got.samples, got.avg_ms, got.stdev_ms) == (want.samples, want.avg_ms, want.stdev_ms)
