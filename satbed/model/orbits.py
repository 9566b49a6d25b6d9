"""LEO link schedules from orbit geometry: a user terminal and a gateway on
the ground, a constellation (TLE sets or a Walker pattern) propagated with
SGP4, and a bent pipe through one serving satellite, chosen by a named
policy at reconfiguration instants. The result is a link profile satemu
takes (t_s, delay_ms, up) plus the handover instants and the times the link
is down, each with its reason.

Frames: SGP4 gives TEME positions; they are turned into Earth-fixed ones by
the Greenwich mean sidereal time alone (no polar motion, ~10 m; UT1 taken
as UTC, |UT1-UTC| < 0.9 s: the Earth turns under 0.5 km in that time, under
2 us of delay). The ends are WGS84
geodetic points. Delay is the straight-line path at c, the same both ways."""

from __future__ import annotations

import heapq
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from sgp4.api import WGS72, Satrec
from sgp4.propagation import gstime

from satbed.core.errors import SatbedError

C_KM_S = 299_792.458
WGS84_A_KM = 6378.137
WGS84_F = 1 / 298.257223563
# SGP4's own constants (WGS72): a Walker orbit's mean motion comes from them.
WGS72_RE_KM = 6378.135
WGS72_MU_KM3_S2 = 398600.8
JD_SGP4_EPOCH = 2433281.5       # sgp4init counts its epoch in days from 1949 December 31 00:00 UT
JD_UNIX_EPOCH = 2440587.5

MAX_SATELLITES = 20_000         # pure-Python SGP4: about 20 us a propagation
MAX_DURATION_S = 86_400.0
MAX_SAMPLE_HZ = 1000.0
MAX_SAMPLES = 150_000           # the profile stays under linkprofile.MAX_BYTES
STALE_TLE_DAYS = 14             # SGP4's error grows by kilometres a day away from a set's epoch
POLICIES = ("highest-elevation", "shortest-delay")


def number(v: object, where: str, lo: float, hi: float, lo_open: bool = False, hi_open: bool = False) -> float:
    """A finite real number in its range, or one SatbedError line naming the value."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise SatbedError(f"{where}: a number, got {v!r}")
    if (v <= lo if lo_open else v < lo) or (v >= hi if hi_open else v > hi):
        raise SatbedError(f"{where}: {v!r} outside {'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}")
    return float(v)


def whole(v: object, where: str, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise SatbedError(f"{where}: a whole number, got {v!r}")
    if not lo <= v <= hi:
        raise SatbedError(f"{where}: {v} outside [{lo}, {hi}]")
    return v


# --- geometry -------------------------------------------------------------------------------------

Vec = tuple[float, float, float]


def geodetic_ecef(lat_deg: float, lon_deg: float, alt_km: float) -> Vec:
    """A WGS84 geodetic point's Earth-fixed position in km."""
    lat, lon = math.radians(lat_deg), math.radians(lon_deg)
    e2 = WGS84_F * (2 - WGS84_F)
    n = WGS84_A_KM / math.sqrt(1 - e2 * math.sin(lat) ** 2)
    return ((n + alt_km) * math.cos(lat) * math.cos(lon), (n + alt_km) * math.cos(lat) * math.sin(lon),
            (n * (1 - e2) + alt_km) * math.sin(lat))


def up_vector(lat_deg: float, lon_deg: float) -> Vec:
    """The ellipsoid's outward normal at a point: the zenith elevation counts from."""
    lat, lon = math.radians(lat_deg), math.radians(lon_deg)
    return (math.cos(lat) * math.cos(lon), math.cos(lat) * math.sin(lon), math.sin(lat))


