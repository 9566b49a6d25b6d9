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
from typing import TYPE_CHECKING, Callable

from analysis.figures import data_uri, png, pyplot
from satbed.core.files import write_text
from satbed.results.store import CellRow

from ..common import mean_ci

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class Study:
    """A published study a matrix can reproduce. `recognises` tells its
    cells apart from any other matrix's; `page` draws the study's own
    figures from them as HTML sections (out: the matrix directory).

    `doc` names the study's page, docs/studies/DOC.md, and `results` writes
    its generated part for `satbed study-page`: given the stored runs'
    directories, their measured cells and the directory for the page's
    figures, the page's markdown lines below its run table."""
    name: str                                           # the paper's short name, the page's heading
    recognises: Callable[[list[CellRow]], bool]
    page: Callable[[str, list[CellRow]], list[str]]
    doc: str = ""
    results: Callable[[list[str], list[CellRow], str], list[str]] | None = None


def scenario_of(rows: list[CellRow]) -> str | None:
    """The scenario file name (without .yaml) of a matrix's cells, if they are one scenario's."""
    names = {os.path.splitext(os.path.basename(r.params.get("scenario") or ""))[0] for r in rows}
    return names.pop() if len(names) == 1 else None


def from_scenario(stem: str) -> Callable[[list[CellRow]], bool]:
    """Recognises the cells of scenarios/STEM.yaml."""
    return lambda rows: scenario_of(rows) == stem


def _revision(cell: str) -> dict:
    try:
        with open(os.path.join(cell, "environment.json"), encoding="utf-8") as f:
            return json.load(f).get("git") or {}
    except (OSError, ValueError):
        return {}


def stored_revisions(d: str) -> list[dict]:
    """The revisions (environment.json's git) that stored_per_cell kept for
    the cells of the run in d, one per cell."""
    found = []
    for path in glob.glob(os.path.join(d, "*.json")):
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict):
            found += [v["git"] for v in doc.values() if isinstance(v, dict) and isinstance(v.get("git"), dict)]
    return found


def stored_per_cell(dirs: list[str], rows: list[CellRow], name: str,
                    compute: Callable[[str, CellRow], dict | None]) -> dict[str, dict]:
    """Per-cell figures a study page needs that results.sqlite does not hold
    (they come from captures, traces and records), by cell hash. They are
    kept beside results.sqlite as NAME.json: computed from a cell's
    directory where it is present (and the file updated), read from the
    file where only the stored results are, as under docs/studies/ where a
    run is kept without its captures."""
    found: dict[str, dict] = {}
    for d in dirs:
        path = os.path.join(d, f"{name}.json")
        try:
            with open(path, encoding="utf-8") as f:
                kept = json.load(f)
        except (OSError, ValueError):
            kept = {}
        changed = False
        for r in rows:
            cell = os.path.join(d, "cells", r.hash)
            # A cell measured again (--retry) keeps its hash: its finish time tells the runs apart.
            fresh = (kept.get(r.hash) or {}).get("finished") == r.finished
            if not fresh and os.path.isdir(cell) and (v := compute(cell, r)) is not None:
                kept[r.hash] = {**v, "finished": r.finished, "git": _revision(cell)}
                changed = True
        if changed:
            write_text(path, json.dumps(kept, separators=(",", ":"), sort_keys=True) + "\n")
        found.update(kept)
    return found


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


def page_figure(fig: Figure, figures: str, name: str) -> str:
    """A study page's figure saved as FIGURES/NAME and closed; its path as the
    page links it (FIGURES is the directory beside the page)."""
    os.makedirs(figures, exist_ok=True)
    with open(os.path.join(figures, name), "wb") as f:
        f.write(png(fig))
    pyplot().close(fig)
    return f"{os.path.basename(figures)}/{name}"


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
