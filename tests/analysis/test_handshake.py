"""The connect time as the capture shows it, on the initiator's own port."""

from __future__ import annotations

import json

from analysis.run import handshake_from_capture, write_analysis
from satbed.results.metrics import read_analysis, run_metrics

SPEC = {"topology_spec": {"hosts": {"clientA": {"ip": "10.99.99.2/24"}, "clientB": {"ip": "10.99.99.254/24"}}}}


def _main(src: str, dst: str, ms: float) -> dict:
    return {"main": {"a2b": {"src": src, "dst": dst, "rtt_3whs_ms": ms, "syn_pkts": 1},
                     "b2a": {"src": dst, "dst": src, "rtt_3whs_ms": 0.0, "syn_pkts": 1}}}


def test_handshake_is_read_on_the_initiators_port(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(SPEC))
    # Client A opens: lan_a shows the whole RTT, lan_b (the far side) only the server's turnaround.
    analysis = {"lan_a": _main("10.99.99.2:40000", "10.99.99.254:22", 600.4),
                "lan_b": _main("10.99.99.2:40000", "10.99.99.254:22", 0.1)}
    assert handshake_from_capture(tmp_path, analysis) == {"tcp_handshake_ms": 600.4,
                                                         "tcp_handshake_vantage": "lan_a"}
    # nuttcp's transmitter on Client B opens toward the receiver on Client A.
    analysis = {"lan_a": _main("10.99.99.254:5001", "10.99.99.2:5000", 0.2),
                "lan_b": _main("10.99.99.254:5001", "10.99.99.2:5000", 0.1)}
    assert handshake_from_capture(tmp_path, analysis)["tcp_handshake_vantage"] == "lan_b"
    assert handshake_from_capture(tmp_path, {"lan_a": {"error": "capture missing"}}) is None


def test_write_analysis_sets_and_replaces_the_handshake_and_leaves_result_json(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(SPEC))
    runner_wrote = json.dumps({"client": "scp", "tcp_handshake_ms": 1.0})
    (tmp_path / "result.json").write_text(runner_wrote)
    write_analysis(tmp_path, {"lan_a": _main("10.99.99.2:40000", "10.99.99.254:22", 600.4)})
    stored = json.loads((tmp_path / "analysis.json").read_text())
    assert stored["format"] == 1 and stored["tcp_handshake_ms"] == 600.4
    # The merged metrics prefer the analysis over what an older result.json held.
    merged = run_metrics(str(tmp_path))
    assert merged["client"] == "scp" and merged["tcp_handshake_ms"] == 600.4
    write_analysis(tmp_path, {"lan_a": {"error": "capture missing"}})
    assert "tcp_handshake_ms" not in json.loads((tmp_path / "analysis.json").read_text())
    assert "tcp_handshake_ms" not in run_metrics(str(tmp_path))
    assert (tmp_path / "result.json").read_text() == runner_wrote


def test_an_older_runs_analysis_is_read_from_result_json(tmp_path):
    (tmp_path / "result.json").write_text(json.dumps({"client": "scp", "tcp_handshake_ms": 2.0,
                                                     "analysis": {"lan_a": {"error": "x"}}}))
    assert read_analysis(str(tmp_path)) == {"analysis": {"lan_a": {"error": "x"}}, "tcp_handshake_ms": 2.0}
    assert run_metrics(str(tmp_path))["analysis"] == {"lan_a": {"error": "x"}}
    assert read_analysis(str(tmp_path / "absent")) is None
