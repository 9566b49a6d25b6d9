"""Reading one cell of the ACTS multi-flow BER study: what its emulator,
link profile, traffic generator and router records say, interval by
interval and flow by flow (satbed/report/studies/multiflow_ber.py draws
the pages from them)."""

from __future__ import annotations


import bisect
import datetime as _dt
import glob
import json
import math
import os
from collections import defaultdict
from typing import Callable

from satbed.core.errors import SatbedError
from satbed.core.files import jsonl_records
from satbed.model import linkprofile

from .base import EmuSample


T1_BPS = 1_536_000      # the study's T1 payload rate, as the routers shape it


INTERVAL_S = 5.0        # the study's 5-minute intervals, compressed 60 times


WARMUP_S = 10.0         # the load builds up from no flows: intervals before are left out


def _decade(ber: float) -> str:
    """The study's BER classes (1e-9 is its error-free case); "clean" is BER 0,
    the recovery after the pass."""
    if ber <= 0:
        return "clean"
    return f"1e{math.floor(math.log10(ber) + 1e-9)}"


DECADES = ["1e-9", "1e-8", "1e-7", "1e-6", "1e-5", "1e-4", "1e-3", "clean"]


FULL_FRAME = 1514       # bytes on the wire of a full-size segment


def _transmitted(b: list[EmuSample]) -> float:
    """Bytes the link sent: what entered it less what its own queue dropped
    (a PEP's WAN leg can offer more than the T1; those frames never went
    out). The series counts queue drops in frames; a sender that fills a
    queue fills it with full-size segments, so each counts FULL_FRAME bytes.
    Corrupted frames were sent, as the study's router counters saw them."""
    sent = sum(s.bytes_in for s in b) - sum(s.drop_queue for s in b) * FULL_FRAME
    return max(sent, sum(s.bytes_out for s in b))


# An error figure at a time on the emulator's clock: the uplink's BER, or the
# per-packet loss of a profile that reads the figures per packet.
ErrorFigure = Callable[[float], float]


