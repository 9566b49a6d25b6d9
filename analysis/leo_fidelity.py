"""How faithfully satemu plays a LEO link profile, from a run's wire
captures at both ends of the satellite link (wan_a on the a side, wan_b
on the b side; the same kernel clock):

- delay: each frame seen at both captures, matched by its IPv4 header
  (TTL and checksum aside) and the first 8 bytes after it, has a one-way
  delay of its later sighting minus its earlier one; the schedule's delay
  is the profile's delay_ms in force when the frame entered the link (its
  earlier sighting, on the profile's clock). An ICMP echo and its reply
  add up to the link's RTT, against the two delays they met. Errors are
  measured minus schedule, in ms: the median signed, p99 and max of the
  absolute values.
- rate: the frames of the busiest direction leaving the link (their later
  sightings, less the schedule's delay: the time the shaper sent them),
  their wire bytes (Ethernet header included, as satemu charges them)
  per window, against the profile's rate_bps integrated over the same
  window. Only windows in which satemu's queue for that direction held a
  frame at every sample (emulator_timeseries.csv) count: elsewhere the
  sender, not the shaper, set the rate. The target is every window
  within 2 %.

A run's profile clock starts at result.json's schedule_clock_wall_s
(epoch) and, in the emulator's own time series, at
schedule_clock_started_s."""

from __future__ import annotations

import bisect
import csv
import math
import struct
from collections import defaultdict, deque
from dataclasses import dataclass
from pathlib import Path

from satbed.core.errors import SatbedError
from satbed.core.files import read_regular

from . import leo
from .pcap import (LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL, LINKTYPE_RAW, LINKTYPE_RAW_ALT, MAGIC_NS, MAGIC_US)

MAX_CAPTURE_BYTES = 1 << 30
TARGET = 0.02                   # the rate's target: every counted window within 2 %
L3_OFFSET = {LINKTYPE_ETHERNET: 14, LINKTYPE_LINUX_SLL: 16, LINKTYPE_RAW: 0, LINKTYPE_RAW_ALT: 0}


@dataclass(frozen=True)
class Frame:
    ts: float
    key: bytes                  # what identifies the frame at both ends
    wire: int                   # bytes on the wire (Ethernet header included)
    src: str
    dst: str
    echo: tuple[int, int, int] | None   # ICMP (type, id, seq) of an echo request (8) or reply (0)


def read_frames(path: str) -> list[Frame]:
    """The IPv4 frames of a classic pcap; anything else is one SatbedError line."""
    data = read_regular(path, "capture", MAX_CAPTURE_BYTES)
    if len(data) < 24:
        raise SatbedError(f"{path}: too short for a pcap header ({len(data)} bytes)")
    for endian in ("<", ">"):
        magic = struct.unpack(endian + "I", data[:4])[0]
        if magic in (MAGIC_US, MAGIC_NS):
            break
    else:
        raise SatbedError(f"{path}: not a classic pcap file (magic {data[:4].hex()})")
    div = 1e9 if magic == MAGIC_NS else 1e6
    linktype = struct.unpack(endian + "I", data[20:24])[0] & 0x0FFFFFFF
    if linktype not in L3_OFFSET:
        raise SatbedError(f"{path}: link type {linktype} (Ethernet, Linux cooked or raw IP wanted)")
    l3 = L3_OFFSET[linktype]
    rec = struct.Struct(endian + "IIII")
    out, off = [], 24
    while off < len(data):
        if off + 16 > len(data):
            raise SatbedError(f"{path}: ends inside a record header at byte {off}")
        sec, frac, caplen, wire = rec.unpack_from(data, off)
        off += 16
        if off + caplen > len(data):
            raise SatbedError(f"{path}: ends inside a record at byte {off}")
        frame = data[off:off + caplen]
        off += caplen
        if len(frame) < l3 + 28 or frame[l3] >> 4 != 4 or (linktype == LINKTYPE_ETHERNET and frame[12:14] != b"\x08\x00"):
            continue        # not an IPv4 frame with 8 bytes after its header (ARP, IPv6, snapped)
        ihl = (frame[l3] & 0x0F) * 4
        if ihl < 20 or len(frame) < l3 + ihl + 8:
            continue
        ip = bytearray(frame[l3:l3 + ihl])
        ip[8] = 0           # TTL and checksum: a router on the path may change them
        ip[10:12] = b"\0\0"
        after = frame[l3 + ihl:l3 + ihl + 8]
        echo = None
        if ip[9] == 1 and after[0] in (0, 8):
            echo = (after[0], *struct.unpack(">HH", after[4:8]))
        src, dst = ".".join(str(b) for b in ip[12:16]), ".".join(str(b) for b in ip[16:20])
        out.append(Frame(sec + frac / div, bytes(ip) + after, wire + (0 if linktype == LINKTYPE_ETHERNET else 14),
                         src, dst, echo))
    return out


