"""LEO schedules from orbit geometry (satbed/model/orbits.py, leo.py):
geometry against cases computed by hand, SGP4 against the sgp4 package's
documented ISS position, Walker patterns against their definition, and
properties of every schedule (times never decrease, handovers only at
reconfiguration instants, delay at least the satellites' altitude there and
back, every profile one satemu takes). No network, no root."""

from __future__ import annotations

import math
import os
import tempfile
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import satbed_testlib  # noqa: F401  (puts the repository on sys.path)
from satbed.core.errors import SatbedError
from satbed.model import leo, linkprofile, orbits

C = orbits.C_KM_S
START = datetime(2025, 1, 1, tzinfo=timezone.utc)
PROPS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# SGP4's short-period J2 terms carry a circular orbit's radius up to 7.5 km
# below the altitude its mean motion stands for (measured for inclinations
# 0..180 deg, altitudes 300..1200 km; test_walker_altitude checks it).
SGP4_SWING_KM = 8.0

# The sgp4 package's documentation (sgp4/__init__.py, "Usage"): the ISS at
# jd 2458827 + 0.362605 is at TEME (-6102.44, -986.33, -2820.31) km.
ISS = """ISS (ZARYA)
1 25544U 98067A   19343.69339541  .00001764  00000-0  38792-4 0  9991
2 25544  51.6439 211.2001 0007417  17.6667  85.6398 15.50103472202482
"""


def test_geodetic_points():
    assert orbits.geodetic_ecef(0, 0, 0) == pytest.approx((6378.137, 0, 0), abs=1e-9)
    assert orbits.geodetic_ecef(90, 0, 0) == pytest.approx((0, 0, 6356.752314245), abs=1e-6)
    assert orbits.geodetic_ecef(0, 90, 1) == pytest.approx((0, 6379.137, 0), abs=1e-9)


@pytest.mark.parametrize("lat, lon", [(0, 0), (45, 30), (-33.9, 151.2), (89, -170)])
@pytest.mark.parametrize("h", [340.0, 550.0, 1200.0])
def test_overhead_satellite(lat, lon, h):
    """A satellite straight above a terminal and its gateway at the same
    point: elevation 90 deg, one way 2h/c (up and down the bent pipe)."""
    ground = orbits.Site("t", lat, lon)
    sat = orbits.geodetic_ecef(lat, lon, h)
    assert orbits.elevation_deg(ground.ecef(), ground.up(), sat) == pytest.approx(90, abs=1e-6)
    assert orbits.bent_pipe_delay_ms(ground.ecef(), sat, ground.ecef()) == pytest.approx(2 * h / C * 1000, rel=1e-12)


def test_bent_pipe_by_hand():
    """A satellite h above (0, 0), a gateway on the equator at longitude L:
    the downlink is the side of a triangle of sides a + h and a, angle L."""
    a, h, lon = orbits.WGS84_A_KM, 550.0, 3.0
    sat, terminal = orbits.geodetic_ecef(0, 0, h), orbits.geodetic_ecef(0, 0, 0)
    gateway = orbits.geodetic_ecef(0, lon, 0)
    down = math.sqrt((a + h) ** 2 + a ** 2 - 2 * a * (a + h) * math.cos(math.radians(lon)))
    assert orbits.bent_pipe_delay_ms(terminal, sat, gateway) == pytest.approx((h + down) / C * 1000, rel=1e-12)


def test_elevation_by_hand():
    """On the equator at longitude 0 the horizon is the plane x = a: a point
    1000 km east is on it (0 deg), 1000 km east and 1000 km up is at 45 deg."""
    site, up = orbits.geodetic_ecef(0, 0, 0), orbits.up_vector(0, 0)
    assert orbits.elevation_deg(site, up, (site[0], 1000, 0)) == pytest.approx(0, abs=1e-9)
    assert orbits.elevation_deg(site, up, (site[0] + 1000, 1000, 0)) == pytest.approx(45, abs=1e-9)
    assert orbits.elevation_deg(site, up, (site[0] - 10, 1000, 0)) < 0


def test_iss_position():
    (iss,) = orbits.parse_tle(ISS, "iss.tle")
    assert iss.name == "ISS (ZARYA)"
    e, r, _ = iss.rec.sgp4(2458827, 0.362605)
    assert e == 0 and r == pytest.approx((-6102.44, -986.33, -2820.31), abs=0.01)
    # The Earth-fixed position is the TEME one turned about the pole.
    p = iss.ecef(2458827, 0.362605)
    assert math.dist(p, (0, 0, 0)) == pytest.approx(math.dist(r, (0, 0, 0)), rel=1e-12) and p[2] == r[2]
    assert abs(iss.epoch() - datetime(2019, 12, 9, 16, 38, 29, 363423, tzinfo=timezone.utc)) < timedelta(
        milliseconds=1)