def _intervals(samples: list[EmuSample], figure: ErrorFigure | None = None) -> list[tuple[str, float, float]]:
    """(BER class, link utilisation, delivered share) per interval: bytes the
    link transmitted and delivered over the T1 rate. An interval's class is
    its highest error figure (a step inside it counts; by default the
    samples' BER), its length the time between its last sample and the
    previous interval's."""
    buckets: dict[int, list[EmuSample]] = defaultdict(list)
    for s in samples:
        buckets[int(s.t_s // INTERVAL_S)].append(s)
    out, last_t = [], 0.0           # satemu's counters start at zero with its clock
    for k in sorted(buckets)[:-1]:  # the last interval is cut short by the run's end
        b = buckets[k]
        span = b[-1].t_s - last_t
        last_t = b[-1].t_s
        if span <= 0 or k * INTERVAL_S < WARMUP_S:
            continue
        worst = max(figure(s.t_s) if figure else s.ber for s in b)
        out.append((_decade(worst), _transmitted(b) * 8 / span / T1_BPS,
                    sum(s.bytes_out for s in b) * 8 / span / T1_BPS))
    return out


def _emulator_start_unix(cell: str) -> float | None:
    """satemu's start as Unix time (its final report), to place flow records
    and router samples on its time series."""
    for path in [os.path.join(cell, "emulator", "emulator.json"),
                 *glob.glob(os.path.join(cell, "emulator", "*", "emulator.json"))]:
        try:
            with open(path, encoding="utf-8") as f:
                started = json.load(f).get("started_at")
            return _dt.datetime.fromisoformat(str(started).replace("Z", "+00:00")).timestamp()
        except (OSError, ValueError, TypeError, AttributeError):
            continue
    return None


def _profile_seconds(points: list[dict], key: str, base: float) -> tuple[list[float], float]:
    """The mean of a profile's KEY over each whole second of its clock, and
    its value after the last point; before the first point that sets it the
    link's base value holds (satemu's step function)."""
    steps = [(float(p["t_s"]), float(p[key])) for p in points if p.get(key) is not None]
    end = math.ceil(steps[-1][0]) + 1 if steps else 0
    means = []
    for k in range(end):
        # The value at k, then every step inside (k, k+1), each held until the next.
        value = next((v for t, v in reversed(steps) if t <= k), base)
        area, t_prev = 0.0, float(k)
        for t, v in steps:
            if k < t < k + 1:
                area += value * (t - t_prev)
                value, t_prev = v, t
        means.append(area + value * (k + 1 - t_prev))
    return means, steps[-1][1] if steps else base


def _error_figure(cell: str) -> ErrorFigure | None:
    """The uplink's error figure at a time on the emulator's clock, as its
    link profile set it: the mean over the profile's second that holds the
    time, of its BER, or of its per-packet loss where the profile sets no
    BER. Bursts inside a second count at their mean, the figure a BER tester
    over that second would give (the samples' BER, taken every 100 ms, sees
    a burst or the clean gap between). None where the cell does not say
    which profile ran from when; the samples' BER is then the figure."""
    emu = os.path.join(cell, "emulator", "emulator.json")
    try:
        with open(emu, encoding="utf-8") as f:
            uplink = (json.load(f).get("config") or {}).get("a_to_b") or {}
        with open(os.path.join(cell, "result.json"), encoding="utf-8") as f:
            clocks = json.load(f).get("schedule_clock_started_s") or {}
    except (OSError, ValueError, AttributeError):
        return None
    effective = uplink.get("effective") or {}
    if not effective.get("profile") or len(clocks) != 1:
        return None
    try:
        points = linkprofile.points(str(effective["profile"]))
    except SatbedError:
        return None
    key = "ber" if any(p.get("ber") is not None for p in points) else "loss"
    means, after = _profile_seconds(points, key, float(effective.get(key) or 0))
    origin = float(next(iter(clocks.values())) or 0)

    def figure(t_s: float) -> float:
        tau = t_s - origin
        if tau < 0:             # the schedule is held until the main flow starts
            return float(effective.get(key) or 0)
        k = int(tau)
        return means[k] if k < len(means) else after
    return figure


def _ber_at(samples: list[EmuSample], t_s: float) -> float:
    times = [s.t_s for s in samples]
    i = bisect.bisect_right(times, t_s) - 1
    return samples[max(0, min(i, len(samples) - 1))].ber if samples else 0.0


def _uplink_flows(cell: str, samples: list[EmuSample], t0: float,
                  figure: ErrorFigure | None = None) -> list[tuple[str, float]]:
    """(BER class at the flow's middle, goodput bit/s) of every completed flow
    whose data crossed the noisy uplink (OU's uploads), from the sender's
    records; the class by FIGURE, by default the samples' BER."""
    out = []
    for path in glob.glob(os.path.join(cell, "traffic", "client-*.jsonl")):
        for rec in jsonl_records(path):
            if rec.get("record") == "summary" or not rec.get("completed") or not rec.get("sender"):
                continue
            mid = (float(rec["start"]) + float(rec["end"])) / 2 - t0
            out.append((_decade(figure(mid) if figure else _ber_at(samples, mid)),
                        float(rec.get("goodput_bps") or 0)))
    return out


def _generator_summary(cell: str) -> dict:
    """Flows, peak concurrent flows and the generator's CPU share (both ends)."""
    flows, peak, cpu = 0, 0, 0.0
    for path in glob.glob(os.path.join(cell, "traffic", "*.jsonl")):
        for s in jsonl_records(path):
            if s.get("record") != "summary":
                continue
            if s.get("side") == "client":
                flows += int(s.get("flows") or 0)
                peak = max(peak, int(s.get("max_active") or 0))
            cpu += float(s.get("cpu_share") or 0)
    return {"flows": flows, "peak_active": peak, "cpu_share": cpu}


def _emulator_timing(cell: str) -> dict:
    """The emulator's worst departure lateness (either direction) and the
    host's CPU steal during the measurement, from result.json."""
    try:
        with open(os.path.join(cell, "result.json"), encoding="utf-8") as f:
            result = json.load(f)
    except (OSError, ValueError):
        return {}
    dirs = (((result.get("emulator") or {}).get("stats") or {}).get("totals") or {}).get("directions") or {}
    out: dict = {}
    for key in ("tx_late_p99_us", "tx_late_max_us"):
        vals = [float(d[key]) for d in dirs.values() if isinstance(d, dict) and key in d]
        if vals:
            out[key] = max(vals)
    steal = (result.get("host_cpu") or {}).get("steal_fraction")
    if steal is not None:
        out["steal_fraction"] = float(steal)
    return out


def _router_drops(cell: str, node: str, port: str, t0: float) -> list[tuple[float, float]]:
    """(satemu time, drops in that sample) at a router port's queue."""
    out, last = [], None
    path = os.path.join(cell, "counters", "interfaces.jsonl")
    if not os.path.exists(path):
        return []
    for row in jsonl_records(path):
        if row.get("node") != node or row.get("port") != port:
            continue
        d = float(row.get("dropped") or 0)
        out.append((float(row["unix"]) - t0, d - last if last is not None else 0.0))
        last = d
    return out
