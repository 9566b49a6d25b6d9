"""The LEO scenario (scenarios/leo.yaml, topologies/leo.yaml): its committed
link profile is what its LEO link file makes, its matrix is the cells it
says, bad variations of it are one line, and on a testbed a ping's RTT
follows twice the profile's one-way delay through the handovers."""

from __future__ import annotations

import bisect
import csv
import json
import os
import re

import pytest
import yaml

from satbed.core.errors import SatbedError
from satbed.core.proc import BIN_DIR, REPO_ROOT
from satbed.execution import matrix
from satbed.model import linkprofile, scenario

from satbed_testlib import needs_root, satbed

LINK_FILE = os.path.join(REPO_ROOT, "profiles", "link", "leo-starlink.yaml")
PROFILE = os.path.join(REPO_ROOT, "profiles", "link", "leo-starlink.csv")


def delays(path: str) -> tuple[list[float], list[float]]:
    """The profile's delay_ms steps: (times, one-way delays)."""
    with open(path, encoding="utf-8") as f:
        rows = [r for r in csv.reader(f) if r and not r[0].startswith("#")]
    t, d = rows[0].index("t_s"), rows[0].index("delay_ms")
    pts = [(float(r[t]), float(r[d])) for r in rows[1:] if r[d].strip()]
    return [p[0] for p in pts], [p[1] for p in pts]


def test_the_committed_profile_is_what_its_link_file_makes(tmp_path):
    out = tmp_path / "leo.csv"
    cp = satbed("leo-profile", LINK_FILE, "--out", str(out), timeout=300)
    assert cp.returncode == 0, cp.stderr
    with open(PROFILE, encoding="utf-8") as f:
        assert out.read_text() == f.read(), "regenerate it: satbed leo-profile profiles/link/leo-starlink.yaml " \
                                            "--out profiles/link/leo-starlink.csv"
    summary = json.loads(cp.stdout)
    assert summary["points"] == 3001 and not summary["down"]
    # Handovers only at the 15 s reconfiguration instants.
    assert summary["handovers"] and all(h["t_s"] % 15 == 0 for h in summary["handovers"])


def test_the_leo_scenario_expands_to_its_cells():
    exp = matrix.load(scenario.find("leo"))
    cells = {(c.params["client"], c.params["pep"], c.params["variant"]) for c in exp.cells}
    assert cells == {("nuttcp-tcp", pep, cc) for pep in ("none", "pepd") for cc in ("cubic", "bbr")} | \
        {("saratoga", "none", "saratoga"), ("quic", "none", "quic"), ("http3", "none", "quic")}
    assert exp.reference == {"client": "saratoga"}
    for c in exp.cells:
        sat = c.config["links"]["sat"]
        assert sat["a_to_b"]["profile"] == sat["b_to_a"]["profile"] == PROFILE
        assert sat["a_to_b"]["rate_bps"] == sat["b_to_a"]["rate_bps"] == 100_000_000
        assert c.config["size_bytes"] == 20 << 20 and c.config["endpoints"] == ["ut", "server"]
        if c.params["client"] == "nuttcp-tcp":
            assert c.config["profiles"] == {"ut": c.params["variant"], "server": c.params["variant"]}
    linkprofile.check(PROFILE)


