"""The LEO fidelity benchmark's reading (analysis/leo_fidelity.py,
scripts/leo_fidelity.py) on runs made here: wan_a and wan_b captures
whose frames were delayed and paced as a profile says, give or take a
known error, and bad captures, profiles and arguments end in one line."""

from __future__ import annotations

import ipaddress
import json
import struct
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis import leo_fidelity
from satbed.core.errors import SatbedError
from satbed.core.proc import REPO_ROOT

sys.path.insert(0, str(Path(REPO_ROOT) / "scripts"))
import leo_fidelity as script  # noqa: E402  (scripts/ is no package)

T0 = 1_800_000_000.0
UT, SRV = "10.99.20.2", "10.99.20.254"


def ip4(src: str, dst: str, proto: int, ident: int, body: bytes, size: int) -> bytes:
    return struct.pack(">BBHHHBBH4s4s", 0x45, 0, size - 14, ident, 0x4000, 64, proto, 0,
                       ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed) + body


def eth(payload: bytes) -> bytes:
    return b"\x02\x00\x00\x00\x00\x01\x02\x00\x00\x00\x00\x02\x08\x00" + payload


def write_pcap(path: Path, records: list[tuple[float, bytes, int]]) -> None:
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    for ts, data, wire in sorted(records, key=lambda r: r[0]):
        sec, usec = divmod(int(round(ts * 1e6)), 1_000_000)
        out.append(struct.pack("<IIII", sec, usec, len(data), wire) + data)
    path.write_bytes(b"".join(out))


def make_run(tmp_path: Path, profile: str) -> Path:
    run = tmp_path / "run"
    (run / "captures").mkdir(parents=True)
    (run / "emulator").mkdir()
    (run / "p.csv").write_text(profile)
    link = {"profile": str(run / "p.csv")}
    (run / "config.json").write_text(json.dumps({"links": {"sat": {"a_to_b": link, "b_to_a": link}}}))
    (run / "result.json").write_text(json.dumps({"schedule_clock_wall_s": T0, "schedule_clock_started_s": {"sat": 2.0}}))
    return run


DELAY = "# handovers_s: 15\nt_s,delay_ms\n0,4.5\n15,4\n"


def echo_run(tmp_path: Path, error_ms: float = 0.0) -> Path:
    """Echoes each second for 30 s, every frame late by error_ms."""
    run = make_run(tmp_path, DELAY)
    a, b = [], []
    for seq in range(30):
        t = seq + 0.5
        d = (4.5 if t < 15 else 4.0) / 1000
        e = error_ms / 1000
        req = eth(ip4(UT, SRV, 1, seq, struct.pack(">BBHHH", 8, 0, 0, 7, seq) + b"x" * 56, 98))
        rep = eth(ip4(SRV, UT, 1, 1000 + seq, struct.pack(">BBHHH", 0, 0, 0, 7, seq) + b"x" * 56, 98))
        a.append((T0 + t, req, 98))
        b.append((T0 + t + d + e, req, 98))
        b.append((T0 + t + 0.001, rep, 98))
        a.append((T0 + t + 0.001 + d + e, rep, 98))
    write_pcap(run / "captures" / "wan_a.pcap", a)
    write_pcap(run / "captures" / "wan_b.pcap", b)
    return run


def test_delay_errors_are_what_the_frames_met(tmp_path):
    exact = leo_fidelity.delay_fidelity(echo_run(tmp_path / "0"))
    for s in exact["one_way"].values():
        assert s["n"] == 30 and abs(s["p50_ms"]) < 0.002 and s["max_abs_ms"] < 0.002
    assert exact["echo_rtt"]["n"] == 30 and exact["echo_rtt"]["max_abs_ms"] < 0.004
    late = leo_fidelity.delay_fidelity(echo_run(tmp_path / "1", error_ms=0.3))
    assert late["one_way"]["a_to_b"]["p50_ms"] == pytest.approx(0.3, abs=0.002)
    assert late["echo_rtt"]["p50_ms"] == pytest.approx(0.6, abs=0.004)


RATE = "t_s,rate_bps,delay_ms\n0,12000000,4\n5,24000000,4\n"


def paced_run(tmp_path: Path, scale: float = 1.0, idle_from: float | None = None) -> Path:
    """Server to terminal, 1514-byte frames paced at scale x the profile's
    rate for 10 s, satemu's queue busy throughout (until idle_from)."""
    run = make_run(tmp_path, RATE)
    a, b = [], []
    t, n = 0.0, 0
    while t < 10:
        rate = (12e6 if t < 5 else 24e6) * scale
        frame = eth(ip4(SRV, UT, 17, n & 0xFFFF, struct.pack(">HHI", 5000, 6000, n), 1514))[:60]
        b.append((T0 + t, frame, 1514))
        a.append((T0 + t + 0.004, frame, 1514))
        t += 1514 * 8 / rate
        n += 1
    write_pcap(run / "captures" / "wan_a.pcap", a)
    write_pcap(run / "captures" / "wan_b.pcap", b)
    rows = ["t_s,direction,queue_packets"]
    for k in range(101):
        ts = k / 10
        rows.append(f"{2 + ts:.1f},b_to_a,{0 if idle_from is not None and ts >= idle_from else 50}")
        rows.append(f"{2 + ts:.1f},a_to_b,0")
    (run / "emulator" / "emulator_timeseries.csv").write_text("\n".join(rows) + "\n")
    return run


