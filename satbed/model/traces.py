"""Recorded link traces as link profile points (linkprofile.render writes
them), each file checked whole before a point is made.

Mahimahi packet-delivery traces: one integer millisecond timestamp a line,
non-decreasing, each line one opportunity to deliver a 1500-byte packet.
Opportunities are counted over windows (default 100 ms) into a rate: one
1500-byte IP packet costs satemu MTU_FRAME bytes (its Ethernet header
included), so the rate carries the trace's packets per window. A window
without an opportunity is the link down (a rate of 0 is not a rate).

Measurement CSVs (published Starlink ping and throughput logs, reduced to
these columns): a header naming a time column (t_s or time_s in seconds,
or time_ms) and any of delay_ms (one way), rtt_ms (halved: one way per
direction), rate_bps and loss; an empty cell leaves the value unchanged,
'#' lines are comments. Times count from the first row, so Unix times do."""

from __future__ import annotations

import csv
import io
import math

from satbed.core.errors import SatbedError
from satbed.core.files import read_regular
from satbed.model import linkprofile
from satbed.model.link import MTU_FRAME

MAX_TRACE_BYTES = 64 << 20
TIME_COLUMNS = {"t_s": 1.0, "time_s": 1.0, "time_ms": 0.001}
VALUE_COLUMNS = ("delay_ms", "rtt_ms", "rate_bps", "loss")
MAX_WINDOWS = 150_000           # the profile stays under linkprofile.MAX_BYTES


def _text(path: str, what: str) -> str:
    try:
        return read_regular(path, what, MAX_TRACE_BYTES).decode("utf-8")
    except UnicodeDecodeError:
        raise SatbedError(f"{path}: a {what} must be UTF-8 text") from None


def mahimahi(path: str, window_ms: float = 100.0) -> list[dict]:
    """rate_bps per window (up false where a window has no opportunity)."""
    if isinstance(window_ms, bool) or not isinstance(window_ms, (int, float)) or not math.isfinite(window_ms) \
            or not 1 <= window_ms <= 60_000:
        raise SatbedError(f"window {window_ms!r} ms: give 1 to 60000 ms")
    stamps: list[int] = []
    for n, line in enumerate(_text(path, "Mahimahi trace").splitlines(), 1):
        cell = line.strip()
        if not cell:
            continue
        if not (cell.isascii() and cell.isdigit()):
            raise SatbedError(f"{path} line {n}: {cell[:40]!r} is not a whole number of milliseconds")
        ms = int(cell)
        if ms > linkprofile.MAX_TIME_S * 1000:
            raise SatbedError(f"{path} line {n}: {ms} ms is beyond {linkprofile.MAX_TIME_S:g} s")
        if stamps and ms < stamps[-1]:
            raise SatbedError(f"{path} line {n}: {ms} ms is before the line above ({stamps[-1]} ms)")
        stamps.append(ms)
    if not stamps:
        raise SatbedError(f"{path}: no delivery opportunities (an empty trace)")
    windows = math.floor(stamps[-1] / window_ms) + 1
    if windows > MAX_WINDOWS:
        raise SatbedError(f"{path}: {stamps[-1] / 1000:g} s in {window_ms:g} ms windows is more than "
                          f"{MAX_WINDOWS} windows: widen the window")
    counts = [0] * windows
    for ms in stamps:
        counts[min(windows - 1, math.floor(ms / window_ms))] += 1
    points: list[dict] = []
    up = True
    for k, count in enumerate(counts):
        pt: dict = {"t_s": round(k * window_ms / 1000, 6)}
        if count:
            pt["rate_bps"] = count * MTU_FRAME * 8 / (window_ms / 1000)
            if pt["rate_bps"] > linkprofile.BOUNDS["rate_bps"][1]:
                raise SatbedError(f"{path}: {count} opportunities in the window at {pt['t_s']:g} s are more than "
                                  f"{linkprofile.BOUNDS['rate_bps'][1]:g} bit/s")
        if (count > 0) != up or (k == 0 and 0 in counts):
            pt["up"] = count > 0
        up = count > 0
        points.append(pt)
    return points


