"""`satbed leo-profile`: a link profile file for satemu from LEO orbit
geometry (a LEO link file, or flags: a Walker pattern or TLE sets, the two
ends, the satellite policy) or from a recorded trace (Mahimahi, or a
measurement CSV). The file is checked as satemu parses it before the
command says it is written."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from satbed.core import yamlfile
from satbed.core.errors import SatbedError
from satbed.core.files import write_text
from satbed.model import leo, linkprofile, orbits, traces


GEOMETRY_FLAGS = ("altitude", "pattern", "terminal", "gateway", "start", "duration", "sample_hz", "policy",
                  "min_elevation", "interval", "offset", "handover_outage_ms")


def build_parser(sub) -> None:
    p = sub.add_parser("leo-profile", help="write a link profile from LEO orbit geometry or a recorded trace")
    p.add_argument("file", nargs="?", help="a LEO link file (YAML: constellation, terminal, gateway, policy; "
                                           "docs/guide/leo.md); flags given beside it override it")
    p.add_argument("--out", required=True, help="the profile to write (CSV), e.g. profiles/link/leo.csv")
    src = p.add_argument_group("source (one, or the file)")
    src.add_argument("--walker", metavar="I:T/P/F", help="a Walker pattern: inclination, satellites, planes, "
                                                         "phasing, e.g. 53:1584/72/17 (with --altitude)")
    src.add_argument("--altitude", type=float, metavar="KM", help="the Walker orbits' altitude in km")
    src.add_argument("--pattern", choices=("delta", "star"), help="Walker delta (nodes over 360 deg, default) "
                                                                  "or star (over 180)")
    src.add_argument("--tle", metavar="FILE", help="a file of three-line element sets")
    src.add_argument("--mahimahi", metavar="FILE", help="a Mahimahi packet-delivery trace -> rate_bps")
    src.add_argument("--window-ms", type=float, help="with --mahimahi: the rate's window (default 100 ms)")
    src.add_argument("--measurements", metavar="FILE", help="a CSV of time and delay_ms/rtt_ms/rate_bps/loss")
    g = p.add_argument_group("geometry (with --walker, --tle or the file)")
    g.add_argument("--terminal", metavar="LAT,LON[,ALT_M]", help="the user terminal")
    g.add_argument("--gateway", metavar="LAT,LON[,ALT_M]", help="the gateway")
    g.add_argument("--start", metavar="ISO8601", help="UTC start, e.g. 2025-01-01T00:00:00Z (default: a Walker's "
                                                      "2025-01-01, the TLE file's newest epoch)")
    g.add_argument("--duration", type=float, metavar="S", help="seconds of schedule (default 300)")
    g.add_argument("--sample-hz", type=float, metavar="HZ", help="delay samples a second (default 10)")
    g.add_argument("--policy", metavar="NAME", help=f"satellite choice: {', '.join(orbits.POLICIES)} "
                                                    "(default highest-elevation)")
    g.add_argument("--min-elevation", type=float, metavar="DEG", help="both ends' elevation mask (default 25)")
    g.add_argument("--interval", type=float, metavar="S", help="reconfiguration interval (default 15)")
    g.add_argument("--offset", type=float, metavar="S", help="reconfiguration instants' offset from whole "
                                                             "intervals of UTC (default 0: 0, 15, 30, 45 s)")
    g.add_argument("--handover-outage-ms", type=float, metavar="MS", help="link down this long at each "
                                                                          "handover (default 0)")
    p.set_defaults(fn=cmd_leo_profile, needs_root=False)


def _geometry_doc(args: argparse.Namespace) -> dict:
    """The LEO link file's document (or none) with the typed flags laid over it."""
    doc = yamlfile.load(args.file, "LEO link file") if args.file else {}
    if not isinstance(doc, dict):
        raise SatbedError(f"{args.file}: a mapping of {', '.join(leo.TOP_KEYS)}")
    if args.walker is not None and args.tle is not None:
        raise SatbedError("give --walker or --tle, not both")
    if args.walker is not None:
        if args.altitude is None:
            raise SatbedError("--walker needs --altitude KM")
        w = orbits.Walker.parse(args.walker, args.altitude, args.pattern or "delta")
        doc["constellation"] = {"walker": dataclasses.asdict(w)}
    elif args.altitude is not None or args.pattern is not None:
        raise SatbedError("--altitude and --pattern go with --walker")
    if args.tle is not None:
        doc["constellation"] = {"tle": os.path.abspath(args.tle)}
    for flag in ("terminal", "gateway"):
        if getattr(args, flag) is not None:
            site = orbits.Site.parse(getattr(args, flag), flag)
            doc[flag] = {"lat": site.lat_deg, "lon": site.lon_deg, "alt_m": site.alt_m}
    for flag, key in (("start", "start"), ("duration", "duration_s"), ("sample_hz", "sample_hz")):
        if getattr(args, flag) is not None:
            doc[key] = getattr(args, flag)
    policy = doc.get("policy") or {}
    for flag, key in (("policy", "name"), ("min_elevation", "min_elevation_deg"), ("interval", "interval_s"),
                      ("offset", "offset_s"), ("handover_outage_ms", "handover_outage_ms")):
        # A policy that is no mapping is the file's error: from_doc says so.
        if getattr(args, flag) is not None and isinstance(policy, dict):
            policy = {**policy, key: getattr(args, flag)}
    if policy:
        doc["policy"] = policy
    return doc