def distance_km(a: Vec, b: Vec) -> float:
    return math.sqrt((a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2 + (a[2] - b[2]) ** 2)


def elevation_deg(site: Vec, up: Vec, sat: Vec) -> float:
    """The satellite's elevation above the site's horizon plane."""
    d = (sat[0] - site[0], sat[1] - site[1], sat[2] - site[2])
    along = d[0] * up[0] + d[1] * up[1] + d[2] * up[2]
    across = math.sqrt(sum((d[i] - along * up[i]) ** 2 for i in range(3)))
    # atan2 rather than asin: asin loses half its digits near the zenith.
    return math.degrees(math.atan2(along, across)) if along or across else 90.0


def bent_pipe_delay_ms(terminal: Vec, sat: Vec, gateway: Vec) -> float:
    """One-way delay terminal -> satellite -> gateway (the same the other way)."""
    return (distance_km(terminal, sat) + distance_km(sat, gateway)) / C_KM_S * 1000


def teme_to_ecef(r: Vec, jd: float, fr: float) -> Vec:
    """TEME to Earth-fixed: a rotation about z by the Greenwich mean sidereal time."""
    theta = gstime(jd + fr)
    c, s = math.cos(theta), math.sin(theta)
    return (c * r[0] + s * r[1], -s * r[0] + c * r[1], r[2])


def julian(when: datetime) -> tuple[float, float]:
    """A UTC moment as SGP4's split Julian date (whole days, fraction)."""
    days = when.timestamp() / 86400 + JD_UNIX_EPOCH
    whole_days = math.floor(days - 0.5) + 0.5
    return whole_days, days - whole_days


def utc(v: object, where: str) -> datetime:
    """A UTC moment from ISO 8601 text or a YAML timestamp; no zone means UTC."""
    if isinstance(v, datetime):
        when = v
    elif isinstance(v, str):
        try:
            when = datetime.fromisoformat(v.strip())
        except ValueError:
            raise SatbedError(f"{where}: {v!r} is not an ISO 8601 time such as 2025-01-01T00:00:00Z") from None
    else:
        raise SatbedError(f"{where}: an ISO 8601 time such as 2025-01-01T00:00:00Z, got {v!r}")
    when = when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)
    if not 1957 <= when.year <= 2100:
        raise SatbedError(f"{where}: {when.isoformat()} is outside the years 1957..2100")
    return when


# --- the ends ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Site:
    """A ground end of the bent pipe (an aircraft's terminal may fly: alt_m up to 50 km)."""
    name: str
    lat_deg: float
    lon_deg: float
    alt_m: float = 0.0

    @classmethod
    def from_doc(cls, doc: object, name: str) -> Site:
        if not isinstance(doc, dict):
            raise SatbedError(f"{name}: a mapping {{lat: DEG, lon: DEG, alt_m: M}}, got {doc!r}")
        bad = sorted(set(map(str, doc)) - {"lat", "lon", "alt_m"})
        if bad:
            raise SatbedError(f"{name}: unknown key {bad[0]!r} (known: lat, lon, alt_m)")
        for k in ("lat", "lon"):
            if k not in doc:
                raise SatbedError(f"{name}: {k} missing")
        return cls(name, number(doc["lat"], f"{name}.lat", -90, 90), number(doc["lon"], f"{name}.lon", -180, 180),
                   number(doc.get("alt_m", 0.0), f"{name}.alt_m", -1000, 50_000))

    @classmethod
    def parse(cls, text: str, name: str) -> Site:
        """LAT,LON[,ALT_M] as typed on the command line."""
        parts = text.split(",")
        try:
            vals = [float(p) for p in parts if p.strip().isascii()]
        except ValueError:
            vals = []
        if len(vals) != len(parts) or len(vals) not in (2, 3):
            raise SatbedError(f"--{name} {text!r}: give LAT,LON[,ALT_M] in degrees and metres, e.g. 51.5,-0.1")
        return cls.from_doc(dict(zip(("lat", "lon", "alt_m"), vals)), f"--{name}")

    def ecef(self) -> Vec:
        return geodetic_ecef(self.lat_deg, self.lon_deg, self.alt_m / 1000)

    def up(self) -> Vec:
        return up_vector(self.lat_deg, self.lon_deg)


# --- constellations ---------------------------------------------------------------------------------

@dataclass
class Satellite:
    name: str
    rec: Satrec

    def ecef(self, jd: float, fr: float) -> Vec | None:
        """Earth-fixed position at a split Julian date; None where SGP4 fails (a decayed orbit)."""
        e, r, _ = self.rec.sgp4(jd, fr)
        if e != 0 or not all(math.isfinite(x) for x in r):
            return None
        return teme_to_ecef(r, jd, fr)

    def epoch(self) -> datetime:
        days = self.rec.jdsatepoch + self.rec.jdsatepochF - JD_UNIX_EPOCH
        return datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(days=days)


WALKER_KEYS = ("inclination_deg", "total", "planes", "phasing", "altitude_km", "pattern", "raan0_deg")
_WALKER = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*:\s*(\d{1,6})\s*/\s*(\d{1,6})\s*/\s*(\d{1,6})\s*$")


