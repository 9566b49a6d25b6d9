"""The userspace emulator on the live testbed: RTT, rate, outage and loss as
configured. Fidelity figures (p99 error, capacity) are the benchmark's job;
these bounds only catch a broken link."""

from __future__ import annotations

import json
import os
import tempfile

import pytest

from satbed.backends import emulation

from satbed.execution import checklink

from satbed.model import topology
from satbed.model.link import Direction, LinkConfig
from satbed.core.proc import BIN_DIR
from satbed.backends.testbed import running

from satbed_testlib import needs_root, satbed

pytestmark = [needs_root, pytest.mark.skipif(not os.path.exists(os.path.join(BIN_DIR, "satemu")),
                                             reason="bin/satemu not built (make build)")]


def test_check_link_reports_rate_rtt_and_per_beside_configuration():
    cp = satbed("check-link", "--emulator", "userspace", "--rtt", "200", "--ber", "1e-5",
                "--seconds", "6", "--probes", "1500", "--json")
    assert cp.returncode == 0, cp.stderr
    out = json.loads(cp.stdout)
    assert out["emulator"] == "userspace"
    assert out["configured"] == {"rate_bps": 8000000, "rtt_ms": 200.0, "ber": 1e-5}
    assert abs(out["udp_wire_error"]) < 0.03
    # The emulator never delivers early, and a loaded machine delays a few
    # echoes by tens of milliseconds: the least and the median are the
    # link's, the mean is partly the machine's (244 ms once under three
    # xdist workers). A link 5 ms slow fails the median.
    idle = out["rtt_idle"]
    assert 199 < idle["rtt_ms_min"] <= idle["rtt_ms_p50"] < 205, idle
    for size, per in out["per"].items():
        # Three standard errors: a broken BER stage misses by far more.
        lo, hi = per["ci95"]
        slack = (hi - lo) / 2 * 1.6
        assert lo - slack <= per["per_measured"] <= hi + slack, (size, per)


def test_per_packet_loss_takes_the_same_share_of_small_and_large_frames():
    """loss is per packet (netem's meaning): 64-byte and 1514-byte frames lose
    the same 5%, where a BER would take 24 times more of the large ones."""
    cfg = LinkConfig.symmetric(rate="20mbit", backend="userspace", loss=0.05)
    with running(topology.load("globalhawk"), bridge_kinds=("pep",)) as tb:
        emu = emulation.make(tb.transparent("emulator")[0], cfg, tempfile.mkdtemp(prefix="satbed-test-"))
        emu.start()
        try:
            a, b = tb.host("clientA"), tb.host("clientB")
            shares = {size: checklink.per_probe(a, b, size, 4000, 4e6, cfg.a_to_b) for size in (64, 1514)}
        finally:
            stats = emu.stop()["stats"]
    for size, per in shares.items():
        assert per["per_expected"] == pytest.approx(0.05)
        assert per["inside_ci95"] or abs(per["per_measured"] - 0.05) < 0.015, (size, per)
    drops = stats["totals"]["directions"]["a_to_b"]["drops"]
    assert drops["loss"] > 0 and drops["ber"] == 0, drops


def test_outage_drops_everything_while_down():
    cfg = LinkConfig.symmetric(rate="20mbit", rtt_ms=20, backend="userspace",
                               outage={"period_s": 2.0, "down_s": 1.0, "offset_s": 0.0})
    with running(topology.load("globalhawk"), bridge_kinds=("pep",)) as tb:
        emu = emulation.make(tb.transparent("emulator")[0], cfg, tempfile.mkdtemp(prefix="satbed-test-"))
        emu.start()
        emu.start_clock()       # schedules are held until the measurement starts
        try:
            a, b = tb.host("clientA"), tb.host("clientB")
            per = checklink.per_probe(a, b, 1514, 2000, 2e6, Direction())
        finally:
            stats = emu.stop()["stats"]
    # Down half of every cycle: about half the probes are lost, and the
    # emulator counts them as outage drops, not bit errors.
    assert 0.35 < per["per_measured"] < 0.65, per
    drops = stats["totals"]["directions"]["a_to_b"]
    assert drops["drops"]["outage"] > 0 and drops["drops"]["ber"] == 0, drops


def test_rate_change_mid_run_through_the_control_socket():
    cfg = LinkConfig.symmetric(rate="8mbit", backend="userspace")
    with running(topology.load("globalhawk"), bridge_kinds=("pep",)) as tb:
        emu = emulation.make(tb.transparent("emulator")[0], cfg, tempfile.mkdtemp(prefix="satbed-test-"))
        emu.start()
        try:
            emu.set("both", rate_bps=2_000_000, ceil_bps=2_000_000)
            udp = checklink.nuttcp_udp(tb.host("clientA"), tb.host("clientB"), 4e6, 6)
        finally:
            emu.stop()
    assert udp["udp_wire_bps"] == pytest.approx(2e6, rel=0.05)