def cmd_leo_profile(args: argparse.Namespace) -> int:
    traced = [f for f in ("mahimahi", "measurements") if getattr(args, f) is not None]
    geometry = args.file or args.walker is not None or args.tle is not None
    if len(traced) + bool(geometry) != 1:
        raise SatbedError("give one source: a LEO link file, --walker, --tle, --mahimahi or --measurements")
    summary: dict = {"profile": args.out}
    if args.window_ms is not None and traced != ["mahimahi"]:
        raise SatbedError("--window-ms goes with --mahimahi")
    geometry_flags = [f"--{f.replace('_', '-')}" for f in GEOMETRY_FLAGS if getattr(args, f) is not None]
    if traced and geometry_flags:
        raise SatbedError(f"{geometry_flags[0]} goes with orbit geometry (--walker, --tle or a LEO link file), "
                          f"not a trace")
    handover_times: list[float] | None = None    # a trace has no handovers to tell
    if traced:
        path = getattr(args, traced[0])
        window = 100.0 if args.window_ms is None else args.window_ms
        points = traces.mahimahi(path, window) if traced[0] == "mahimahi" else traces.measurements(path)
        comment = f"satbed leo-profile: {traced[0]} trace {os.path.basename(path)}" + (
            f", {window:g} ms windows" if traced[0] == "mahimahi" else "")
    else:
        doc = _geometry_doc(args)
        try:
            # A relative tle: is beside the file, whatever directory satbed runs from.
            spec = leo.from_doc(doc, os.path.dirname(os.path.abspath(args.file)) if args.file else ".")
        except SatbedError as e:
            raise SatbedError(f"{args.file}: {e}" if args.file else str(e)) from None
        sched = leo.schedule(spec)
        points, comment = sched.points, f"satbed leo-profile: {spec.describe()}"
        handover_times = [h.t_s for h in sched.handovers]
        summary["handovers"] = [dataclasses.asdict(h) for h in sched.handovers]
        summary["down"] = [dataclasses.asdict(d) for d in sched.down]
        for d in sched.down:
            print(f"satbed: link down from {d.start_s:g} s to {d.end_s:g} s: {d.reason}", file=sys.stderr)
        for note in sched.notes:
            print(f"satbed: note: {note}", file=sys.stderr)
    text = linkprofile.render(points, comment, handover_times)
    if len(text.encode()) > linkprofile.MAX_BYTES:
        raise SatbedError(f"the profile would be {len(text.encode())} bytes, more than satbed reads "
                          f"({linkprofile.MAX_BYTES}): shorten it or sample less often")
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(out_dir):
        raise SatbedError(f"--out {args.out}: no directory {out_dir}")
    write_text(args.out, text)
    linkprofile.check(args.out)     # what satemu will parse, checked as it parses it
    summary["points"] = len(points)
    print(json.dumps(summary, sort_keys=True))
    return 0
