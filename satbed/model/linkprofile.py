"""A link's time profile (profiles/link/*.csv or a JSON list), checked as
satemu parses it (emulator/link/profile.go): satemu reads it only once the
testbed is up, so a bad file would otherwise fail a run after its setup.

CSV: a header naming t_s (required) and any of ber, loss, delay_ms, rate_bps,
up; an empty cell leaves that parameter unchanged; '#' lines are comments.
JSON: a list of {t_s, ber, loss, delay_ms, rate_bps, up}. Times are
non-decreasing seconds in [0, 1e7]."""

from __future__ import annotations

import csv
import io
import json
import math

from satbed.core.errors import SatbedError
from satbed.core.files import read_regular

MAX_TIME_S = 1e7
MAX_BYTES = 4 << 20
# The comment line naming a profile's handover instants (satbed leo-profile
# writes it, a run's report marks them): "# handovers_s: 15,30,45".
HANDOVERS = "handovers_s:"
COLUMNS = ("t_s", "ber", "loss", "delay_ms", "rate_bps", "up")
# name -> (low, high, high included, low included)
BOUNDS = {"ber": (0, 1, False, True), "loss": (0, 1, False, True), "delay_ms": (0, 3_600_000, True, True),
          "rate_bps": (0, 1e12, True, False)}


def check(path: str) -> None:
    """One SatbedError line naming the file and the point for a profile satemu would refuse."""
    points(path)


def points(path: str) -> list[dict]:
    """The profile's points as satemu reads them ({t_s, ber, ...}, a key only
    where the point sets it), checked whole; one SatbedError line if satemu
    would refuse the file."""
    try:
        text = read_regular(path, "link profile", MAX_BYTES).decode("utf-8")
    except UnicodeDecodeError:
        raise SatbedError(f"profile {path}: not UTF-8 text") from None
    try:
        found = _json(text) if text.strip().startswith("[") else _csv(text)
        last = 0.0
        for i, pt in enumerate(found, 1):
            _point(pt, i, last)
            last = pt["t_s"]
    except SatbedError as e:
        raise SatbedError(f"profile {path}: {e}") from None
    return found


def _json(text: str) -> list[dict]:
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise SatbedError(f"not valid JSON ({str(e)[:80]})") from None
    if not isinstance(raw, list) or not all(isinstance(p, dict) for p in raw):
        raise SatbedError("a JSON profile is a list of {t_s: ..., ...} points")
    for i, p in enumerate(raw, 1):
        bad = sorted(set(p) - set(COLUMNS))
        if bad:
            raise SatbedError(f"point {i}: unknown key {bad[0]!r} (known: {', '.join(COLUMNS)})")
        if "t_s" not in p:
            raise SatbedError(f"point {i}: t_s missing")
    return raw


def _csv(text: str) -> list[dict]:
    try:
        rows = [r for r in csv.reader(io.StringIO(text), skipinitialspace=True) if r and not r[0].startswith("#")]
    except csv.Error as e:      # a carriage return alone inside a line, a NUL byte
        raise SatbedError(f"not CSV ({e})") from None
    if not rows:
        raise SatbedError("csv header missing")
    header = [h.strip() for h in rows[0]]
    for h in header:
        if h not in COLUMNS:
            raise SatbedError(f"csv header: unknown column {h!r} (want {', '.join(COLUMNS)})")
    if len(set(header)) != len(header):
        raise SatbedError("csv header: a column named twice")
    if "t_s" not in header:
        raise SatbedError("csv header: t_s column missing")
    out = []
    for n, row in enumerate(rows[1:], 1):
        if len(row) != len(header):
            raise SatbedError(f"csv record {n}: {len(row)} fields, the header has {len(header)}")
        pt: dict = {}
        for h, cell in zip(header, row):
            cell = cell.strip()
            if cell == "" and h != "t_s":
                continue
            if h == "up":
                if cell.lower() not in ("true", "false", "1", "0", "t", "f"):
                    raise SatbedError(f"csv record {n}: up {cell!r} is not true or false")
                pt[h] = cell.lower() in ("true", "1", "t")
                continue
            try:
                pt[h] = float(cell)
            except ValueError:
                raise SatbedError(f"csv record {n}: {h} {cell!r} is not a number") from None
        out.append(pt)
    return out