def test_the_rate_held_per_window(tmp_path):
    r = leo_fidelity.rate_fidelity(paced_run(tmp_path / "0"), 1.0)
    assert r["direction"] == "b_to_a" and r["windows"] == 8 and r["windows_not_saturated"] == 0
    assert r["max_abs_error"] < 0.002 and r["within_target"] == 8
    assert [w["profile_bps"] for w in r["per_window"]][:4] == [12_000_000] * 4
    fast = leo_fidelity.rate_fidelity(paced_run(tmp_path / "1", scale=1.05), 1.0)
    assert fast["p50_abs_error"] == pytest.approx(0.05, abs=0.002) and fast["within_target"] == 0
    idle = leo_fidelity.rate_fidelity(paced_run(tmp_path / "2", idle_from=6.0), 1.0)
    assert idle["windows"] == 5 and idle["windows_not_saturated"] == 3


def test_the_script_reads_stored_runs(tmp_path, capsys):
    out = tmp_path / "out"
    code = script.main(["--delay-run", str(echo_run(tmp_path / "d")), "--rate-run", str(paced_run(tmp_path / "r")),
                        "--out", str(out)])
    assert code == 0
    doc = json.loads((out / "fidelity.json").read_text())
    assert doc["delay"]["echo_rtt"]["n"] == 30 and doc["rate"]["windows"] == 8
    assert "8 within 2%" in capsys.readouterr().out


def test_the_steps_trace_is_the_rates_it_names():
    t = [int(x) for x in script.steps_trace(20).split()]
    assert t == sorted(t)
    per_quarter = [sum(1 for x in t if q * 5000 <= x < (q + 1) * 5000) for q in range(4)]
    # One 1500-byte opportunity per ms is 12 Mbit/s.
    assert [n * 1500 * 8 / 5 / 1e6 for n in per_quarter] == list(script.STEPS_MBPS)


@pytest.mark.parametrize("args, message", [
    ([], "give --out DIR"),
    (["--delay-run", "x"], "give --delay-run and --rate-run together"),
    (["--out", "o", "--delay-seconds", "1"], "--delay-seconds 1: give 4 to 3600 s"),
    (["--delay-run", "/nonexistent", "--rate-run", "/nonexistent"], "/nonexistent"),
])
def test_bad_script_arguments_are_one_line(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    assert script.main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("change, message", [
    (lambda run: (run / "captures" / "wan_b.pcap").unlink(), "no captures/wan_b.pcap"),
    (lambda run: (run / "captures" / "wan_a.pcap").write_bytes(b"\x0a\x0d\x0d\x0a" + b"\0" * 40),
     "not a classic pcap file"),
    (lambda run: (run / "captures" / "wan_a.pcap").write_bytes(b"\xd4\xc3\xb2\xa1"), "too short for a pcap header"),
    (lambda run: (run / "captures" / "wan_a.pcap").write_bytes(
        (run / "captures" / "wan_a.pcap").read_bytes()[:-10]), "ends inside a record"),
    (lambda run: (run / "captures" / "wan_a.pcap").write_bytes(
        struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 105)), "link type 105"),
    (lambda run: (run / "p.csv").write_text("t_s,rate_bps\n0,1000\n"), "sets no delay_ms"),
    (lambda run: (run / "p.csv").write_text("t_s,delay_ms\n0,-1\n"), "delay_ms -1.0 outside"),
    (lambda run: (run / "result.json").write_text("{}"), "no schedule_clock_wall_s"),
    (lambda run: (run / "config.json").write_text('{"link": {"a_to_b": {}}}'), "has no profile"),
])
def test_bad_delay_runs_are_one_line(tmp_path, change, message):
    run = echo_run(tmp_path)
    change(run)
    with pytest.raises(SatbedError) as err:
        leo_fidelity.delay_fidelity(run)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("change, message", [
    (lambda run: (run / "emulator" / "emulator_timeseries.csv").unlink(), "no emulator/emulator_timeseries.csv"),
    (lambda run: (run / "emulator" / "emulator_timeseries.csv").write_text("t_s,direction\n1,b_to_a\n"),
     "line 2: not a time-series row"),
    (lambda run: (run / "p.csv").write_text("t_s,delay_ms\n0,4\n"), "sets no rate_bps"),
])
def test_bad_rate_runs_are_one_line(tmp_path, change, message):
    run = paced_run(tmp_path)
    change(run)
    with pytest.raises(SatbedError) as err:
        leo_fidelity.rate_fidelity(run)
    assert message in str(err.value) and "\n" not in str(err.value)


@settings(max_examples=80, deadline=None)
@given(st.binary(max_size=400))
def test_any_capture_is_read_or_refused_in_one_line(tmp_path_factory, tail):
    path = tmp_path_factory.mktemp("cap") / "x.pcap"
    path.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1) + tail)
    try:
        frames = leo_fidelity.read_frames(str(path))
    except SatbedError as e:
        assert "\n" not in str(e)
    else:
        assert all(f.wire >= 0 and len(f.key) >= 28 for f in frames)
