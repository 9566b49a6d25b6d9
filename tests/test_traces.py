"""Recorded traces as link profiles (satbed/model/traces.py): Mahimahi
delivery opportunities counted into rates by hand, measurement CSVs with
RTT halved, and whatever the file holds, points satemu takes or one error
line. No network, no root."""

from __future__ import annotations

import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import satbed_testlib  # noqa: F401  (puts the repository on sys.path)
from satbed.core.errors import SatbedError
from satbed.model import linkprofile, traces

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FRAME_BITS = 1514 * 8       # satemu charges a 1500-byte packet its Ethernet header too


def _file(text: str) -> str:
    fd, path = tempfile.mkstemp(suffix=".txt")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def _valid(points: list[dict]) -> None:
    path = _file(linkprofile.render(points))
    try:
        linkprofile.check(path)
    finally:
        os.unlink(path)


def test_mahimahi_rates_by_hand():
    """Opportunities at 0, 5, 10, 10 ms fill the first 100 ms window (4 packets
    in 0.1 s), none fall in the second (down), one at 250 ms in the third."""
    path = _file("0\n5\n10\n10\n250\n")
    try:
        points = traces.mahimahi(path)
    finally:
        os.unlink(path)
    assert points == [{"t_s": 0.0, "rate_bps": 4 * FRAME_BITS / 0.1, "up": True},
                      {"t_s": 0.1, "up": False},
                      {"t_s": 0.2, "rate_bps": FRAME_BITS / 0.1, "up": True}]
    _valid(points)


def test_mahimahi_window():
    path = _file("".join(f"{ms}\n" for ms in range(0, 1000)))       # one packet a millisecond: 12.112 Mbit/s
    try:
        points = traces.mahimahi(path, 250)
    finally:
        os.unlink(path)
    assert [p["t_s"] for p in points] == [0, 0.25, 0.5, 0.75]
    assert all(p["rate_bps"] == pytest.approx(1000 * FRAME_BITS) for p in points) and "up" not in points[0]


@pytest.mark.parametrize("text, window, message", [
    ("", 100, "empty trace"), ("5\n3\n", 100, "before the line above"), ("1.5\n", 100, "whole number"),
    ("-1\n", 100, "whole number"), ("0\n", 0.5, "window"), ("0\n99999999999\n", 100, "beyond"),
    ("0\n9000000\n", 1, "windows"),
])
def test_mahimahi_refused(text, window, message):
    path = _file(text)
    try:
        with pytest.raises(SatbedError, match=message):
            traces.mahimahi(path, window)
    finally:
        os.unlink(path)


def test_measurements_by_hand():
    """Unix times count from the first row; an RTT is halved; empty cells leave a value as it was."""
    path = _file("# a Starlink ping log\ntime_s,rtt_ms,rate_bps,loss\n"
                 "1700000000.0,40,,\n1700000000.5,,1e8,0.01\n1700000001,55.5,,\n")
    try:
        points = traces.measurements(path)
    finally:
        os.unlink(path)
    assert points == [{"t_s": 0.0, "delay_ms": 20.0}, {"t_s": 0.5, "rate_bps": 1e8, "loss": 0.01},
                      {"t_s": 1.0, "delay_ms": 27.75}]
    _valid(points)


@pytest.mark.parametrize("text, message", [
    ("t_s,rtt_ms,delay_ms\n0,1,1\n", "not both"), ("t_s,jitter_ms\n0,1\n", "unknown column"),
    ("rtt_ms\n1\n", "one time column"), ("t_s,time_ms,rtt_ms\n0,0,1\n", "one time column"),
    ("t_s\n0\n", "no value column"), ("t_s,rtt_ms\n1,10\n0,10\n", "before the first row"),
    ("t_s,rtt_ms\n0,10\n2,10\n1,10\n", "before the row above"), ("t_s,rtt_ms\n0,nan\n", "not a number"),
    ("t_s,loss\n0,1\n", "loss"), ("t_s,rate_bps\n0,0\n", "rate_bps"), ("t_s,delay_ms\n0,-1\n", "delay_ms"),
    ("t_s,rtt_ms\n0\n", "fields"), ("t_s,rtt_ms\n", "no rows"), ("", "no header"),
])
def test_measurements_refused(text, message):
    path = _file(text)
    try:
        with pytest.raises(SatbedError, match=message):
            traces.measurements(path)
    finally:
        os.unlink(path)


lines = st.one_of(st.integers(-5, 10**11).map(str), st.sampled_from(["", " ", "1e3", "x", "٣", "10\r"]))


@FUZZ
@given(st.lists(lines, max_size=30).map("\n".join) | st.lists(st.integers(0, 5000), max_size=60).map(
    lambda ms: "\n".join(map(str, sorted(ms)))), st.sampled_from([1, 10, 100, 1000.5]))
def test_mahimahi_never_tracebacks(text, window):
    path = _file(text)
    try:
        points = traces.mahimahi(path, window)
    except SatbedError as e:
        assert "\n" not in str(e)
        return
    finally:
        os.unlink(path)
    _valid(points)


cells = st.one_of(st.sampled_from(["", "0", "1", "0.5", "-1", "1e400", "nan", "inf", "x", "1700000000", "٣"]),
                  st.floats(allow_nan=True).map(str), st.integers(-10, 10**8).map(str))


@FUZZ
@given(st.lists(st.sampled_from([*traces.TIME_COLUMNS, *traces.VALUE_COLUMNS, "other"]), min_size=1, max_size=4),
       st.lists(st.lists(cells, min_size=1, max_size=5), max_size=8))
def test_measurements_never_traceback(header, rows):
    path = _file("\n".join(",".join(r) for r in [header, *rows]) + "\n")
    try:
        points = traces.measurements(path)
    except SatbedError as e:
        assert "\n" not in str(e)
        return
    finally:
        os.unlink(path)
    _valid(points)
