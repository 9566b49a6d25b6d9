"""Sender/receiver-view throughput: start at the first SYN, cut-short transfers."""

from __future__ import annotations

import pytest

from analysis.pcap import TH_ACK, TH_SYN, TcpPacket
from analysis.throughput import spoofing_throughput

A, B = ("10.0.0.2", 40000), ("10.0.0.254", 22)


def p(ts: float, src: tuple[str, int], dst: tuple[str, int], seq: int, ack: int, flags: int,
      payload: int = 0) -> TcpPacket:
    return TcpPacket(ts, src[0], src[1], dst[0], dst[1], seq, ack, flags, 1000, payload)


def transfer(last_ack: int) -> list[TcpPacket]:
    """Captured next to A (the initiator and receiver); B sends 3000 bytes."""
    return [
        p(0.0, A, B, 99, 0, TH_SYN),
        p(1.0, A, B, 99, 0, TH_SYN),            # the first SYN was lost beyond the vantage
        p(1.6, B, A, 499, 100, TH_SYN | TH_ACK),
        p(1.6, A, B, 100, 500, TH_ACK),
        p(2.2, B, A, 500, 100, TH_ACK, 1000),
        p(2.2, B, A, 1500, 100, TH_ACK, 1000),
        p(2.2, B, A, 2500, 100, TH_ACK, 1000),
        p(2.2, A, B, 100, 1500, TH_ACK),
        p(2.3, A, B, 100, last_ack, TH_ACK),
    ]


def test_start_is_the_first_syn() -> None:
    st = spoofing_throughput(transfer(3500), "10.0.0.254:22", "10.0.0.2:40000")
    assert st is not None and st.complete
    assert st.start == pytest.approx(0.0)
    assert st.rtt_vantage_sender_ms == pytest.approx(600.0)
    assert st.sender_view_s == pytest.approx(2.6)   # last ACK at 2.3 + half of 600 ms
    assert st.receiver_view_s == pytest.approx(2.3)
    assert st.data_bytes == 3000
    assert "1 SYN retransmission" in st.method
    assert st.initiator == "10.0.0.2:40000"


def test_cut_short_measures_what_was_acknowledged() -> None:
    st = spoofing_throughput(transfer(2500), "10.0.0.254:22", "10.0.0.2:40000")
    assert st is not None and not st.complete
    assert st.data_bytes == 2000
    assert "1000 bytes sent but never acknowledged" in st.method
    assert st.receiver_bps == pytest.approx(8 * 2000 / 2.3)


def test_end_to_end_views_span_the_lan_captures(tmp_path) -> None:
    """Behind a split PEP: start at A's SYN on lan_a, sender end on lan_b
    (B's last ACK came from PEP B), receiver end on lan_a."""
    import json

    from analysis.run import end_to_end

    (tmp_path / "config.json").write_text(json.dumps({"topology_spec": {"hosts": {
        "clientA": {"ip": "10.0.0.2/24"}, "clientB": {"ip": "10.0.0.254/24"}}}}))

    def vantage(start: float, snd_end: float, rcv_end: float, nbytes: int) -> dict:
        return {"main": {"summary": {"data_src": "10.0.0.254:22", "data_dst": "10.0.0.2:40000"},
                         "spoofing_throughput": {"start": start, "sender_end": snd_end,
                                                 "receiver_end": rcv_end, "data_bytes": nbytes,
                                                 "initiator": "10.0.0.2:40000",
                                                 "complete": True}}}

    analysis = {"lan_a": vantage(100.0, 115.0, 116.0, 2000), "lan_b": vantage(100.3, 112.0, 111.9, 2000),
                "wan_a": {"error": "capture missing"}}
    e = end_to_end(tmp_path, analysis)
    assert e is not None
    assert (e["start"], e["sender_end"], e["receiver_end"]) == (100.0, 112.0, 116.0)
    assert e["sender_bps"] == pytest.approx(8 * 2000 / 12.0)
    assert e["receiver_bps"] == pytest.approx(8 * 2000 / 16.0)
    del analysis["lan_b"]
    assert end_to_end(tmp_path, analysis) is None


def test_sequence_wrap_inside_the_transfer() -> None:
    mod = 1 << 32
    isn = mod - 1501  # the data crosses 2^32 after its first 1500 bytes
    pk = [p(0.0, B, A, isn, 0, TH_SYN), p(0.6, A, B, 99, isn + 1, TH_SYN | TH_ACK),
          p(0.6, B, A, isn + 1, 100, TH_ACK)]
    for i in range(4):
        pk.append(p(1.0 + i * 0.01, B, A, (isn + 1 + 1500 * i) % mod, 100, TH_ACK, 1500))
    pk.append(p(1.7, A, B, 100, (isn + 1 + 6000) % mod, TH_ACK))
    st = spoofing_throughput(pk, "10.0.0.254:22", "10.0.0.2:40000")
    assert st is not None and st.complete and st.data_bytes == 6000