def _point(pt: dict, i: int, last: float) -> None:
    t = pt["t_s"]
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t <= MAX_TIME_S:
        raise SatbedError(f"point {i}: t_s {t!r} outside [0, {MAX_TIME_S:g}]")
    if t < last:
        raise SatbedError(f"point {i}: t_s {t!r} is before the previous point's ({last:g}); times must not decrease")
    for k, (lo, hi, hi_in, lo_in) in BOUNDS.items():
        v = pt.get(k)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                or not (lo <= v if lo_in else lo < v) or not (v <= hi if hi_in else v < hi):
            raise SatbedError(f"point {i}: {k} {v!r} outside {'[' if lo_in else '('}{lo:g}, {hi:g}{']' if hi_in else ')'}")
    if "up" in pt and pt["up"] is not None and not isinstance(pt["up"], bool):
        raise SatbedError(f"point {i}: up {pt['up']!r} is not true or false")


def render(points: list[dict], comment: str = "", handovers: list[float] | None = None) -> str:
    """Profile points as the CSV satemu reads: the columns some point sets,
    an empty cell where a point leaves a value unchanged, up as 1 or 0;
    comment (one line) goes first, after '#', then the handover instants
    (HANDOVERS; an empty list says the profile has none) on a comment line
    of their own, so they travel with the file and satemu skips them."""
    used = [c for c in COLUMNS if c == "t_s" or any(c in p for p in points)]
    lines = [f"# {comment}"] if comment else []
    if handovers is not None:
        lines.append(f"# {HANDOVERS} " + ",".join(_cell("t_s", t) for t in handovers))
    lines.append(",".join(used))
    for p in points:
        lines.append(",".join(_cell(c, p[c]) if c in p else "" for c in used))
    return "\n".join(lines) + "\n"


def handovers(path: str) -> list[float] | None:
    """The handover instants (profile seconds) a profile's HANDOVERS comment
    line gives, or None where it has none (a profile not from orbit
    geometry). A line that is there but unreadable is one SatbedError line."""
    try:
        text = read_regular(path, "link profile", MAX_BYTES).decode("utf-8")
    except UnicodeDecodeError:
        raise SatbedError(f"profile {path}: not UTF-8 text") from None
    found = None
    for n, line in enumerate(text.splitlines(), 1):
        body = line.lstrip()
        if not body.startswith("#") or not body[1:].strip().startswith(HANDOVERS):
            continue
        if found is not None:
            raise SatbedError(f"profile {path}: line {n}: a second {HANDOVERS} line")
        found = []
        cells = body[1:].strip()[len(HANDOVERS):].strip()
        for cell in cells.split(",") if cells else []:
            try:
                t = float(cell)
            except ValueError:
                t = math.nan
            if not math.isfinite(t) or not 0 <= t <= MAX_TIME_S:
                raise SatbedError(f"profile {path}: line {n}: {HANDOVERS} {cell.strip()!r} is not a time "
                                  f"in [0, {MAX_TIME_S:g}] s")
            if found and t < found[-1]:
                raise SatbedError(f"profile {path}: line {n}: {HANDOVERS} {cell.strip()!r} is before the "
                                  f"one before it")
            found.append(t)
    return found


def _cell(column: str, v: float | bool) -> str:
    if column == "up":
        return "1" if v else "0"
    if column in ("ber", "loss"):
        return repr(float(v))        # small probabilities keep every digit
    # Microseconds for times, nanoseconds for delays, bit/s to 1e-6: finer than satemu resolves.
    text = f"{v:.6f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text