def test_julian_split():
    jd, fr = orbits.julian(datetime(2019, 12, 9, 12, tzinfo=timezone.utc))
    assert jd == 2458826.5 and fr == pytest.approx(0.5, abs=1e-12)


@pytest.mark.parametrize("pattern, spread", [("delta", 360), ("star", 180)])
def test_walker_pattern(pattern, spread):
    """53:24/6/2: six planes of four, nodes spread over 360 deg (delta) or 180
    (star), each plane's first satellite 2*360/24 = 30 deg ahead of the last's."""
    sats = orbits.Walker(53, 24, 6, 2, 550, pattern).satellites(START)
    assert len(sats) == 24
    for k in range(6):
        plane = sats[4 * k:4 * k + 4]
        for j, s in enumerate(plane):
            assert math.degrees(s.rec.nodeo) == pytest.approx(k * spread / 6, abs=1e-9)
            assert math.degrees(s.rec.mo) == pytest.approx((j * 90 + k * 30) % 360, abs=1e-9)
            assert math.degrees(s.rec.inclo) == pytest.approx(53)
    assert abs(sats[0].epoch() - START) < timedelta(milliseconds=1)


@pytest.mark.parametrize("inclination", [0, 53, 90, 140])
def test_walker_altitude(inclination):
    (sat,) = orbits.Walker(inclination, 1, 1, 0, 550).satellites(START)
    jd, fr = orbits.julian(START)
    alts = [math.dist(sat.rec.sgp4(jd, fr + k / 1440)[1], (0, 0, 0)) - orbits.WGS72_RE_KM for k in range(200)]
    assert 550 - SGP4_SWING_KM < min(alts) and max(alts) < 550 + SGP4_SWING_KM


@pytest.mark.parametrize("doc, message", [
    ({"inclination_deg": 53, "total": 1584, "planes": 70, "phasing": 1, "altitude_km": 550}, "split evenly"),
    ({"inclination_deg": 53, "total": 24, "planes": 6, "phasing": 6, "altitude_km": 550}, "phasing"),
    ({"inclination_deg": 200, "total": 24, "planes": 6, "phasing": 1, "altitude_km": 550}, "inclination"),
    ({"inclination_deg": 53, "total": True, "planes": 6, "phasing": 1, "altitude_km": 550}, "total"),
    ({"inclination_deg": 53, "total": 24, "planes": 6, "phasing": 1, "altitude_km": 50}, "altitude"),
    ({"inclination_deg": 53, "total": 24, "planes": 6, "phasing": 1}, "altitude_km missing"),
    ({"inclination_deg": 53, "total": 24, "planes": 6, "phasing": 1, "altitude_km": 550, "pattern": "ring"}, "pattern"),
    ({"inclination_deg": 53, "total": 24, "planes": 6, "phasing": 1, "altitude_km": 550, "shells": 2}, "unknown key"),
])
def test_walker_refused(doc, message):
    with pytest.raises(SatbedError, match=message):
        orbits.Walker.from_doc(doc)


walker_values = st.one_of(st.none(), st.booleans(), st.integers(-5, 3000), st.floats(allow_nan=True),
                          st.text(max_size=6), st.lists(st.integers(), max_size=2))


@FUZZ
@given(st.dictionaries(st.sampled_from([*orbits.WALKER_KEYS, "x", 1]), walker_values, max_size=8))
def test_walker_validator_never_tracebacks(doc):
    try:
        w = orbits.Walker.from_doc(doc)
    except SatbedError as e:
        assert "\n" not in str(e)
        return
    assert w.total % w.planes == 0 and 0 <= w.phasing < w.planes


@FUZZ
@given(st.text(max_size=40), st.floats(allow_nan=True), st.text(max_size=8))
def test_walker_text_never_tracebacks(text, altitude, pattern):
    try:
        orbits.Walker.parse(text, altitude, pattern)
    except SatbedError:
        pass


@FUZZ
@given(st.text(max_size=400) | st.builds(lambda cut, junk: ISS[:cut] + junk + ISS[cut:],
                                         st.integers(0, len(ISS)), st.text(max_size=3)))
def test_tle_parser_never_tracebacks(text):
    try:
        sats = orbits.parse_tle(text, "x.tle")
    except SatbedError as e:
        assert "\n" not in str(e)
        return
    assert sats and all(s.rec.error == 0 for s in sats)


