"""Whole runs over the satellite at 600 ms: what a PEP changes, seen by the
client (connect time, integrity) and in the captures at each vantage point."""

from __future__ import annotations

import json
import os

import pytest

from satbed.core.proc import BIN_DIR
from satbed.results.metrics import run_metrics

from satbed_testlib import needs_root, satbed

pytestmark = [needs_root, pytest.mark.skipif(
    not all(os.path.exists(os.path.join(BIN_DIR, b)) for b in ("satemu", "pepd")),
    reason="bin/satemu and bin/pepd not built (make build)")]


def run(tmp_path, pep: str) -> dict:
    # A short bottleneck queue keeps queueing delay small, so the RTT the
    # captures show is the link's own.
    cp = satbed("run", "--client", "scp", "--pep", pep, "--rtt", "600", "--queue", "30", "--size", "2M",
                "--out", str(tmp_path), timeout=900)
    assert cp.returncode == 0, cp.stderr
    run_dir = cp.stdout.splitlines()[0]
    # result.json with the run's analysis.json laid over it.
    result = run_metrics(run_dir)
    result["run_dir"] = run_dir
    return result


def summary(result: dict, vantage: str) -> dict:
    return result["analysis"][vantage]["main"]["summary"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("split")
    return {pep: run(out, pep) for pep in ("none", "pepd")}


def test_without_a_pep_connect_takes_a_satellite_round_trip(runs):
    r = runs["none"]
    assert r["integrity"] == "ok"
    assert 590 < r["tcp_connect_ms"] < 800
    assert r["pep"]["connections_split"] == 0


def test_pepd_answers_the_connect_on_the_lan_and_delivers_intact(runs):
    r = runs["pepd"]
    assert r["integrity"] == "ok" and r["bytes"] == 2 << 20
    assert r["tcp_connect_ms"] < 50
    assert r["pep"]["connections_split"] >= 2          # split at both PEPs
    assert set(r["pep"]["nodes"]) == {"pepA", "pepB"}


def test_wan_capture_rtt_is_the_configured_rtt(runs):
    # Download: the data leaves Client B, so the aircraft side of the
    # emulator (wan_b) sees each segment's whole round trip.
    for pep in ("none", "pepd"):
        s = summary(runs[pep], "wan_b")
        assert 599 <= s["rtt_min_ms"] <= 610, (pep, s)
        # Never-retransmitted segments only (tcptrace, Karn's rule): the link's own RTT.
        assert 600 <= s["rtt_tcptrace_avg_ms"] <= 650, (pep, s)
        # Every ACK (tshark's ack_rtt): a segment dropped at the 30-packet queue
        # counts from its first transmission, so loss recovery lifts the average.
        assert s["rtt_samples"] >= s["rtt_tcptrace_samples"] and s["rtt_avg_ms"] >= 600, (pep, s)


def test_pepd_lan_capture_shows_a_short_rtt(runs):
    assert summary(runs["none"], "lan_b")["rtt_avg_ms"] > 590
    assert summary(runs["pepd"], "lan_b")["rtt_avg_ms"] < 50


def test_tcptrace_throughput_agrees_with_the_application(tmp_path):
    """Long enough that the ssh handshake and teardown, which the capture and
    the scp wall clock bracket slightly differently, are a small share."""
    cp = satbed("run", "--client", "scp", "--pep", "none", "--rtt", "100", "--size", "8M",
                "--out", str(tmp_path), timeout=900)
    assert cp.returncode == 0, cp.stderr
    r = run_metrics(cp.stdout.splitlines()[0])     # the analysis is in analysis.json
    assert summary(r, "lan_a")["throughput_bps"] == pytest.approx(r["goodput_bps"], rel=0.02)


def test_graphs_exist_and_are_real_images(runs):
    for r in runs.values():
        for vantage in ("lan_a", "wan_b"):
            d = os.path.join(r["run_dir"], "analysis", vantage)
            for name in ("tsg_full.png", "tsg_window.png"):
                path = os.path.join(d, name)
                with open(path, "rb") as f:
                    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
                assert os.path.getsize(path) > 20_000
        with open(os.path.join(r["run_dir"], "report.html"), encoding="utf-8") as f:
            html = f.read()
        assert html.count("data:image/png;base64,") >= 4


def test_saratoga_recovers_every_hole_at_ber_1e5(tmp_path):
    """Rate-based, no congestion control: about 11% of full frames die at
    BER 1e-5 and the receiver's hole lists bring every byte back."""
    cp = satbed("run", "--client", "saratoga", "--pep", "none", "--rtt", "600", "--ber", "1e-5",
                "--size", "4M", "--captures", "none", "--out", str(tmp_path), timeout=600)
    assert cp.returncode == 0, cp.stderr
    with open(os.path.join(cp.stdout.splitlines()[0], "result.json"), encoding="utf-8") as f:
        r = json.load(f)
    assert r["integrity"] == "ok" and r["bytes"] == 4 << 20
    assert r["emulator"]["stats"]["totals"]["directions"]["b_to_a"]["drops"]["ber"] > 0
    # Flat across delay and BER: far above what TCP manages here.
    assert r["goodput_bps"] > 3e6


@pytest.mark.skipif("bbr" not in open("/proc/sys/net/ipv4/tcp_available_congestion_control").read(),
                    reason="kernel offers no bbr")
def test_pepd_runs_bbr_on_a_lossy_satellite_leg(tmp_path):
    cp = satbed("run", "--client", "nuttcp-tcp", "--pep", "pepd", "--rtt", "100", "--ber", "1e-5",
                "--size", "1M", "--captures", "none", "--out", str(tmp_path), timeout=600)
    assert cp.returncode == 0, cp.stderr
    with open(os.path.join(cp.stdout.splitlines()[0], "result.json"), encoding="utf-8") as f:
        r = json.load(f)
    assert r["integrity"] == "ok"
    assert {n["options"]["cc"] for n in r["pep"]["nodes"].values()} == {"bbr"}
