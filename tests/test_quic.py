"""The quic and http3 clients (bin/satquic on quic-go): the commands the
adapter builds, how it reads the tool's summary and the qlog summaries, and
once on a 100 ms testbed, a file in each direction; then through the split
PEPs satbed does not ship (PEPsal, the SCPS gateway: the stand-ins of
tests/standins/ as CI has them, or the real builds named by SATBED_PEPSAL_BIN
/ SATBED_SCPS_BIN), which pass QUIC untouched."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from hypothesis import given, strategies as st

from satbed_testlib import REPO, needs_root, satbed

from satbed.backends import clients
from satbed.backends.clients import quic
from satbed.backends.clients.saratoga import summary
from satbed.core import proc

SATQUIC = os.path.join(REPO, "bin", "satquic")
STANDINS = os.path.join(REPO, "tests", "standins")
# The most TCP the split-check probes move through a PEP (a few small
# connections, headers included: under 1 kB each way on a clean link), far
# below what a 2 MB transfer or even its ACKs would add.
PROBE_BYTES = 16 << 10


def test_both_modes_are_clients_of_their_own():
    assert clients.REGISTRY["quic"].mode == "quic" and clients.REGISTRY["http3"].mode == "http3"
    assert not clients.REGISTRY["quic"].tcp and "satquic" in clients.REGISTRY["http3"].tools


def test_missing_satquic_says_make_build(monkeypatch, tmp_path):
    monkeypatch.setattr(proc, "BIN_DIR", str(tmp_path))
    with pytest.raises(Exception) as err:
        clients.get("http3")
    assert "missing binary" in str(err.value) and "make build" in str(err.value) and "satquic" in str(err.value)


@pytest.mark.parametrize("mode", ["quic", "http3"])
def test_download_plan(mode):
    p = quic.plan("/b/satquic", mode, "download", "10.0.0.2", 600, "/run", "/run/files/x/aircraft",
                  "/run/files/x/aircraft/payload.bin", "/run/files/x/ground/payload.bin")
    assert p.server == ["/b/satquic", "serve", "-root", "/run/files/x/aircraft", "-listen", "10.0.0.2:4433",
                        "-mode", mode, "-timeout", "30s", "-qlog-dir", "/run/qlog"]
    assert p.client == ["/b/satquic", "get", "-server", "10.0.0.2:4433", "-mode", mode, "-timeout", "30s",
                        "-qlog-dir", "/run/qlog", "-keylog", "/run/tls-keys.log",
                        "-file", "payload.bin", "-out", "/run/files/x/ground/payload.bin"]
    assert p.qlog_dir == "/run/qlog" and p.keylog == "/run/tls-keys.log"


def test_upload_plan_puts_under_the_received_name():
    p = quic.plan("/b/satquic", "http3", "upload", "10.0.0.2", 600, "/run", "/run/a",
                  "/run/g/payload.bin", "/run/a/upload.bin")
    assert p.client[:2] == ["/b/satquic", "put"]
    assert p.client[-4:] == ["-file", "/run/g/payload.bin", "-name", "upload.bin"]


def test_idle_timeout_grows_with_the_rtt():
    assert quic.idle_timeout(0) == "30s" and quic.idle_timeout(600) == "30s" and quic.idle_timeout(5000) == "50s"


def test_tool_summary_is_the_last_json_line():
    out = ('2026/11/27 failed to sufficiently increase receive buffer size\n'
           '{"op":"get","bytes":5,"handshake_s":0.6,"congestion_control":"newreno"}\n')
    assert summary(out) == {"op": "get", "bytes": 5, "handshake_s": 0.6, "congestion_control": "newreno"}
    assert summary("satquic: dial: timeout\n") == {}


CLIENT = {"vantage": "client", "handshake_ms": 604.0, "first_byte_ms": 1205.0, "last_byte_ms": 32727.0,
          "goodput_bps": 5.1e6, "goodput_after_first_byte_bps": 5.3e6, "max_cwnd_bytes": 40960,
          "min_rtt_ms": 600.2, "mean_rtt_ms": 600.8, "max_rtt_ms": 751.6, "packets_lost": 0,
          "stream_bytes_received": 20974776, "stream_bytes_sent": 52}
SERVER = {"vantage": "server", "handshake_ms": 602.8, "first_byte_ms": 603.0, "last_byte_ms": 603.0,
          "goodput_bps": 689.8, "goodput_after_first_byte_bps": 0, "max_cwnd_bytes": 465378,
          "min_rtt_ms": 600.1, "mean_rtt_ms": 600.6, "max_rtt_ms": 693.3, "packets_lost": 3,
          "stream_bytes_received": 52, "stream_bytes_sent": 20974776}


def test_qlog_figures_come_from_the_right_end():
    out = "\n".join(json.dumps(s) for s in (CLIENT, SERVER)) + "\n"
    by = quic.qlog_summaries(out)
    down = quic.qlog_metrics("download", by)
    # Handshake: the client's; first byte and goodput: the receiver's; cwnd, RTT, loss: the sender's.
    assert down["qlog_handshake_ms"] == 604.0 and down["qlog_first_byte_ms"] == 1205.0
    assert down["qlog_goodput_bps"] == 5.1e6 and down["qlog_max_cwnd_bytes"] == 465378
    assert down["qlog_min_rtt_ms"] == 600.1 and down["qlog_packets_lost"] == 3
    up = quic.qlog_metrics("upload", by)
    assert up["qlog_handshake_ms"] == 604.0 and up["qlog_first_byte_ms"] == 603.0
    assert up["qlog_max_cwnd_bytes"] == 40960 and up["qlog_packets_lost"] == 0


def test_qlog_events_that_never_came_are_left_out():
    by = quic.qlog_summaries(json.dumps({**CLIENT, "first_byte_ms": -1, "handshake_ms": -1}))
    m = quic.qlog_metrics("download", by)
    assert "qlog_first_byte_ms" not in m and "qlog_handshake_ms" not in m and "qlog_max_cwnd_bytes" not in m


def test_a_second_connection_of_one_end_keeps_the_one_that_moved_the_file():
    probe = {**CLIENT, "stream_bytes_received": 10, "stream_bytes_sent": 10, "handshake_ms": 1.0}
    for order in ((probe, CLIENT), (CLIENT, probe)):
        by = quic.qlog_summaries("\n".join(json.dumps(s) for s in order))
        assert by["client"]["handshake_ms"] == 604.0


summaries = st.lists(st.dictionaries(
    st.sampled_from(["vantage", "handshake_ms", "first_byte_ms", "goodput_bps", "max_cwnd_bytes",
                     "packets_lost", "stream_bytes_received", "stream_bytes_sent", "min_rtt_ms"]),
    st.one_of(st.none(), st.booleans(), st.integers(-10, 10**9), st.floats(allow_nan=True),
              st.text(max_size=5), st.sampled_from(["client", "server"]))), max_size=4)


@given(summaries, st.sampled_from(["download", "upload"]), st.text(max_size=40))
def test_any_tool_output_gives_plain_numbers(lines, direction, noise):
    """Whatever `satquic qlog` printed (or a line of something else), the
    metrics are finite non-negative numbers of the fields asked for."""
    out = noise + "\n" + "\n".join(json.dumps(s) for s in lines)
    m = quic.qlog_metrics(direction, quic.qlog_summaries(out))
    for key, value in m.items():
        assert key.startswith("qlog_")
        assert isinstance(value, (int, float)) and not isinstance(value, bool)
        assert value >= 0 and value == value and value != float("inf")


@needs_root
@pytest.mark.parametrize("client,direction", [("quic", "download"), ("http3", "upload")])
def test_a_file_crosses_a_100ms_link_over_quic(tmp_path, client, direction):
    if not os.access(SATQUIC, os.X_OK):
        pytest.skip(f"{SATQUIC} is absent (run `make build`)")
    cp = satbed("run", "--client", client, "--direction", direction, "--size", "2M", "--rtt", "100",
                "--pep", "pepd", "--captures", "none", "--no-analysis", "--out", str(tmp_path))
    assert cp.returncode == 0, cp.stderr
    run_dir = cp.stdout.splitlines()[0]
    with open(os.path.join(run_dir, "result.json"), encoding="utf-8") as f:
        r = json.load(f)
    assert r["integrity"] == "ok" and r["bytes"] == 2 << 20 and r["sha256"] == r["sha256_expected"]
    assert r["congestion_control"] == "newreno" and r[client]["mode"] == client
    # The handshake costs one round trip: the split PEP does not answer for UDP.
    assert 95 < r["handshake_ms"] < 400 and 95 < r["qlog_handshake_ms"] < 400, r
    assert r["qlog_first_byte_ms"] > 0 and r["qlog_goodput_bps"] > 0 and r["qlog_max_cwnd_bytes"] > 0
    assert set(r["qlog"]) == {"client", "server"}
    for s in r["qlog"].values():
        assert os.path.getsize(os.path.join(run_dir, s["file"])) > 0 and s["malformed"] == 0
    with open(os.path.join(run_dir, "tls-keys.log"), encoding="utf-8") as f:
        assert "CLIENT_TRAFFIC_SECRET_0 " in f.read()
    # pepd splits TCP only: the transfer moved nothing through it.
    for node in r["pep"]["nodes"].values():
        assert node["bytes_lan_to_wan"] == 0 and node["bytes_wan_to_lan"] == 0


def _split_pep_env(pep: str, tmp_path) -> dict[str, str]:
    """How a run finds PEPsal or the SCPS gateway: the real build where the
    environment names one, else the stand-in (PEPsal's as patched to warn
    about the open-file limit it cannot raise, docs/peps/pepsal-scps.md)."""
    if pep == "pepsal":
        real = os.environ.get("SATBED_PEPSAL_BIN", "")
        if real:
            return {"SATBED_PEPSAL_BIN": real}
        wrapper = tmp_path / "pepsal"
        wrapper.write_text(f'#!/bin/sh\nSTANDIN_LIMIT=warn exec {STANDINS}/pepsal "$@"\n')
        wrapper.chmod(0o755)
        return {"SATBED_PEPSAL_BIN": str(wrapper)}
    return {"SATBED_SCPS_BIN": os.environ.get("SATBED_SCPS_BIN", "") or f"{STANDINS}/scps-gateway"}


@needs_root
@pytest.mark.parametrize("pep", [
    "pepsal",
    pytest.param("scps", marks=pytest.mark.skipif(
        not os.path.exists("/dev/net/tun") or shutil.which("brctl") is None or shutil.which("ifconfig") is None,
        reason="the SCPS gateway needs /dev/net/tun, brctl and ifconfig (bridge-utils, net-tools)")),
])
def test_a_split_pep_passes_quic_untouched(tmp_path, pep):
    """QUIC through PEPsal and the SCPS gateway: the file arrives intact and
    the PEPs' own counters show nothing split. They split the probes'
    TCP before the transfer (the proof they are in the path) and nothing
    after; the only TCP they counted is those probes'."""
    if not os.access(SATQUIC, os.X_OK):
        pytest.skip(f"{SATQUIC} is absent (run `make build`)")
    cp = satbed("run", "--client", "quic", "--size", "2M", "--rtt", "100", "--pep", pep, "--captures", "none",
                "--no-analysis", "--out", str(tmp_path / "runs"), env=_split_pep_env(pep, tmp_path), timeout=600)
    assert cp.returncode == 0, cp.stderr
    with open(os.path.join(cp.stdout.splitlines()[0], "result.json"), encoding="utf-8") as f:
        r = json.load(f)
    assert r["integrity"] == "ok" and r["bytes"] == 2 << 20 and r["sha256"] == r["sha256_expected"]
    # End to end: one round trip across the link, no PEP answering for UDP.
    assert 95 < r["handshake_ms"] < 400, r["handshake_ms"]
    proof, nodes = r["split_proof"]["connections_split"], r["pep"]["nodes"]
    assert set(proof) == set(nodes) == {"pepA", "pepB"}, (proof, nodes)
    for name, node in nodes.items():
        before, after = proof[name]
        assert node["pep"] == pep and after > before, (name, proof[name])
        assert node["connections_split"] == after, (name, node, proof[name])
        assert node["bytes_lan_to_wan"] + node["bytes_wan_to_lan"] < PROBE_BYTES, (name, node)