@pytest.mark.parametrize("text, message", [
    (ISS.replace("9991", "9992"), "checksum"),
    (ISS.replace("2 25544", "2 25545").replace("2482\n", "2483\n"), "name satellites"),
    (ISS + ISS, "given twice"),
    ("ISS\n1 25544U\n", "a name line"),
    ("", "no TLE sets"),
])
def test_tle_refused(text, message):
    with pytest.raises(SatbedError, match=message):
        orbits.parse_tle(text, "x.tle")


def test_reconfiguration_instants():
    """15 s from 00:00:07 UTC: 8 s in (00:00:15), then every 15 s; an offset moves them."""
    policy = orbits.Policy()
    assert policy.instants(START + timedelta(seconds=7), 40) == [0.0, 8.0, 23.0, 38.0]
    assert orbits.Policy(offset_s=12).instants(START + timedelta(seconds=7), 40) == [0.0, 5.0, 20.0, 35.0]
    assert policy.instants(START, 30) == [0.0, 15.0, 30.0]


def _check_profile(points: list[dict]) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "p.csv")
        with open(path, "w") as f:
            f.write(linkprofile.render(points, "test"))
        linkprofile.check(path)


# Tenths of a degree: integers draw fewer bytes than floats (hypothesis's data_too_large check).
sites = st.builds(lambda lat, lon: orbits.Site("s", lat / 10, lon / 10), st.integers(-600, 600),
                  st.integers(-1800, 1800))


@PROPS
@given(inclination=st.sampled_from([53.0, 70.0, 97.6]), planes=st.integers(6, 18), per_plane=st.integers(8, 16),
       altitude=st.integers(340, 1200), terminal=sites, dlat=st.integers(-30, 30), dlon=st.integers(-30, 30),
       start_s=st.integers(0, 86400), hz=st.sampled_from([1.0, 10.0, 20.0]),
       outage_ms=st.sampled_from([0.0, 30.0]), policy=st.sampled_from(orbits.POLICIES),
       offset=st.sampled_from([0.0, 12.0]))
