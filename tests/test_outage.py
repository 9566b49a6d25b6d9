"""The outage study (the ACK-reservation study): the scenario, the sender's cwnd
trace and the recovery/throughput metrics (analysis/outage.py)."""

from __future__ import annotations

import json

import pytest
import yaml

from analysis import outage
from satbed.backends import cwnd
from satbed.execution import matrix
from satbed.model import scenario
from satbed.core.errors import SatbedError

SS = """@@ 100.0
ESTAB 0      0      10.99.15.2:40000 10.99.15.254:5000
\t cubic wscale:7,7 rto:204 rtt:50.1/0.1 mss:1448 cwnd:10 bytes_sent:19 bytes_acked:20
ESTAB 0      212    10.99.15.2:40001 10.99.15.254:5001
\t reno wscale:7,7 rto:1620 backoff:3 rtt:50.2/1 mss:1448 cwnd:1 ssthresh:2 bytes_sent:900000 bytes_acked:880000 unacked:12 retrans:1/40 lost:3
@@ 100.1
ESTAB 0      0      10.99.15.2:40000 10.99.15.254:5000
\t cubic wscale:7,7 rto:204 rtt:50.1/0.1 mss:1448 cwnd:10 bytes_sent:19 bytes_acked:20
ESTAB 0      212    10.99.15.2:40001 10.99.15.254:5001
\t reno wscale:7,7 rto:204 rtt:50.2/1 mss:1448 cwnd:14 ssthresh:2 bytes_sent:960000 bytes_acked:950000 unacked:12
@@ 100.2
ESTAB 0      0      10.99.15.2:40000 10.99.15.254:5000
\t cubic wscale:7,7 rto:204 rtt:50.1/0.1 mss:1448 cwnd:10 bytes_sent:359 bytes_acked:360
"""


def test_cwnd_trace_follows_the_main_flow_only():
    rows = cwnd.parse(SS)
    assert [r["t"] for r in rows] == [100.0, 100.1]          # the control connection is left out
    assert rows[0]["cwnd"] == 1 and rows[0]["ssthresh"] == 2 and rows[0]["backoff"] == 3
    assert rows[0]["rto"] == 1620.0 and rows[0]["retrans"] == "1/40"
    assert rows[1]["cwnd"] == 14 and rows[1]["bytes_acked"] == 950000
    assert cwnd.parse("") == [] and cwnd.parse("@@ garbage\n") == []


def test_outage_schedule_and_limit():
    s = outage.Schedule(clock=1000.0, period_s=40, down_s=10, offset_s=10, rate_bps=3_000_000)
    assert s.outages(1095) == [(1010.0, 1020.0), (1050.0, 1060.0), (1090.0, 1100.0)]
    assert s.limit == 0.75
    assert s.payload_rate == pytest.approx(3_000_000 / 8 * 1448 / 1500)


@pytest.mark.parametrize("pattern, want", [
    ("full at once", 0.0),
    ("after 2 s", 2.0),
    ("never", None),
    ("a burst is not recovery", 3.0),
])
def test_recovery_time(pattern, want):
    rate = 1000.0                       # bytes per second
    start, up = 0.0, 10.0
    bins = [0.0] * 200                  # 20 s in 100 ms bins
    full = rate * outage.BIN_S
    if pattern == "full at once":
        for i in range(100, 200):
            bins[i] = full
    elif pattern == "after 2 s":
        for i in range(120, 200):
            bins[i] = full
    elif pattern == "a burst is not recovery":
        bins[100] = 0.3 * rate          # (1-K)·B at once: less than 0.9 x rate x 0.5 s
        for i in range(130, 200):
            bins[i] = full
    got = outage.recovery_time(bins, start, up, 20.0, rate)
    assert got == (pytest.approx(want) if want is not None else None)