@dataclass(frozen=True)
class Walker:
    """Walker's i:T/P/F: T satellites in P equally spaced circular planes
    at inclination i, plane k's first satellite F*360/T degrees ahead of
    plane k-1's. delta spreads the planes' ascending nodes over 360 degrees,
    star over 180 (polar constellations). altitude_km is the mean orbit's
    height above SGP4's equatorial radius."""
    inclination_deg: float
    total: int
    planes: int
    phasing: int
    altitude_km: float
    pattern: str = "delta"
    raan0_deg: float = 0.0

    def __post_init__(self) -> None:
        where = "walker"
        number(self.inclination_deg, f"{where}.inclination_deg", 0, 180)
        whole(self.total, f"{where}.total", 1, MAX_SATELLITES)
        whole(self.planes, f"{where}.planes", 1, self.total)
        if self.total % self.planes:
            raise SatbedError(f"{where}: {self.total} satellites do not split evenly into {self.planes} planes")
        whole(self.phasing, f"{where}.phasing", 0, self.planes - 1)
        number(self.altitude_km, f"{where}.altitude_km", 150, 40_000)
        if self.pattern not in ("delta", "star"):
            raise SatbedError(f"{where}.pattern: delta or star, got {self.pattern!r}")
        number(self.raan0_deg, f"{where}.raan0_deg", 0, 360, hi_open=True)

    @classmethod
    def from_doc(cls, doc: object) -> Walker:
        if not isinstance(doc, dict):
            raise SatbedError(f"walker: a mapping of {', '.join(WALKER_KEYS)}, got {doc!r}")
        bad = sorted(set(map(str, doc)) - set(WALKER_KEYS))
        if bad:
            raise SatbedError(f"walker: unknown key {bad[0]!r} (known: {', '.join(WALKER_KEYS)})")
        missing = [k for k in WALKER_KEYS[:5] if k not in doc]
        if missing:
            raise SatbedError(f"walker: {missing[0]} missing")
        return cls(**doc)

    @classmethod
    def parse(cls, text: str, altitude_km: float, pattern: str = "delta") -> Walker:
        """I:T/P/F as Walker wrote it, e.g. 53:1584/72/17."""
        m = _WALKER.match(text)
        if not m:
            raise SatbedError(f"--walker {text!r}: give INCLINATION:TOTAL/PLANES/PHASING, e.g. 53:1584/72/17")
        try:
            return cls(float(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)), altitude_km, pattern)
        except SatbedError as e:
            raise SatbedError(f"--walker {text!r}: {e}") from None

    def satellites(self, epoch: datetime) -> list[Satellite]:
        """The pattern's satellites as SGP4 mean elements at epoch (circular, no drag)."""
        per_plane = self.total // self.planes
        spread = 360.0 if self.pattern == "delta" else 180.0
        a = WGS72_RE_KM + self.altitude_km
        n_rad_min = math.sqrt(WGS72_MU_KM3_S2 / a ** 3) * 60
        jd, fr = julian(epoch)
        out = []
        for k in range(self.planes):
            raan = math.radians((self.raan0_deg + k * spread / self.planes) % 360)
            for j in range(per_plane):
                m = math.radians((j * 360 / per_plane + k * self.phasing * 360 / self.total) % 360)
                rec = Satrec()
                rec.sgp4init(WGS72, "i", len(out) + 1, jd - JD_SGP4_EPOCH + fr, 0.0, 0.0, 0.0, 0.0, 0.0,
                             math.radians(self.inclination_deg), m, n_rad_min, raan)
                out.append(Satellite(f"P{k}S{j}", rec))
        return out


def _tle_checksum(line: str) -> int:
    return sum(int(c) if c.isdigit() else 1 if c == "-" else 0 for c in line[:68]) % 10