def test_schedule_invariants(inclination, planes, per_plane, altitude, terminal, dlat, dlon, start_s, hz, outage_ms,
                             policy, offset):
    gateway = orbits.Site("g", max(-90.0, min(90.0, terminal.lat_deg + dlat / 10)),
                          (terminal.lon_deg + dlon / 10 + 180) % 360 - 180)
    start = START + timedelta(seconds=start_s, milliseconds=start_s % 1000)
    pol = orbits.Policy(policy, 25.0, 15.0, offset, outage_ms / 1000)
    sats = orbits.Walker(inclination, planes * per_plane, planes, planes // 2, altitude).satellites(start)
    s = orbits.schedule(sats, terminal, gateway, start, 40.0, hz, pol)
    times = [p["t_s"] for p in s.points]
    assert times == sorted(times) and times[0] == 0
    assert len(times) >= 40 * hz
    for p in s.points:
        if "delay_ms" in p:
            assert p["delay_ms"] >= 2 * (altitude - SGP4_SWING_KM) / C * 1000
    for h in s.handovers:
        assert h.t_s in s.instants and h.t_s > 0
        since = (start.timestamp() + h.t_s - offset) % 15
        assert min(since, 15 - since) < 1e-5
    if outage_ms:
        # A point says "up" only where the state changes: carry it forward. The
        # link may already be down when the handover comes (the old satellite
        # set below the minimum elevation before the reconfiguration).
        up, state = True, {}
        for p in s.points:
            up = p.get("up", up)
            state[p["t_s"]] = up
        for h in s.handovers:
            assert state[h.t_s] is False and state[round(h.t_s + outage_ms / 1000, 6)] is True, h
    _check_profile(s.points)


def test_starlink_shell_over_england():
    """Two minutes of Starlink's first shell between London and a gateway
    100 km away, with a 20 ms outage at each handover: handovers happen,
    all at 15 s instants, each with its outage; the link is otherwise up."""
    sats = orbits.Walker(53, 1584, 72, 17, 550).satellites(START)
    s = orbits.schedule(sats, orbits.Site("t", 51.5, -0.1), orbits.Site("g", 51.0, -1.5), START, 120, 10,
                        orbits.Policy(handover_outage_s=0.02))
    assert s.handovers and all(h.t_s in (15, 30, 45, 60, 75, 90, 105, 120) for h in s.handovers)
    assert [(d.start_s, d.end_s) for d in s.down] == [(h.t_s, round(h.t_s + 0.02, 6)) for h in s.handovers]
    assert s.points[0]["up"] is True and all(p["delay_ms"] >= 2 * (550 - SGP4_SWING_KM) / C * 1000 for p in s.points)
    by_time = {p["t_s"]: p for p in s.points}
    for h in s.handovers:
        assert by_time[h.t_s]["up"] is False and by_time[round(h.t_s + 0.02, 6)]["up"] is True
    assert len(s.points) == 1201 + len(s.handovers)
    _check_profile(s.points)


def test_shortest_delay_is_no_longer():
    sats = orbits.Walker(53, 1584, 72, 17, 550).satellites(START)
    t, g = orbits.Site("t", 51.5, -0.1), orbits.Site("g", 51.0, -1.5)
    first = {name: orbits.schedule(sats, t, g, START, 1, 1, orbits.Policy(name)).points[0]["delay_ms"]
             for name in orbits.POLICIES}
    assert first["shortest-delay"] <= first["highest-elevation"]


def test_no_satellite_in_view():
    """Ends on opposite sides of the Earth share no satellite: down throughout, and the schedule says why."""
    sats = orbits.Walker(53, 120, 12, 1, 550).satellites(START)
    s = orbits.schedule(sats, orbits.Site("t", 10, 0), orbits.Site("g", -10, 180), START, 30, 10, orbits.Policy())
    assert s.points[0] == {"t_s": 0.0, "up": False} and all("delay_ms" not in p for p in s.points)
    assert [(d.start_s, d.end_s) for d in s.down] == [(0.0, 30.0)] and "no satellite" in s.down[0].reason
    assert not s.handovers
    _check_profile(s.points)


@pytest.mark.parametrize("kwargs, message", [
    ({"name": "nearest"}, "known policies"), ({"min_elevation_deg": 90}, "min_elevation"),
    ({"interval_s": 0}, "interval"), ({"offset_s": 15}, "offset"), ({"handover_outage_s": 20}, "handover_outage"),
])
def test_policy_refused(kwargs, message):
    with pytest.raises(SatbedError, match=message):
        orbits.Policy(**kwargs)


def test_too_many_samples():
    with pytest.raises(SatbedError, match="samples"):
        orbits.schedule(orbits.Walker(53, 1, 1, 0, 550).satellites(START), orbits.Site("t", 0, 0),
                        orbits.Site("g", 0, 0), START, 86400, 1000, orbits.Policy())


GOOD = {"constellation": {"walker": {"inclination_deg": 53, "total": 24, "planes": 6, "phasing": 1,
                                     "altitude_km": 550}},
        "terminal": {"lat": 51.5, "lon": -0.1}, "gateway": {"lat": 51, "lon": -1.5}}
leo_values = st.one_of(walker_values, st.just(GOOD["terminal"]), st.dictionaries(
    st.sampled_from(["lat", "lon", "alt_m", "name", "interval_s", "handover_outage_ms", "tle", "walker"]),
    walker_values, max_size=4))


@FUZZ
@given(st.dictionaries(st.sampled_from([*leo.TOP_KEYS, "x"]), leo_values, max_size=7), st.booleans())
def test_leo_file_never_tracebacks(doc, base):
    try:
        leo.from_doc({**GOOD, **doc} if base else doc)
    except SatbedError as e:
        assert "\n" not in str(e)


def test_leo_file_tle_beside_it(tmp_path):
    (tmp_path / "iss.tle").write_text(ISS)
    spec = leo.from_doc({**GOOD, "constellation": {"tle": "iss.tle"}, "duration_s": 5}, str(tmp_path))
    sats, start = leo.satellites(spec)
    assert [s.name for s in sats] == ["ISS (ZARYA)"] and start == datetime(2019, 12, 9, 16, 38, 29, tzinfo=timezone.utc)
    s = leo.schedule(spec)
    assert s.notes == [] and s.points[0]["t_s"] == 0


@pytest.mark.parametrize("change, message", [
    ({"policy": 5}, "policy: a mapping"), ({"policy": {"name": ["x"]}}, "policy.name"),
    ({"policy": {"handover_outage_ms": 15000}}, "handover_outage_s"), ({"policy": {"every": 1}}, "unknown key"),
    ({"constellation": {"walker": GOOD["constellation"]["walker"], "tle": "x"}}, "one of walker"),
    ({"constellation": {"tle": 5}}, "a file name"), ({"terminal": None}, "terminal missing"),
    ({"gateway": [1, 2]}, "gateway: a mapping"), ({"start": "noon"}, "ISO 8601"), ({"start": "1900-01-01"}, "1957"),
    ({"duration_s": 0}, "duration_s"), ({"sample_hz": 1000, "duration_s": 86400}, "samples"),
    ({"epoch": 1}, "unknown key"),
])
def test_leo_file_refused(change, message):
    with pytest.raises(SatbedError, match=message):
        leo.from_doc({**GOOD, **change})
