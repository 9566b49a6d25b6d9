"""analyze_run on a run directory: good, truncated, garbage and missing captures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from golden_run import golden_result

from analysis.run import analyze_run
from analysis.pcap import PcapError, read_tcp
from analysis.throughput import spoofing_throughput

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "golden.pcap"


def test_analyze_run_notes_and_metrics(run_dir: Path, expected: dict) -> None:
    tshark = json.loads((GOLDEN.parent / "tshark_expected.json").read_text())["golden.pcap"]
    a = analyze_run(run_dir, graphs=False)
    assert set(a) == {"lan_a", "wan_a", "wan_b", "lan_b"}
    good = a["lan_a"]
    assert "error" not in good
    assert good["connections"] == expected["connections"]
    main = good["main"]
    assert main["data_direction"] == "a2b"
    assert main["a2b"]["unique_bytes"] == expected["transfer_bytes"]
    assert main["a2b"]["rexmt_pkts"] == expected["a2b"]["rexmt_pkts"]
    assert main["a2b"]["rtt_avg_ms"] == pytest.approx(expected["a2b"]["rtt_avg_ms"])
    # tcptrace's "sacks sent" counts ACKs with a SACK option; the figure is the blocks.
    assert main["sack"]["acks_with_sack"] == expected["b2a"]["sack_pkts"]
    assert main["sack_blocks_seen"] == tshark["sack_blocks"]
    assert len(good["connection_list"]) == expected["connections"]
    summ = main["summary"]
    # Values read off the capture by hand (tcpdump -nr golden.pcap), not
    # copied from another field of the analysis.
    assert summ["data_src"] == "10.99.99.1:45294"
    assert summ["rexmt_pkts"] == expected["a2b"]["rexmt_pkts"]
    assert summ["receiver_win_max"] == expected["b2a"]["max_win_adv"]
    assert summ["sack_blocks_seen"] == tshark["sack_blocks"]
    assert summ["rtt_samples"] == tshark["rtt_samples"]
    assert summ["rtt_avg_ms"] == pytest.approx(tshark["rtt_avg_ms"], abs=1e-3)
    assert summ["rtt_max_ms"] == pytest.approx(tshark["rtt_max_ms"], abs=1e-3)
    assert summ["rtt_tcptrace_avg_ms"] == pytest.approx(expected["a2b"]["rtt_avg_ms"])
    assert summ["throughput_bps"] == 8 * expected["a2b"]["throughput_Bps"]
    assert "long.txt" in good["outputs"] and "long.csv" in good["outputs"]
    # Per-direction times come from the capture and bracket the connection.
    assert main["a2b"]["first_packet"] == pytest.approx(main["first_packet"], abs=1e-5)
    assert main["a2b"]["last_packet"] <= main["last_packet"] + 1e-5

    assert "truncated" in a["wan_a"]["error"]
    assert a["wan_a"]["partial"]["connections"] >= 1
    assert "not a pcap" in a["lan_b"]["error"]

    # Analysis writes its own file and leaves the runner's result.json as it wrote it.
    assert json.loads((run_dir / "result.json").read_text()) == golden_result()
    stored = json.loads((run_dir / "analysis.json").read_text())
    assert set(stored) == {"format", "vantages", "tcp_handshake_ms", "tcp_handshake_vantage"}
    assert stored["format"] == 1
    # Client A opened the connection: its SYN at 11.018678, the SYN/ACK at
    # 11.018757, 0.079 ms, which tcptrace prints to a tenth of a millisecond.
    assert stored["tcp_handshake_vantage"] == "lan_a"
    assert stored["tcp_handshake_ms"] == 0.1
    assert stored["vantages"]["lan_a"]["main"]["a2b"]["data_bytes"] == expected["a2b"]["data_bytes"]
    assert (run_dir / "analysis" / "lan_a" / "long.txt").read_text().count("TCP connection 1:") == 1


def test_missing_and_empty_captures(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "captures").mkdir(parents=True)
    (run / "captures" / "wan_a.pcap").write_bytes(b"")
    a = analyze_run(run, graphs=False)
    assert "missing" in a["lan_a"]["error"] and "missing" in a["lan_b"]["error"]
    assert "error" in a["wan_a"]
    assert json.loads((run / "analysis.json").read_text())["vantages"] == a
    assert not (run / "result.json").exists()


def test_bad_run_dir(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        analyze_run(tmp_path / "absent")


def test_corrupt_result_json_is_kept(run_dir: Path) -> None:
    (run_dir / "result.json").write_text("{not json")
    analyze_run(run_dir, graphs=False)
    assert (run_dir / "result.json").read_text() == "{not json"
    assert "lan_a" in json.loads((run_dir / "analysis.json").read_text())["vantages"]


def test_pcap_reader_and_spoofing_throughput(expected: dict) -> None:
    s = read_tcp(GOLDEN)
    assert not s.truncated and s.linktype == 1
    data = [p for p in s.packets if p.payload > 0]
    # Headers-only capture, but payload lengths come from the IP header.
    assert sum(p.payload for p in data) == expected["a2b"]["data_bytes"]
    syn = s.packets[0]
    sender = f"{syn.src}:{syn.sport}"
    receiver = f"{syn.dst}:{syn.dport}"
    st = spoofing_throughput(s.packets, sender, receiver)
    assert st is not None
    assert st.data_bytes == expected["transfer_bytes"]
    assert st.method == "handshake split"
    # Captured at the sender: the ACK is received there when the capture sees
    # it, and left the receiver slightly earlier, so the receiver view is shorter.
    assert 0 <= st.rtt_vantage_sender_ms < 1.0
    assert st.receiver_view_s <= st.sender_view_s
    assert st.sender_bps == pytest.approx(8 * st.data_bytes / st.sender_view_s)
    # The shaper runs at 16 Mbit/s.
    assert 8e6 < st.sender_bps < 16.5e6
    assert spoofing_throughput(s.packets, receiver, sender) is None


def test_pcap_reader_rejects_garbage(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"\x00" * 100)
    with pytest.raises(PcapError):
        read_tcp(bad)
    half = tmp_path / "half.pcap"
    blob = GOLDEN.read_bytes()
    half.write_bytes(blob[: len(blob) // 2])
    assert read_tcp(half).truncated