def parse_tle(text: str, where: str) -> list[Satellite]:
    """Three-line sets (a name, then lines 1 and 2); a set without its name
    line is taken too. Every set is checked (length, checksums, one
    satellite number, SGP4's own initialisation) before any is used."""
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    sats: list[Satellite] = []
    seen: dict[str, int] = {}
    i = 0
    while i < len(lines):
        n = len(sats) + 1
        if lines[i].startswith("1 ") and i + 1 < len(lines) and lines[i + 1].startswith("2 "):
            name, l1, l2 = None, lines[i], lines[i + 1]
            i += 2
        else:
            if i + 2 >= len(lines) or not lines[i + 1].startswith("1 ") or not lines[i + 2].startswith("2 "):
                raise SatbedError(f"{where}: set {n} ({lines[i][:40]!r}): a name line, then lines starting "
                                  f"'1 ' and '2 '")
            name, l1, l2 = lines[i].strip(), lines[i + 1], lines[i + 2]
            name = name[2:].strip() if name.startswith("0 ") else name
            i += 3
        for number_, line in ((1, l1), (2, l2)):
            if len(line) != 69 or not line.isascii():
                raise SatbedError(f"{where}: set {n}: line {number_} has {len(line)} characters, a TLE line 69")
            if not line[68].isdigit() or int(line[68]) != _tle_checksum(line):
                raise SatbedError(f"{where}: set {n}: line {number_} fails its checksum")
        if l1[2:7] != l2[2:7]:
            raise SatbedError(f"{where}: set {n}: lines 1 and 2 name satellites {l1[2:7]!r} and {l2[2:7]!r}")
        satnum = l1[2:7].strip()
        if satnum in seen:
            raise SatbedError(f"{where}: set {n}: satellite {satnum} given twice (first in set {seen[satnum]})")
        seen[satnum] = n
        try:
            rec = Satrec.twoline2rv(l1, l2)
        except (ValueError, IndexError, ZeroDivisionError):
            raise SatbedError(f"{where}: set {n}: not a valid TLE (SGP4 cannot read it)") from None
        if rec.error != 0:
            raise SatbedError(f"{where}: set {n}: SGP4 refuses its elements (error {rec.error})")
        sats.append(Satellite(name or satnum, rec))
        if len(sats) > MAX_SATELLITES:
            raise SatbedError(f"{where}: more than {MAX_SATELLITES} sets")
    if not sats:
        raise SatbedError(f"{where}: no TLE sets")
    return sats


# --- selection and the schedule ---------------------------------------------------------------------

@dataclass(frozen=True)
class Policy:
    """Which satellite serves, and when it may change: only at reconfiguration
    instants, every interval_s, aligned to whole multiples of it in UTC plus
    offset_s (15 s: 0, 15, 30 and 45 s past each minute). A handover
    interrupts the link for handover_outage_s."""
    name: str = "highest-elevation"
    min_elevation_deg: float = 25.0
    interval_s: float = 15.0
    offset_s: float = 0.0
    handover_outage_s: float = 0.0

    def __post_init__(self) -> None:
        if self.name not in POLICIES:
            raise SatbedError(f"policy {self.name!r}: known policies are {', '.join(POLICIES)}")
        number(self.min_elevation_deg, "min_elevation_deg", 0, 90, hi_open=True)
        number(self.interval_s, "interval_s", 0, 3600, lo_open=True)
        number(self.offset_s, "offset_s", 0, self.interval_s, hi_open=True)
        number(self.handover_outage_s, "handover_outage_s", 0, self.interval_s, hi_open=True)

    def instants(self, start: datetime, duration_s: float) -> list[float]:
        """Reconfiguration instants in [0, duration_s], seconds from start; 0
        (the first choice) always among them."""
        first = (self.offset_s - start.timestamp()) % self.interval_s
        out = [0.0]
        k = 0
        while first + k * self.interval_s <= duration_s:
            t = round(first + k * self.interval_s, 6)
            if t > 0:
                out.append(t)
            k += 1
        return out


@dataclass(frozen=True)
class Handover:
    t_s: float
    from_sat: str
    to_sat: str


@dataclass(frozen=True)
class Down:
    start_s: float
    end_s: float        # up again from end_s on; the schedule's end when it never comes back
    reason: str


@dataclass
class Schedule:
    points: list[dict]
    handovers: list[Handover]
    down: list[Down]
    instants: list[float]
    notes: list[str] = field(default_factory=list)


def _choose(sats: list[Satellite], ends: tuple, jd: float, fr: float, policy: Policy) -> Satellite | None:
    (t, t_up), (g, g_up) = ends
    best, best_key = None, None
    for s in sats:
        p = s.ecef(jd, fr)
        if p is None:
            continue
        el_t = elevation_deg(t, t_up, p)
        if el_t < policy.min_elevation_deg or elevation_deg(g, g_up, p) < policy.min_elevation_deg:
            continue
        key = -el_t if policy.name == "highest-elevation" else bent_pipe_delay_ms(t, p, g)
        if best_key is None or key < best_key:
            best, best_key = s, key
    return best


