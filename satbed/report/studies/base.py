"""What a study page is, and what the study pages share: reading a cell's
analysis by the node a capture was taken at, the emulator's time series,
figures saved beside the report and embedded in it."""

from __future__ import annotations

import csv
import glob
import html
import json
import os
from dataclasses import dataclass
from typing import Callable

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from analysis.figures import data_uri, png
from satbed.results.store import CellRow

from ..common import mean_ci


@dataclass(frozen=True)
class Study:
    """A published study a matrix can reproduce. `recognises` tells its
    cells apart from any other matrix's; `page` draws the study's own
    figures from them as HTML sections (out: the matrix directory).
    `doc`, where a study has one, writes the generated part of its
    documentation page (`satbed study-page`) from the stored cells alone, as
    Markdown lines (figures: the directory beside the page for its images);
    `doc_page` is that page."""
    name: str                                           # the paper's short name, the page's heading
    recognises: Callable[[list[CellRow]], bool]
    page: Callable[[str, list[CellRow]], list[str]]
    doc: Callable[[list[CellRow], str], list[str]] | None = None
    doc_page: str = ""


@dataclass(frozen=True)
class Headline:
    """One headline of a paper beside satbed's number under two conditions:
    the scenario as it is (`today`) and with the study's conditions
    (`study`). The values are read from the cells; `holds` says whether a
    value supports the paper; `why` is the explanation the conditions test."""
    says: str                                           # the paper's claim, in our words
    paper: str                                          # the paper's own figure
    today: Callable[[list[CellRow]], float | None]
    study: Callable[[list[CellRow]], float | None]
    shown: Callable[[float], str]                       # how a value is written
    holds: Callable[[float], bool]
    why: str


def headline_table(headlines: tuple[Headline, ...], rows: list[CellRow]) -> list[str]:
    """The Markdown table of a study page's headlines: the paper, satbed
    today, satbed under the study's conditions, whether they agree, why."""
    out = ["| # | the paper says | the paper | satbed today | satbed, the study's conditions | agree? | why |",
           "|---|---|---|---|---|---|---|"]
    for i, h in enumerate(headlines, 1):
        verdicts = []
        shown = []
        for value in (h.today(rows), h.study(rows)):
            if value is None:
                shown.append("no cell")
                verdicts.append(None)
            else:
                ok = h.holds(value)
                shown.append(h.shown(value) + (" (agrees)" if ok else " (**disagrees**)"))
                verdicts.append(ok)
        agree = {(True, True): "yes", (False, True): "under the study's conditions only",
                 (True, False): "today only", (False, False): "**no**"}.get((verdicts[0], verdicts[1]),
                                                                            "not measured")
        out.append(f"| {i} | {h.says} | {h.paper} | {shown[0]} | {shown[1]} | {agree} | {h.why} |")
    return out


def scenario_of(rows: list[CellRow]) -> str | None:
    """The scenario file name (without .yaml) of a matrix's cells, if they are one scenario's."""
    names = {os.path.splitext(os.path.basename(r.params.get("scenario") or ""))[0] for r in rows}
    return names.pop() if len(names) == 1 else None


def from_scenario(stem: str) -> Callable[[list[CellRow]], bool]:
    """Recognises the cells of scenarios/STEM.yaml."""
    return lambda rows: scenario_of(rows) == stem


def mean_ci_or_none(values: list[float]) -> tuple[float | None, float | None]:
    """mean_ci, or (None, None) without values (a partial matrix)."""
    if not values:
        return None, None
    return mean_ci(values)


def vantage_of(r: CellRow, node: str) -> dict:
    """The analysis of the capture taken at node's interface."""
    m = r.metrics
    for v, c in (m.get("captures") or {}).items():
        if isinstance(c, dict) and c.get("node") == node:
            return (m.get("analysis") or {}).get(v) or {}
    return {}


def summary_at(r: CellRow, node: str) -> dict:
    return ((vantage_of(r, node).get("main") or {}).get("summary")) or {}


def ends(r: CellRow) -> tuple[str, str]:
    """(sender, receiver) hosts of the main flow."""
    near, far = r.config.get("endpoints") or ["", ""]
    return (far, near) if r.config.get("direction", "download") == "download" else (near, far)


def figure(name: str, out: str, fig: Figure, caption: str) -> str:
    """The figure saved as DIR/charts/NAME.png and embedded, with its caption."""
    data = png(fig)
    os.makedirs(os.path.join(out, "charts"), exist_ok=True)
    with open(os.path.join(out, "charts", f"{name}.png"), "wb") as f:
        f.write(data)
    return (f"<div class='chart' id='{name}'><img alt='{name}' src='{data_uri(data)}'>"
            f"<p class='caption'>{html.escape(caption)}</p></div>")


def log_x(ax: Axes) -> None:
    """Log x axis, unless nothing is plotted yet (a partial matrix): an
    empty axis cannot be log-scaled."""
    # axhline's x data is [0, 1] (axes units): not a positive data line.
    if any(len(line.get_xdata()) and min(line.get_xdata()) > 0 for line in ax.get_lines()):
        ax.set_xscale("log")


def fmt(v: float | None, digits: int = 1) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def kernels(out: str, rows: list[CellRow]) -> str:
    """The kernels the cells ran on, as their environment.json recorded them."""
    found = set()
    for r in rows[:20]:
        try:
            with open(os.path.join(out, "cells", r.hash, "environment.json")) as f:
                env = json.load(f)
        except (OSError, ValueError):
            continue
        k = env.get("kernel")
        found.add(k if isinstance(k, str) else json.dumps(k)[:80])
    return ", ".join(sorted(found)) or "see the cells' environment.json"


@dataclass
class EmuSample:
    t_s: float
    bytes_in: float     # delta since the previous sample of this direction
    bytes_out: float
    frames_out: float
    drop_ber: float
    drop_queue: float
    ber: float


def emulator_samples(cell: str, direction: str) -> list[EmuSample]:
    """One direction of an emulator's 100 ms time series, counters turned into
    per-sample deltas (the file's counters are cumulative since start)."""
    path = os.path.join(cell, "emulator", "emulator_timeseries.csv")
    if not os.path.exists(path):
        found = sorted(glob.glob(os.path.join(cell, "emulator", "*", "emulator_timeseries.csv")))
        if not found:
            return []
        path = found[0]
    out: list[EmuSample] = []
    prev: dict[str, float] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row.get("direction") != direction:
                continue
            keys = ("bytes_in", "bytes_out", "frames_out", "drop_ber", "drop_queue")
            now = {k: float(row.get(k) or 0) for k in keys}
            out.append(EmuSample(float(row["t_s"]), *(now[k] - prev.get(k, 0.0) for k in keys),
                                 float(row.get("ber") or 0)))
            prev = now
    return out