def match(a: list[Frame], b: list[Frame]) -> list[tuple[Frame, Frame]]:
    """Frames seen at both captures, each paired in order with its twin
    (the same key: the first unpaired sighting at the other end)."""
    waiting: dict[bytes, deque[Frame]] = defaultdict(deque)
    for f in b:
        waiting[f.key].append(f)
    pairs = []
    for f in a:
        q = waiting.get(f.key)
        if q:
            pairs.append((f, q.popleft()))
    return pairs


def summary(errors: list[float]) -> dict:
    """n, the signed median, and the p99 and max of the absolute values (ms)."""
    if not errors:
        return {"n": 0, "p50_ms": None, "p99_abs_ms": None, "max_abs_ms": None}
    s, a = sorted(errors), sorted(abs(e) for e in errors)
    return {"n": len(s), "p50_ms": round(s[len(s) // 2], 4),
            "p99_abs_ms": round(a[min(len(a) - 1, math.ceil(0.99 * len(a)) - 1)], 4), "max_abs_ms": round(a[-1], 4)}


def _run(run: Path) -> tuple[dict, tuple[str, str]]:
    """A run's result.json and its satellite link's profiles (a to b, b to a)."""
    profiles = leo.link_profiles(leo.load_object(run / "config.json"))
    result = leo.load_object(run / "result.json")
    if profiles is None:
        raise SatbedError(f"{run}: its satellite link has no profile")
    if not isinstance(result.get("schedule_clock_wall_s"), (int, float)):
        raise SatbedError(f"{run / 'result.json'}: no schedule_clock_wall_s: the profile's clock is unknown")
    return result, profiles


def _captures(run: Path) -> list[tuple[Frame, Frame]]:
    for v in ("wan_a", "wan_b"):
        if not (run / "captures" / f"{v}.pcap").is_file():
            raise SatbedError(f"{run}: no captures/{v}.pcap (run with captures on)")
    return match(read_frames(str(run / "captures" / "wan_a.pcap")), read_frames(str(run / "captures" / "wan_b.pcap")))


def delay_fidelity(run_dir: str | Path) -> dict:
    """One-way and echo RTT errors of a run against its profile's delay."""
    run = Path(run_dir)
    result, profiles = _run(run)
    origin = float(result["schedule_clock_wall_s"])
    steps = {"a_to_b": leo.profile_delays(profiles[0]), "b_to_a": leo.profile_delays(profiles[1])}
    if not steps["a_to_b"] or not steps["b_to_a"]:
        raise SatbedError(f"{run}: its profile sets no delay_ms")
    errors: dict[str, list[float]] = {"a_to_b": [], "b_to_a": []}
    legs: dict[tuple[int, int], dict[int, tuple[float, float]]] = defaultdict(dict)
    for fa, fb in _captures(run):
        d = "a_to_b" if fb.ts >= fa.ts else "b_to_a"
        t_in, t_out = min(fa.ts, fb.ts), max(fa.ts, fb.ts)
        want = leo.delay_at(steps[d], t_in - origin)
        got = (t_out - t_in) * 1000
        errors[d].append(got - want)
        if fa.echo is not None:
            legs[fa.echo[1:]][fa.echo[0]] = (got, want)
    rtt = [req[0] + rep[0] - req[1] - rep[1] for e in legs.values()
           if (req := e.get(8)) is not None and (rep := e.get(0)) is not None]
    return {"run": str(run), "one_way": {d: summary(e) for d, e in errors.items()}, "echo_rtt": summary(rtt)}


def rate_fidelity(run_dir: str | Path, window_s: float = 1.0) -> dict:
    """Per-window wire rate of the busiest direction against the profile's rate_bps."""
    if not 0.01 <= window_s <= 3600:
        raise SatbedError(f"window {window_s:g} s: give 0.01 to 3600 s")
    run = Path(run_dir)
    result, profiles = _run(run)
    origin = float(result["schedule_clock_wall_s"])
    pairs = _captures(run)
    bytes_by = {"a_to_b": 0, "b_to_a": 0}
    for fa, fb in pairs:
        bytes_by["a_to_b" if fb.ts >= fa.ts else "b_to_a"] += fa.wire
    d = max(bytes_by, key=lambda k: bytes_by[k])
    profile = profiles[0] if d == "a_to_b" else profiles[1]
    rate = leo.profile_steps(profile, "rate_bps")
    if not rate:
        raise SatbedError(f"{profile}: sets no rate_bps")
    delay = leo.profile_delays(profile)
    up = leo.profile_steps(profile, "up")
    # When the shaper sent each frame: its later sighting less the schedule's delay then.
    sent: list[tuple[float, int]] = []
    for fa, fb in pairs:
        if (fb.ts >= fa.ts) == (d == "a_to_b"):
            out = max(fa.ts, fb.ts) - origin
            sent.append((out - (leo.delay_at(delay, out) or 0) / 1000, fa.wire))
    sent.sort()
    times = [t for t, _ in sent]
    cum = [0]
    for _, w in sent:
        cum.append(cum[-1] + w)
    busy = _busy(run, result, d)
    rows, skipped, down = [], 0, 0
    if sent:
        # From the second whole window: the first is the queue filling.
        k = math.floor(round(times[0], 6) / window_s) * window_s + window_s     # to the µs: no float dust
        while k + window_s <= times[-1]:
            if up and _mean(up, k, k + window_s) < 1:
                down += 1           # the profile takes the link down in it: no rate to hold
            elif not busy(k, k + window_s):
                skipped += 1
            else:
                lo, hi = bisect.bisect_left(times, k), bisect.bisect_left(times, k + window_s)
                got = 8 * (cum[hi] - cum[lo]) / window_s
                want = _mean(rate, k, k + window_s)
                rows.append({"t_s": round(k, 6), "measured_bps": round(got), "profile_bps": round(want),
                             "error": round(got / want - 1, 6)})
            k += window_s
    errs = sorted(abs(r["error"]) for r in rows)
    return {"run": str(run), "direction": d, "window_s": window_s, "windows": len(rows),
            "windows_not_saturated": skipped, "windows_link_down": down,
            "p50_abs_error": errs[len(errs) // 2] if errs else None,
            "max_abs_error": errs[-1] if errs else None,
            "within_target": sum(e <= TARGET for e in errs), "target": TARGET, "per_window": rows}


def _mean(steps: list[tuple[float, float]], lo: float, hi: float) -> float:
    """The step function's mean over [lo, hi)."""
    total, t = 0.0, lo
    times = [s for s, _ in steps]
    while t < hi:
        i = bisect.bisect_right(times, t) - 1
        nxt = times[i + 1] if i + 1 < len(times) else math.inf
        end = min(hi, nxt)
        total += steps[max(i, 0)][1] * (end - t)
        t = end
    return total / (hi - lo)


def _busy(run: Path, result: dict, direction: str):
    """A test of a window [lo, hi) of profile time: the emulator's queue for
    the direction held a frame at every time-series sample in it."""
    path = run / "emulator" / "emulator_timeseries.csv"
    started = (result.get("schedule_clock_started_s") or {})
    if not path.is_file() or len(started) != 1:
        raise SatbedError(f"{run}: no emulator/emulator_timeseries.csv of one emulator to tell a saturated window")
    t0 = float(next(iter(started.values())))
    samples: list[tuple[float, int]] = []
    text = read_regular(str(path), "emulator time series", MAX_CAPTURE_BYTES).decode("utf-8", "replace")
    reader = csv.DictReader(text.splitlines())
    n = 1
    try:
        for n, row in enumerate(reader, 2):
            if row["direction"] == direction:
                samples.append((float(row["t_s"]) - t0, int(row["queue_packets"])))
    except (KeyError, TypeError, ValueError):
        raise SatbedError(f"{path}: line {n}: not a time-series row (t_s, direction, queue_packets)") from None
    times = [t for t, _ in samples]

    def busy(lo: float, hi: float) -> bool:
        inside = samples[bisect.bisect_left(times, lo):bisect.bisect_left(times, hi)]
        return bool(inside) and all(q > 0 for _, q in inside)
    return busy