def measurements(path: str) -> list[dict]:
    """A point per row: delay_ms (or rtt_ms / 2), rate_bps, loss as given."""
    rows = [r for r in csv.reader(io.StringIO(_text(path, "measurement CSV")), skipinitialspace=True)
            if r and not r[0].lstrip().startswith("#")]
    if not rows:
        raise SatbedError(f"{path}: no header (want a time column and any of {', '.join(VALUE_COLUMNS)})")
    header = [h.strip() for h in rows[0]]
    known = (*TIME_COLUMNS, *VALUE_COLUMNS)
    for h in header:
        if h not in known:
            raise SatbedError(f"{path}: unknown column {h!r} (known: {', '.join(known)})")
    if len(set(header)) != len(header):
        raise SatbedError(f"{path}: a column named twice")
    times = [h for h in header if h in TIME_COLUMNS]
    if len(times) != 1:
        raise SatbedError(f"{path}: give one time column of {', '.join(TIME_COLUMNS)}")
    if "delay_ms" in header and "rtt_ms" in header:
        raise SatbedError(f"{path}: give delay_ms (one way) or rtt_ms, not both")
    if not set(header) & set(VALUE_COLUMNS):
        raise SatbedError(f"{path}: no value column (want any of {', '.join(VALUE_COLUMNS)})")
    points: list[dict] = []
    first = None
    for n, row in enumerate(rows[1:], 2):
        if len(row) != len(header):
            raise SatbedError(f"{path} row {n}: {len(row)} fields, the header has {len(header)}")
        cells = {h: c.strip() for h, c in zip(header, row)}
        t = _value(path, n, times[0], cells[times[0]]) * TIME_COLUMNS[times[0]]
        first = t if first is None else first
        t = round(t - first, 6)
        if t < 0 or t > linkprofile.MAX_TIME_S:
            raise SatbedError(f"{path} row {n}: time {cells[times[0]]} is "
                              + ("before the first row's" if t < 0 else f"over {linkprofile.MAX_TIME_S:g} s after it"))
        if points and t < points[-1]["t_s"]:
            raise SatbedError(f"{path} row {n}: time {cells[times[0]]} is before the row above's")
        pt: dict = {"t_s": t}
        for h in VALUE_COLUMNS:
            if cells.get(h):
                v = _value(path, n, h, cells[h])
                if h == "rtt_ms":
                    pt["delay_ms"] = _bounded(path, n, "rtt_ms", v, 0, 2 * linkprofile.BOUNDS["delay_ms"][1]) / 2
                elif h == "delay_ms":
                    pt[h] = _bounded(path, n, h, v, 0, linkprofile.BOUNDS[h][1])
                elif h == "rate_bps":
                    if not 0 < v <= linkprofile.BOUNDS[h][1]:
                        raise SatbedError(f"{path} row {n}: rate_bps {cells[h]} outside (0, "
                                          f"{linkprofile.BOUNDS[h][1]:g}]")
                    pt[h] = v
                else:
                    if not 0 <= v < 1:
                        raise SatbedError(f"{path} row {n}: loss {cells[h]} outside [0, 1)")
                    pt[h] = v
        points.append(pt)
    if not points:
        raise SatbedError(f"{path}: a header and no rows")
    return points


def _value(path: str, n: int, column: str, cell: str) -> float:
    try:
        v = float(cell) if cell.isascii() else math.nan
    except ValueError:
        v = math.nan
    if not math.isfinite(v):
        raise SatbedError(f"{path} row {n}: {column} {cell[:40]!r} is not a number")
    return v


def _bounded(path: str, n: int, column: str, v: float, lo: float, hi: float) -> float:
    if not lo <= v <= hi:
        raise SatbedError(f"{path} row {n}: {column} {v:g} outside [{lo:g}, {hi:g}]")
    return v