def write(tmp_path, change: dict) -> str:
    """scenarios/leo.yaml with change's dotted paths set, beside a bad profile."""
    (tmp_path / "bad.csv").write_text("t_s,delay_ms\n0,5\n1,-3\n")
    with open(scenario.find("leo"), encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    doc["links"]["sat"]["profile"] = PROFILE
    for path, value in change.items():
        node = doc
        *parents, last = path.split(".")
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    out = tmp_path / "leo.yaml"
    out.write_text(yaml.safe_dump(doc))
    return str(out)


BAD = [
    ({"links.sat.profile": "nosuch.csv"}, "links.sat: a_to_b: cannot read profile"),
    ({"links.sat.profile": "bad.csv"}, "bad.csv: point 2: delay_ms -3.0 outside [0, 3.6e+06]"),
    ({"links.sat.rate": "fast"}, "links.sat: bad rate"),
    ({"links.sat.queue": 0}, "links.sat: queue must be a positive number"),
    ({"links.sat.hop": 1}, "links.sat: unknown key(s) hop"),
    ({"profiles.ut": "bbr2"}, "unknown TCP profile 'bbr2'"),
    ({"matrix.variants.1.set": {"profiles.server": "vegas"}}, "unknown TCP profile 'vegas'"),
    ({"matrix.variants.2": {"name": "saratoga", "clients": ["saratoga"], "set": {"pep": "none"}}},
     "variants.2.set.pep: also an axis"),
    ({"workload.main.between": ["ut"]}, "workload.main.between"),
    ({"workload.main.between": ["ut", "gw"]},
     "workload.main.between.1: no host 'gw' (the topology leo.yaml's hosts: server, ut)"),
    ({"links": {"gw": {"rate": "1mbit"}}}, "links.gw: no emulator node 'gw' (the topology leo.yaml's emulators: sat)"),
    ({"peps": {"sat": "pepd"}}, "peps.sat: no PEP node 'sat' (the topology leo.yaml's PEP nodes: pepG, pepT)"),
]


@pytest.mark.parametrize("change, message", BAD, ids=[next(iter(c)) for c, _ in BAD])
def test_bad_leo_scenarios_are_one_line(tmp_path, change, message):
    with pytest.raises(SatbedError) as err:
        matrix.load(write(tmp_path, change))
    assert message in str(err.value) and "\n" not in str(err.value)


@needs_root
@pytest.mark.parametrize("change, message", [*BAD[:3], *BAD[-3:]],
                         ids=["missing profile", "bad profile", "bad rate", "gateway is no host",
                              "gateway is no emulator", "emulator is no pep node"])
def test_bad_leo_scenarios_stop_satbed_run_with_one_line(tmp_path, change, message):
    """As a user runs them: exit 2, one line, no traceback, no run directory."""
    cp = satbed("run", "--scenario", write(tmp_path, change), "--client", "ping", "--no-analysis",
                "--out", str(tmp_path / "runs"), timeout=120)
    assert cp.returncode == 2, cp.stderr
    assert cp.stderr.strip().count("\n") == 0 and message in cp.stderr and "Traceback" not in cp.stderr
    assert not os.path.exists(tmp_path / "runs") or not os.listdir(tmp_path / "runs")


ECHO = re.compile(r"^\[([\d.]+)\] .*icmp_seq=\d+ .*time=([\d.]+) ms")


def echo_errors(run_dir: str) -> list[tuple[float, float, float]]:
    """(profile time the echo was sent, RTT, twice the profile's one-way delay then)
    for each echo in the run's ping log: ping -D stamps a reply's arrival,
    so it was sent RTT earlier, and the profile's clock started at the
    result's schedule_clock_wall_s."""
    times, one_way = delays(PROFILE)
    with open(os.path.join(run_dir, "result.json"), encoding="utf-8") as f:
        start = json.load(f)["schedule_clock_wall_s"]
    out = []
    with open(os.path.join(run_dir, "logs", "ping.txt"), encoding="utf-8") as f:
        for line in f:
            m = ECHO.match(line)
            if m:
                rtt = float(m.group(2))
                p = float(m.group(1)) - rtt / 1000 - start
                out.append((p, rtt, 2 * one_way[max(0, bisect.bisect_right(times, p) - 1)]))
    return out


@needs_root
def test_leo_ping_follows_the_profile_through_a_handover(tmp_path):
    if not os.path.exists(os.path.join(BIN_DIR, "satemu")):
        pytest.skip("bin/satemu missing: make build first")
    # 40 echoes, one a second: the handovers at 15 s (0.34 ms shorter one way)
    # and 30 s (0.74 ms shorter), the drift between them, and ten echoes after.
    cp = satbed("run", "--scenario", "leo", "--client", "ping", "--time-limit", "40", "--captures", "none",
                "--set", "profiles.ut=bbr", "--no-analysis", "--out", str(tmp_path), timeout=180)
    assert cp.returncode == 0, cp.stderr
    run_dir = cp.stdout.splitlines()[0]
    echoes = echo_errors(run_dir)
    assert len(echoes) >= 36
    # Load only ever delays an echo, so the least errors are the chain's own:
    # bridges, veths and satemu add a fifth of a millisecond on a quiet
    # machine and never take any away. A busy machine moves the median, not
    # the floor (a suite run once saw the median at 0.54 ms).
    errors = [rtt - want for _, rtt, want in echoes]
    floor = min(errors)
    assert -0.05 <= floor < 0.5, echoes
    # Between each pair of handovers the profile is followed: the best echo of
    # each stretch is as close to it as the best of all. A step applied late,
    # or a delay held instead of followed, leaves a whole stretch off by the
    # step or the drift (0.67-1.48 ms of RTT).
    for lo, hi in ((0, 15), (15, 30), (30, 40)):
        stretch = [rtt - want for p, rtt, want in echoes if lo + 0.1 <= p < hi]
        assert len(stretch) >= 8 and min(stretch) - floor < 0.25, (lo, hi, echoes)
    # The handover is seen where the profile has it: an echo's RTT only
    # grows with load, so the least of a few before and after the step is
    # the bent pipe's.
    before = min(rtt for p, rtt, _ in echoes if 27 <= p < 30)
    after = min(rtt for p, rtt, _ in echoes if 30 <= p < 33)
    assert before - after > 0.7, echoes
    with open(os.path.join(run_dir, "environment.json"), encoding="utf-8") as f:
        env = json.load(f)
    # The congestion control each host's profile set, not the one before it;
    # the PEP nodes' stock one, not this machine's default.
    assert env["tcp_congestion_control"] == {"ut": "bbr", "server": "cubic", "pepT": "cubic", "pepG": "cubic"}