def test_recovery_time_over_the_longer_window():
    """A source that sends 0.6 s at the link rate, pauses 0.4 s, then keeps
    up: recovered at once over 0.5 s; over 1 s only once the window holds
    at most 0.1 s of the pause (90 %)."""
    rate, full = 1000.0, 1000.0 * outage.BIN_S
    bins = [0.0] * 200
    for i in list(range(100, 106)) + list(range(110, 200)):
        bins[i] = full
    assert outage.recovery_time(bins, 0.0, 10.0, 20.0, rate) == pytest.approx(0.0)
    assert outage.recovery_time(bins, 0.0, 10.0, 20.0, rate, outage.WINDOW_LONG_S) == pytest.approx(0.9)


def test_outage_scenario_expands_and_checks_its_keys(tmp_path):
    exp = matrix.load(scenario.find("outage"))
    assert len(exp.cells) == 30
    # The study's access node drops the source's packets during an outage: the terrestrial link
    # loses them on the satellite link's schedule, and only in those variants.
    drops = [c.config for c in exp.cells if c.params["variant"].startswith("study-drops")]
    assert len(drops) == 2 and all(c["links"]["terr"]["a_to_b"]["outage"] == c["links"]["sat"]["a_to_b"]["outage"]
                                   for c in drops)
    assert not any(c.config["links"]["terr"]["a_to_b"].get("outage") for c in exp.cells
                   if not c.params["variant"].startswith("study-drops"))
    cfgs = [c.config for c in exp.cells]
    assert all(c["cwnd_interval_s"] == 0.1 and c["direction"] == "upload" for c in cfgs)
    sat = cfgs[0]["links"]["sat"]["a_to_b"]
    assert sat["outage"] == {"period_s": 40, "down_s": 10, "offset_s": 10} and sat["rate_bps"] == 3_000_000
    assert {c["peps"]["acc"]["name"] for c in cfgs} == {"none", "pepd"}
    # the wan=rate rows put the peer on `far`; elsewhere it is a plain bridge
    pairs = [c for c in cfgs if c["peps"].get("far", {}).get("name") == "pepd"]
    assert pairs and all(c["peps"]["acc"]["options"].startswith("wan=rate") for c in pairs)
    doc = yaml.safe_load(open(scenario.find("outage")))
    doc["workload"]["main"]["cwnd_trace"] = 20
    path = tmp_path / "o.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(SatbedError, match="cwnd_trace") as err:
        matrix.load(str(path))
    assert "\n" not in str(err.value)


def test_study_page_from_a_run_without_captures_names_the_problem(tmp_path):
    run = tmp_path / "m" / "r1"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({
        "scenario": "/x/scenarios/outage.yaml",
        # the wan=rate peer `far` listed first: the metrics are the access node's
        "peps": {"far": {"name": "pepd", "options": "wan=rate"},
                 "acc": {"name": "pepd", "options": "wan=rate buffer_packets=185 trace_interval=100ms"}},
        "links": {"sat": {"a_to_b": {"rate_bps": 3000000, "outage": {"period_s": 40, "down_s": 10, "offset_s": 10}}}}}))
    (run / "result.json").write_text(json.dumps({"schedule_clock_wall_s": 1000.0, "integrity": "ok"}))
    m = outage.run_metrics(run)
    assert m.buffer_packets == 185 and m.error.startswith("captures")
    assert m.label == "pepd wan=rate buffer_packets=185"
    page = outage.study_page(tmp_path / "m")
    assert page is not None and "captures" in page.read_text()
    assert outage.study_page(tmp_path / "empty") is None


def test_the_schedule_is_the_satellite_link_s_when_the_terrestrial_link_has_one_too():
    """The study's drops give `terr` the satellite link's outages; the
    payload rate that recovery and throughput are measured against stays the
    satellite link's."""
    outage_block = {"period_s": 40, "down_s": 10, "offset_s": 10}
    config = {"links": {"terr": {"a_to_b": {"outage": outage_block, "rate_bps": 30_000_000}},
                        "sat": {"a_to_b": {"outage": outage_block, "rate_bps": 3_000_000}}}}
    sched = outage.schedule(None, config, {"schedule_clock_wall_s": 100.0})
    assert sched is not None and sched.payload_rate == outage.Schedule(100.0, 40, 10, 10, 3_000_000).payload_rate
