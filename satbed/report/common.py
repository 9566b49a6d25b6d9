"""What every part of the matrix report shares: the statistics (mean and
95% interval over repetitions), each protocol's colour and marks, how a PEP,
a BER, a size and a rate are written, and an HTML table."""

from __future__ import annotations

import html
import json
import math
import os
import shutil
import statistics
from collections.abc import Callable
from pathlib import Path

from analysis.report import redraw
from analysis.run import run_window
from analysis.tsg import Window
from satbed.results.metrics import read_analysis
from satbed.results.store import MEASURED, CellRow


# Two-sided 95% Student t quantiles by degrees of freedom; 1.96 beyond.
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
       10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042}


# Stable colours: a protocol keeps its colour across charts and reports.
PROTOCOL_ORDER = ("ftp", "scp", "sftp", "rsync", "saratoga", "nuttcp-tcp", "nuttcp-udp", "wget", "iperf3",
                  "ping")

COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")

MARKERS = ("o", "s", "^", "D", "v", "P")


def t95(n: int) -> float:
    df = n - 1
    if df < 1:
        return float("nan")
    best = [k for k in T95 if k <= df]
    return T95[max(best)] if df <= 30 else 1.96


def mean_ci(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% interval (0 for one sample)."""
    m = statistics.fmean(values)
    if len(values) < 2:
        return m, 0.0
    return m, t95(len(values)) * statistics.stdev(values) / math.sqrt(len(values))


def colour(client: str) -> str:
    if client in PROTOCOL_ORDER:
        return COLOURS[PROTOCOL_ORDER.index(client) % len(COLOURS)]
    return COLOURS[sum(client.encode()) % len(COLOURS)]


def fmt_ber(b: float) -> str:
    if b == 0:
        return "0"
    exp = math.floor(math.log10(b))
    mant = b / 10 ** exp
    return f"1e{exp}" if abs(mant - 1) < 1e-9 else f"{mant:g}e{exp}"


def param_key(v) -> str:
    return json.dumps(v, sort_keys=True, default=str)


def pep_label(p: dict) -> str:
    """The PEP a cell ran, with its options: pepd's TCP WAN leg and its
    wan=rate leg are different rows of the study's charts, not one series
    held at its most common options."""
    opts = str(p.get("pep_options") or "").strip()
    return f"{p['pep']} {opts}" if opts and p["pep"] != "none" else p["pep"]


def line_style(pep: str) -> str:
    """A series' line style: dashed without a PEP, dash-dot for a PEP
    with options (pepd wan=rate beside pepd), solid otherwise."""
    return "--" if pep == "none" else "-." if " " in pep else "-"


def measured(rows: list[CellRow]) -> list[CellRow]:
    return [r for r in rows if r.status in MEASURED and r.goodput_bps]


def human_size(n: int) -> str:
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div:
            return f"{n / div:g}{unit}"
    return str(n)


def fmt_mbps(v: float | None) -> str:
    return f"{v / 1e6:.3f}" if v is not None else "–"


# How a study page writes a number in each unit ("" a plain number, e.g. a count).
UNITS: dict[str, Callable[[float], str]] = {
    "Mbit/s": lambda v: f"{v / 1e6:.2f} Mbit/s",
    "kbit/s": lambda v: f"{v / 1e3:.0f} kbit/s",
    "x": lambda v: f"{v:.2f}x",                 # a ratio
    "bytes": lambda v: f"{v:,.0f} B",
    "s": lambda v: f"{v:.1f} s",
    "fraction": lambda v: f"{v:.3f}",           # of a link
    "": lambda v: f"{v:g}",
}


def fmt_value(v: float | None, unit: str) -> str:
    """A study page's number in its unit (one of UNITS; another is a bug)."""
    return "no cell" if v is None else UNITS[unit](v)


def html_table(headers: list[str], body: list[list[str]], raw: bool = False) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    rows = "".join("<tr>" + "".join(f"<td>{c if raw else html.escape(str(c))}</td>" for c in row) + "</tr>"
                   for row in body)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def draw_tsg_window(run: str, vantage: str, png_path: str, seconds: float) -> str | None:
    """The time-sequence graph of one capture point of a stored cell, `seconds`
    from the middle of its main connection (past slow start), copied to
    png_path; what went wrong, or None."""
    analysis = (read_analysis(run) or {}).get("analysis") or {}
    main = (analysis.get(vantage) or {}).get("main") or {}
    if main.get("first_packet") is None or main.get("last_packet") is None:
        return f"the cell has no {vantage} analysis of its transfer"
    origin, _ = run_window(analysis, None)
    middle = (main["first_packet"] + main["last_packet"]) / 2 - origin
    origin, window = run_window(analysis, Window(start=max(0.0, middle - seconds / 2), duration=seconds))
    graphs, problem = redraw(Path(run), vantage, analysis[vantage], window, origin)
    if problem or "tsg_window" not in graphs:
        return problem or "tcptrace drew no time-sequence graph"
    os.makedirs(os.path.dirname(png_path), exist_ok=True)
    shutil.copyfile(os.path.join(run, "analysis", vantage, graphs["tsg_window"]), png_path)
    return None
