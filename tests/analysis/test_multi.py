"""Several connections in one capture: main-connection choice, -oN graphs, views."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from analysis.pcap import read_tcp
from analysis.run import analyze_capture
from analysis.throughput import spoofing_throughput
from synth_pcap import two_connections, write_pcap

T0 = 1_700_000_000.0


@pytest.fixture()
def pcap(tmp_path: Path) -> Path:
    return write_pcap(tmp_path / "two.pcap", two_connections(T0))


def test_reader_on_synthetic(pcap: Path) -> None:
    s = read_tcp(pcap)
    assert s.records == len(two_connections(T0)) and not s.truncated
    assert sum(p.payload for p in s.packets) == 200 + 41_000


def test_spoofing_views_from_client_side(pcap: Path) -> None:
    pkts = read_tcp(pcap).packets
    st = spoofing_throughput(pkts, "10.99.99.254:20", "10.99.99.2:40001")
    assert st is not None
    assert st.data_bytes == 40_000
    assert st.rtt_vantage_sender_ms == pytest.approx(300.0, abs=0.01)
    assert st.rtt_vantage_receiver_ms == pytest.approx(0.1, abs=0.01)
    syn = T0 + 1.0
    last_ack = T0 + 1.6 + 39 * 0.01 + 0.0001  # first ACK covering every byte
    assert st.last_ack_at_vantage == pytest.approx(last_ack, abs=2e-6)
    start = syn - 0.00005
    assert st.start == pytest.approx(start, abs=2e-6)
    # The ACK still has 150 ms to travel to the server; it left the client 50 us before.
    assert st.sender_view_s == pytest.approx(last_ack + 0.15 - start, abs=1e-5)
    assert st.receiver_view_s == pytest.approx(last_ack - 0.00005 - start, abs=1e-5)
    assert st.sender_bps == pytest.approx(8 * 40_000 / st.sender_view_s)
    assert st.receiver_bps > st.sender_bps


@pytest.mark.skipif(not shutil.which("tcptrace"), reason="tcptrace not installed")
def test_main_connection_and_graphs(pcap: Path, tmp_path: Path) -> None:
    out = analyze_capture(pcap, tmp_path / "out")
    assert "error" not in out, out
    assert out["connections"] == 2
    main = out["main"]
    assert main["index"] == 2
    assert main["host_a"] == "10.99.99.2:40001"  # the SYN's sender is host a
    assert main["data_direction"] == "b2a"
    assert main["b2a"]["unique_bytes"] == 40_000
    assert main["b2a"]["rexmt_pkts"] == 1 and main["b2a"]["rexmt_bytes"] == 1000
    assert main["a2b"]["data_bytes"] == 0
    assert main["b2a"]["first_packet"] == pytest.approx(T0 + 1.3, abs=1e-5)
    assert main["spoofing_throughput"]["data_bytes"] == 40_000
    assert [c["index"] for c in out["connection_list"]] == [1, 2]
    assert out["connection_list"][0]["a2b"]["data_bytes"] == 100
    assert set(out["graphs"]) >= {"tsg_full", "tsg_window", "tput", "rtt"}
    head = (tmp_path / "out" / "tsg_full.png").read_bytes()[:8]
    assert head == b"\x89PNG\r\n\x1a\n"
