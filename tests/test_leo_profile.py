"""`satbed leo-profile` as a user runs it: a profile file from flags, from a
LEO link file (flags laid over it), from traces; bad input is one line and
exit status 2. No network, no root needed."""

from __future__ import annotations

import json

import pytest

from satbed_testlib import satbed
from satbed.model import linkprofile
from test_orbits import ISS

WALKER = ["--walker", "53:1584/72/17", "--altitude", "550", "--terminal", "51.5,-0.1", "--gateway", "51,-1.5"]


def test_walker_flags(tmp_path):
    out = tmp_path / "leo.csv"
    r = satbed("leo-profile", *WALKER, "--duration", "40", "--handover-outage-ms", "20", "--out", str(out),
               timeout=120)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    linkprofile.check(str(out))
    text = out.read_text()
    assert text.startswith("# satbed leo-profile: Walker 53:1584/72/17 delta at 550 km") and "t_s,delay_ms,up" in text
    # The source line, the handovers line, the header, the points.
    assert summary["points"] == len(text.splitlines()) - 3 and summary["handovers"]
    # The handover instants travel with the file, for a run's report to mark.
    assert linkprofile.handovers(str(out)) == [h["t_s"] for h in summary["handovers"]]
    assert all(h["t_s"] in (15.0, 30.0) for h in summary["handovers"])
    # Each handover's outage is said, with its reason.
    assert r.stderr.count("handover to") == len(summary["handovers"])


def test_file_with_flags_over_it(tmp_path):
    (tmp_path / "iss.tle").write_text(ISS)
    spec = tmp_path / "leo.yaml"
    spec.write_text("constellation: {tle: iss.tle}\nterminal: {lat: 0, lon: 0}\ngateway: {lat: 0, lon: 1}\n"
                    "duration_s: 100\npolicy: {min_elevation_deg: 10}\n")
    out = tmp_path / "iss.csv"
    r = satbed("leo-profile", str(spec), "--duration", "5", "--out", str(out), timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["points"] == 51        # 5 s at 10 Hz and t = 0; the flag won
    # One satellite that is not over the equator then: down, and said so.
    assert "link down from 0 s to 5 s: no satellite 10 deg" in r.stderr
    linkprofile.check(str(out))


def test_traces(tmp_path):
    trace, out = tmp_path / "cell.trace", tmp_path / "cell.csv"
    trace.write_text("0\n1\n2\n150\n")
    r = satbed("leo-profile", "--mahimahi", str(trace), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert out.read_text().splitlines()[1:] == ["t_s,rate_bps", "0,363360", "0.1,121120"]
    assert linkprofile.handovers(str(out)) is None      # a trace tells no handovers


@pytest.mark.parametrize("args, message", [
    ([], "give one source"),
    (["--walker", "53:1584/70/17", "--altitude", "550"],
     "--walker '53:1584/70/17': walker: 1584 satellites do not split evenly into 70 planes"),
    (["--walker", "53:1584/72/17"], "--walker needs --altitude"),
    (["--walker", "53/1584/72/17", "--altitude", "550"], "INCLINATION:TOTAL/PLANES/PHASING"),
    ([*WALKER, "--terminal", "95,0"], "--terminal.lat: 95.0 outside"),
    ([*WALKER, "--gateway", "1"], "--gateway '1': give LAT,LON"),
    ([*WALKER, "--policy", "nearest"], "known policies"),
    ([*WALKER, "--start", "yesterday"], "ISO 8601"),
    (["--walker", "53:24/6/1", "--altitude", "550"], "terminal missing"),
    (["--mahimahi", "/nonexistent.trace"], "no such Mahimahi trace"),
    ([*WALKER, "--mahimahi", "x"], "give one source"),
    (["--mahimahi", "x", "--terminal", "1,2"], "--terminal goes with orbit geometry"),
    ([*WALKER, "--window-ms", "10"], "--window-ms goes with --mahimahi"),
])
def test_bad_input_is_one_line(tmp_path, args, message):
    r = satbed("leo-profile", *args, "--out", str(tmp_path / "p.csv"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and message in r.stderr, r.stderr
    assert not (tmp_path / "p.csv").exists()


def test_bad_file_names_itself(tmp_path):
    spec = tmp_path / "leo.yaml"
    spec.write_text("constellation: {walker: {inclination_deg: 53, total: 24, planes: 6, phasing: 9, "
                    "altitude_km: 550}}\nterminal: {lat: 0, lon: 0}\ngateway: {lat: 0, lon: 1}\n")
    r = satbed("leo-profile", str(spec), "--out", str(tmp_path / "p.csv"))
    assert r.returncode == 2 and f"{spec}: walker.phasing: 9 outside [0, 5]" in r.stderr, r.stderr
