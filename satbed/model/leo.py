"""A LEO link file: the constellation, the two ends, the time span and the
satellite policy of one bent-pipe schedule (orbits.py computes it), checked
whole before anything is propagated.

    constellation:
      walker: {inclination_deg: 53, total: 1584, planes: 72, phasing: 17, altitude_km: 550, pattern: delta}
      # or  tle: starlink.tle        (three-line sets; relative to this file)
    terminal: {lat: 51.5, lon: -0.1, alt_m: 0}
    gateway: {lat: 51.0, lon: -1.5}
    start: 2025-01-01T00:00:00Z      # default: a Walker's 2025-01-01, the TLE file's newest epoch
    duration_s: 300
    sample_hz: 10
    policy: {name: highest-elevation, min_elevation_deg: 25, interval_s: 15, offset_s: 0, handover_outage_ms: 0}
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timezone

from satbed.core.errors import SatbedError
from satbed.core.files import read_regular
from satbed.model import orbits

TOP_KEYS = ("constellation", "terminal", "gateway", "start", "duration_s", "sample_hz", "policy")
POLICY_KEYS = ("name", "min_elevation_deg", "interval_s", "offset_s", "handover_outage_ms")
WALKER_START = datetime(2025, 1, 1, tzinfo=timezone.utc)
MAX_TLE_BYTES = 8 << 20


@dataclass(frozen=True)
class LeoSpec:
    terminal: orbits.Site
    gateway: orbits.Site
    walker: orbits.Walker | None = None
    tle: str | None = None              # a path, read when the schedule is made
    start: datetime | None = None
    duration_s: float = 300.0
    sample_hz: float = 10.0
    policy: orbits.Policy = field(default_factory=orbits.Policy)

    def describe(self) -> str:
        """One line naming what the profile was made from (its file's comment)."""
        w = self.walker
        src = (f"Walker {w.inclination_deg:g}:{w.total}/{w.planes}/{w.phasing} {w.pattern} at {w.altitude_km:g} km"
               if w else f"TLE {os.path.basename(self.tle or '')}")
        p = self.policy
        return (f"{src}; terminal {self.terminal.lat_deg:g},{self.terminal.lon_deg:g}; gateway "
                f"{self.gateway.lat_deg:g},{self.gateway.lon_deg:g}; {p.name} >= {p.min_elevation_deg:g} deg, "
                f"every {p.interval_s:g} s + {p.offset_s:g} s, handover outage {p.handover_outage_s * 1000:g} ms; "
                f"{self.sample_hz:g} Hz")


def from_doc(doc: object, base_dir: str = ".") -> LeoSpec:
    if not isinstance(doc, dict):
        raise SatbedError(f"a mapping of {', '.join(TOP_KEYS)}")
    bad = sorted(set(map(str, doc)) - set(TOP_KEYS))
    if bad:
        raise SatbedError(f"unknown key {bad[0]!r} (known: {', '.join(TOP_KEYS)})")
    for k in ("constellation", "terminal", "gateway"):
        if doc.get(k) is None:
            raise SatbedError(f"{k} missing")
    con = doc["constellation"]
    if not isinstance(con, dict) or len(con) != 1 or next(iter(con)) not in ("walker", "tle"):
        raise SatbedError(f"constellation: one of walker: {{...}} or tle: FILE, got {con!r}")
    walker = orbits.Walker.from_doc(con["walker"]) if "walker" in con else None
    tle = None
    if "tle" in con:
        if not isinstance(con["tle"], str) or not con["tle"]:
            raise SatbedError(f"constellation.tle: a file name, got {con['tle']!r}")
        tle = os.path.join(base_dir, con["tle"])
    policy_doc = doc.get("policy") or {}
    if not isinstance(policy_doc, dict):
        raise SatbedError(f"policy: a mapping of {', '.join(POLICY_KEYS)}, got {policy_doc!r}")
    bad = sorted(set(map(str, policy_doc)) - set(POLICY_KEYS))
    if bad:
        raise SatbedError(f"policy: unknown key {bad[0]!r} (known: {', '.join(POLICY_KEYS)})")
    policy_args = {k: v for k, v in policy_doc.items() if k != "handover_outage_ms"}
    if "handover_outage_ms" in policy_doc:
        ms = orbits.number(policy_doc["handover_outage_ms"], "policy.handover_outage_ms", 0, 3_600_000)
        policy_args["handover_outage_s"] = ms / 1000
    if not isinstance(policy_args.get("name", ""), str):
        raise SatbedError(f"policy.name: one of {', '.join(orbits.POLICIES)}, got {policy_args['name']!r}")
    try:
        policy = orbits.Policy(**policy_args)
    except SatbedError as e:
        raise SatbedError(f"policy: {e}") from None
    spec = LeoSpec(orbits.Site.from_doc(doc["terminal"], "terminal"), orbits.Site.from_doc(doc["gateway"], "gateway"),
                   walker, tle, orbits.utc(doc["start"], "start") if doc.get("start") is not None else None,
                   orbits.number(doc.get("duration_s", 300.0), "duration_s", 0, orbits.MAX_DURATION_S, lo_open=True),
                   orbits.number(doc.get("sample_hz", 10.0), "sample_hz", 0, orbits.MAX_SAMPLE_HZ, lo_open=True),
                   policy)
    if spec.duration_s * spec.sample_hz > orbits.MAX_SAMPLES:
        raise SatbedError(f"duration_s {spec.duration_s:g} at sample_hz {spec.sample_hz:g} is more than "
                          f"{orbits.MAX_SAMPLES} samples")
    return spec


def satellites(spec: LeoSpec) -> tuple[list[orbits.Satellite], datetime]:
    """The constellation and the start: the spec's, or its default."""
    if spec.walker is not None:
        start = spec.start or WALKER_START
        return spec.walker.satellites(start), start
    path = spec.tle or ""
    try:
        text = read_regular(path, "TLE file", MAX_TLE_BYTES).decode("utf-8")
    except UnicodeDecodeError:
        raise SatbedError(f"{path}: a TLE file must be UTF-8 text") from None
    sats = orbits.parse_tle(text, path)
    return sats, spec.start or max(s.epoch() for s in sats).replace(microsecond=0)


def schedule(spec: LeoSpec) -> orbits.Schedule:
    sats, start = satellites(spec)
    return orbits.schedule(sats, spec.terminal, spec.gateway, start, spec.duration_s, spec.sample_hz, spec.policy)