def schedule(sats: list[Satellite], terminal: Site, gateway: Site, start: datetime, duration_s: float,
             sample_hz: float, policy: Policy) -> Schedule:
    """The bent pipe's profile from start for duration_s, one point per
    sample plus one at each reconfiguration instant and handover outage end."""
    number(duration_s, "duration_s", 0, MAX_DURATION_S, lo_open=True)
    number(sample_hz, "sample_hz", 0, MAX_SAMPLE_HZ, lo_open=True)
    if duration_s * sample_hz > MAX_SAMPLES:
        raise SatbedError(f"{duration_s:g} s at {sample_hz:g} Hz is more than {MAX_SAMPLES} samples: "
                          "shorten the duration or lower the sample rate")
    if not sats:
        raise SatbedError("no satellites")
    ends = ((terminal.ecef(), terminal.up()), (gateway.ecef(), gateway.up()))
    (t_pos, t_up), (g_pos, g_up) = ends
    jd0, fr0 = julian(start)
    instants = policy.instants(start, duration_s)
    # Samples, reconfiguration instants, and (pushed as handovers happen) the ends of handover
    # outages: a heap, which a sorted list already is.
    queue = sorted({round(k / sample_hz, 6) for k in range(int(duration_s * sample_hz + 1e-9) + 1)} | set(instants))
    instant_set = set(instants)
    serving: Satellite | None = None
    outage_until = -1.0
    handovers: list[Handover] = []
    states: list[tuple[float, float | None, str | None]] = []   # (t, delay_ms, reason if down)
    while queue:
        t = heapq.heappop(queue)
        if states and states[-1][0] == t:
            continue
        fr = fr0 + t / 86400
        if t in instant_set:
            chosen = _choose(sats, ends, jd0, fr, policy)
            if serving is not None and chosen is not None and chosen is not serving:
                handovers.append(Handover(t, serving.name, chosen.name))
                if policy.handover_outage_s > 0:
                    outage_until = round(t + policy.handover_outage_s, 6)
                    heapq.heappush(queue, outage_until)
            serving = chosen
        if serving is None:
            states.append((t, None, f"no satellite {policy.min_elevation_deg:g} deg or more above both ends"))
            continue
        p = serving.ecef(jd0, fr)
        if p is None:
            states.append((t, None, f"SGP4 cannot propagate {serving.name}"))
            continue
        if min(elevation_deg(t_pos, t_up, p), elevation_deg(g_pos, g_up, p)) < policy.min_elevation_deg:
            states.append((t, None, f"{serving.name} set below {policy.min_elevation_deg:g} deg before the next "
                                    "reconfiguration"))
            continue
        delay = bent_pipe_delay_ms(t_pos, p, g_pos)
        states.append((t, delay, f"handover to {serving.name}" if t < outage_until else None))
    points, down = _points(states, duration_s)
    out = Schedule(points, handovers, down, instants)
    stale = max(abs((start - s.epoch()).total_seconds()) / 86400 for s in sats)
    if stale > STALE_TLE_DAYS:
        out.notes.append(f"element sets up to {stale:.0f} days from the start: SGP4's positions drift by "
                         "kilometres a day away from a set's epoch")
    return out


def _points(states: list[tuple[float, float | None, str | None]], end_s: float) -> tuple[list, list]:
    """Profile points (the delay wherever a satellite serves, up where it
    changes, and on the first point when the link is ever down) and the down
    intervals with their reasons."""
    any_down = any(r is not None for _, _, r in states)
    points: list[dict] = []
    down: list[Down] = []
    open_: tuple[float, str] | None = None
    for i, (t, delay, reason) in enumerate(states):
        pt: dict = {"t_s": t}
        if delay is not None:
            pt["delay_ms"] = delay
        if (i == 0 and any_down) or (reason is None) != (open_ is None):
            pt["up"] = reason is None
        if reason != (open_[1] if open_ else None):
            if open_:
                down.append(Down(open_[0], t, open_[1]))
            open_ = (t, reason) if reason else None
        points.append(pt)
    if open_:
        down.append(Down(open_[0], end_s, open_[1]))
    return points, down
