"""The Global Hawk study's whole grid on its page: every cell of
`satbed matrix scenarios/globalhawk.yaml` (100 MB, four delays, three error
rates, six clients, with and without each PEP, in every variant, and QUIC
end to end on today's hosts) as tables and a CSV, how the run was made, and
Charts 1-3 drawn from it, one panel per client of the study and condition. The claims above it on the page come from smaller
experiments; this section checks them against the grid."""

from __future__ import annotations

import csv
import io
import os
import statistics
import time
from typing import Callable

from analysis.figures import png, pyplot
from satbed.core.files import write_text
from satbed.report.common import colour, fmt_ber
from satbed.results.store import MEASURED, CellRow

GRID_EXPERIMENT = "globalhawk"       # scenarios/globalhawk.yaml's name: its cells are the grid
GRID_FILE = "scenarios/globalhawk.yaml"
CLIENTS = ("ftp", "scp", "sftp", "rsync", "saratoga", "nuttcp-tcp")   # the study's: charted
# QUIC rows (variant quic): today's hosts only, never split by a PEP; in the tables, not the
# study's charts.
QUIC_CLIENTS = ("quic", "http3")
RTTS = (0.0, 100.0, 300.0, 600.0)
BERS = (0.0, 1e-7, 1e-5)
SCPS_OPTIONS = "rate=10000000 rtt_ms=800 minrto_us=800000 buf=2000000"
# The PEP in the path, as the grid's axes and its study-scps variant name it.
MODES = (("none", "", "no PEP", "-"), ("pepd", "", "pepd, TCP WAN leg", "--"),
         ("pepd", "wan=rate", "pepd, rate-based WAN leg", ":"), ("scps", SCPS_OPTIONS, "SCPS gateway", "-."))
# Rows of the charts and tables: a condition, and the variants whose cells it shows. The study's
# own PEP (variant study-scps) runs on the study's hosts and error model, so it sits in that row.
CONDITIONS = (("today", ("today", "quic"), "today's hosts, errors per bit", "today's hosts\nerrors per bit"),
              ("study", ("study",), "the study's hosts, errors per bit", "study's hosts\nerrors per bit"),
              ("study-errors", ("study-errors", "study-scps"), "the study's hosts and error model (per packet)",
               "study's hosts\nerrors per packet"))

# A cell that did not finish is stalled, not slow, when the main transfer's
# data went silent on the client's leg for this long: far beyond any
# retransmission backoff of the grid's lossy cells (a few seconds at most).
STALL_S = 30.0

Goodput = Callable[[str, str, str, float, float, str], "float | None"]


def grid_rows(rows: list[CellRow]) -> list[CellRow]:
    return [r for r in rows if r.experiment == GRID_EXPERIMENT]


class Grid:
    """The grid's cells by (variant, client, pep, options, rtt, ber). A cell
    without errors is the same network under `study` and `study-errors`, so
    the matrix runs it once, as `study`; the lookup reads it for both."""

    def __init__(self, rows: list[CellRow]):
        self.rows = rows
        self.by: dict[tuple, list[CellRow]] = {}
        for r in rows:
            p = r.params
            key = (p.get("variant", ""), p["client"], p["pep"], p.get("pep_options") or "", p["rtt"], p["ber"])
            self.by.setdefault(key, []).append(r)

    def cells(self, variant: str, client: str, pep: str, options: str, rtt: float, ber: float) -> list[CellRow]:
        if variant in ("study-errors", "study-scps") and ber == 0 and pep != "scps":
            variant = "study"
        return self.by.get((variant, client, pep, options, rtt, ber), [])

    def goodput(self, variant: str, client: str, pep: str, rtt: float, ber: float, options: str = "") -> float | None:
        values = [r.goodput_bps for r in self.cells(variant, client, pep, options, rtt, ber)
                  if r.status in MEASURED and r.goodput_bps]
        return statistics.fmean(values) if values else None

    def shown(self, variants: tuple[str, ...], client: str, pep: str, options: str, rtt: float,
              ber: float) -> list[CellRow]:
        return [r for v in variants for r in self.cells(v, client, pep, options, rtt, ber)]


def client_leg(r: CellRow) -> dict:
    """tcptrace's figures for the main transfer's data on the client's leg
    (lan_a), {} where the cell has none."""
    main = ((r.metrics.get("analysis") or {}).get("lan_a") or {}).get("main") or {}
    data = main.get(main.get("data_direction") or "")
    return data if isinstance(data, dict) else {}


def stalled(r: CellRow) -> bool:
    idle = client_leg(r).get("idletime_max_ms")
    return r.status == "limited" and isinstance(idle, (int, float)) and idle >= STALL_S * 1000


def _cell_text(rows: list[CellRow]) -> str:
    if not rows:
        return "·"
    measured = [r for r in rows if r.status in MEASURED and r.goodput_bps]
    if not measured:
        return rows[0].status
    mean = statistics.fmean(r.goodput_bps for r in measured) / 1e6
    mark = "†" if any(stalled(r) for r in measured) else "*" if any(r.status == "limited" for r in measured) else ""
    return f"{mean:.2f}{mark}"


def _stalls(grid: Grid) -> list[str]:
    """The cells that stopped moving data before their time limit, each with
    what the client's leg shows."""
    found = [r for r in grid.rows if stalled(r)]
    if not found:
        return []
    out = [f"`†`: the transfer stopped. The cell reached its time limit, and its data went silent on the "
           f"client's leg (`lan_a`) for {STALL_S:g} s or more. That is tcptrace's longest idle time there; "
           "in the grid's other unfinished cells it is a few seconds at most. These cells measure a stall, "
           "not a rate:", ""]
    for r in found:
        p, leg = r.params, client_leg(r)
        delivered = r.metrics.get("bytes")
        share = (f"{delivered / 2**20:.1f} of {p.get('size', 0) / 2**20:g} MB delivered"
                 if isinstance(delivered, (int, float)) else "")
        out.append(f"- `{r.hash}`: {p['client']} with {p['pep']} ({p.get('variant', '')}), {p['rtt']:g} ms, "
                   f"{fmt_ber(p['ber'])}: {share}; silent for {leg['idletime_max_ms'] / 1000:.0f} s at most; "
                   f"{leg.get('rexmt_pkts', '?')} segments retransmitted on the client's leg, where the "
                   "emulator loses nothing.")
    return out + [""]


def _modes_of(variants: tuple[str, ...]) -> list[tuple[str, str, str, str]]:
    return [m for m in MODES if m[0] != "scps" or "study-scps" in variants]


def _table(grid: Grid, variants: tuple[str, ...]) -> list[str]:
    head = "| client | PEP | " + " | ".join(f"{rtt:g} ms, {fmt_ber(ber)}" for rtt in RTTS for ber in BERS) + " |"
    lines = [head, "|---|---|" + "---|" * (len(RTTS) * len(BERS))]
    for client in CLIENTS + QUIC_CLIENTS:
        for pep, options, label, _ in _modes_of(variants):
            values = [_cell_text(grid.shown(variants, client, pep, options, rtt, ber)) for rtt in RTTS for ber in BERS]
            if all(v == "·" for v in values):
                continue
            lines.append(f"| {client} | {label} | " + " | ".join(values) + " |")
    return lines


def _series(grid: Grid, variants: tuple[str, ...], client: str, pep: str, options: str, x: str,
            fixed: float) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """One line of a chart panel: (x index, Mbit/s) of every measured point,
    and the points whose transfer stopped (stalled), to be marked as such."""
    points, stalls = [], []
    for k, xv in enumerate(BERS if x == "ber" else RTTS):
        rtt, ber = (fixed, xv) if x == "ber" else (xv, fixed)
        g = next((v for v in (grid.goodput(var, client, pep, rtt, ber, options) for var in variants)
                  if v is not None), None)
        if g is not None:
            points.append((k, g / 1e6))
            if any(stalled(r) for var in variants for r in grid.cells(var, client, pep, options, rtt, ber)):
                stalls.append((k, g / 1e6))
    return points, stalls


def _chart(grid: Grid, name: str, x: str, fixed: float, figures: str) -> str:
    """A row of panels per condition, a panel per client; a line per PEP."""
    xs = BERS if x == "ber" else RTTS
    clients = [c for c in CLIENTS if any(r.params["client"] == c for r in grid.rows)]
    fig, axes = pyplot().subplots(len(CONDITIONS), len(clients), figsize=(2.7 * len(clients) + 0.8, 8.4),
                             sharex=True, sharey=True, squeeze=False)
    fig.subplots_adjust(left=0.1, right=0.98, top=0.95, bottom=0.14, wspace=0.07, hspace=0.18)
    for i, (_, variants, _, short) in enumerate(CONDITIONS):
        for j, client in enumerate(clients):
            ax = axes[i][j]
            for pep, options, mode, style in _modes_of(variants):
                points, stalls = _series(grid, variants, client, pep, options, x, fixed)
                if points:
                    ax.plot([p[0] for p in points], [p[1] for p in points], style, marker="o", markersize=3,
                            color={"none": "#444444", "pepd": "#1f77b4", "scps": "#d62728"}[pep]
                            if options != "wan=rate" else "#2ca02c", label=mode)
                if stalls:
                    ax.plot([p[0] for p in stalls], [p[1] for p in stalls], linestyle="none", marker="x",
                            markersize=9, color="black", label="the transfer stopped (†): not a rate")
            ax.set_xticks(range(len(xs)))
            ax.set_xticklabels([fmt_ber(v) for v in xs] if x == "ber" else [f"{v:g}" for v in xs], fontsize=7)
            ax.grid(True, alpha=0.3)
            if i == 0:
                ax.set_title(client, color=colour(client))
            if j == 0:
                ax.set_ylabel(f"{short}\nMbit/s", fontsize=8)
            if i == len(CONDITIONS) - 1:
                ax.set_xlabel("BER" if x == "ber" else "RTT (ms)")
    labelled = {lab: h for row in axes for ax in row for h, lab in zip(*ax.get_legend_handles_labels())}
    if labelled:
        fig.legend(list(labelled.values()), list(labelled), fontsize=8, loc="lower center", ncol=len(labelled))
    os.makedirs(figures, exist_ok=True)
    with open(os.path.join(figures, f"{name}.png"), "wb") as f:
        f.write(png(fig))
    pyplot().close(fig)
    return f"{os.path.basename(figures)}/{name}.png"


CHARTS = (("chart1", "Chart 1: goodput vs BER at zero delay", "ber", 0.0,
           "performance with a PEP is worse than without; a PEP only adds overhead at zero delay"),
          ("chart2", "Chart 2: goodput vs BER at 600 ms", "ber", 600.0,
           "a PEP helps TCP ever so slightly at 1e-5 and not at all without errors; FTP is poor even "
           "without errors"),
          ("chart3", "Chart 3: goodput vs RTT at BER 1e-5", "rtt", 1e-5,
           "Saratoga is consistent across delay; a PEP improves FTP and has little effect on SCP"))


def charts(grid: Grid, figures: str, source: str) -> list[str]:
    """Charts 1-3 from grid's cells; source says which cells they are."""
    out = [f"Drawn from {source}: a row per condition, a panel per client, a line per PEP (the SCPS gateway, "
           "as the study configured it, in the row of the study's hosts and error model).", ""]
    for name, title, x, fixed, says in CHARTS:
        out += [f"#### {title}", "", f"The paper: {says}.", "", f"![{title}]({_chart(grid, name, x, fixed, figures)})", ""]
    return out


def write_csv(grid: Grid, path: str) -> None:
    """Every cell of the grid, one line each, for a lab's own plots."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["variant", "client", "pep", "pep_options", "rtt_ms", "ber", "ber_unit", "size_bytes", "status",
                "goodput_bps", "seconds", "hash"])
    for r in sorted(grid.rows, key=lambda r: (r.params.get("variant", ""), r.params["client"], r.params["pep"],
                                              r.params.get("pep_options") or "", r.params["rtt"], r.params["ber"])):
        p = r.params
        w.writerow([p.get("variant", ""), p["client"], p["pep"], p.get("pep_options") or "", f"{p['rtt']:g}",
                    f"{p['ber']:g}", p.get("ber_unit", "bit"), p.get("size", ""), r.status,
                    "" if r.goodput_bps is None else f"{r.goodput_bps:.0f}",
                    "" if r.seconds is None else f"{r.seconds:.1f}", r.hash])
    write_text(path, buf.getvalue())


def _sittings(runs: list[dict]) -> list[dict]:
    return [r for r in runs if r.get("experiment") == GRID_EXPERIMENT and r.get("started")
            and (r.get("cells") or 0) > (r.get("skipped") or 0)]


def missing(grid: Grid, runs: list[dict]) -> int:
    """Cells of the matrix (every variant) not yet finished in the stored grid."""
    expected = max((r["cells"] for r in _sittings(runs)), default=len(grid.rows))
    return max(0, expected - sum(1 for r in grid.rows if r.status in ("ok", "limited", "failed", "timeout")))


def how_made(grid: Grid, runs: list[dict], conditions: str, revisions: str) -> list[str]:
    """The command, the sittings (a stopped matrix resumes with the same
    command), the revisions, the load and steal, and how many cells it holds."""
    by_status: dict[str, int] = {}
    for r in grid.rows:
        by_status[r.status] = by_status.get(r.status, 0) + 1
    sittings = _sittings(runs)
    todo = missing(grid, runs)
    wall = sum((r.get("finished") or r["started"]) - r["started"] for r in sittings)
    lines = [f"Command: `satbed matrix {GRID_FILE}` (every variant), in {len(sittings)} "
             f"sitting{'s' if len(sittings) != 1 else ''} (a stopped matrix resumes where it stopped with the "
             "same command):", ""]
    for r in sittings:
        started = time.strftime("%Y-%m-%d %H:%M", time.gmtime(r["started"]))
        took = f"{(r['finished'] - r['started']) / 60:.0f} min" if r.get("finished") else "no end recorded"
        lines.append(f"- {started} UTC, {took}, {r['cells'] - r['skipped']} cells to run, "
                     f"{r.get('outcome') or 'still running when stored'}")
    done = sum(by_status.get(s, 0) for s in ("ok", "limited", "failed", "timeout"))
    lines += ["", f"Wall time in all: {wall / 3600:.1f} h. Cells stored: {done} of {done + todo} "
              f"({', '.join(f'{n} {s}' for s, n in sorted(by_status.items()))})"
              + (f"; the other {todo} are not yet run, shown as ·." if todo else "."),
              f"During the cells: {conditions}.", f"Revisions the cells ran on: {revisions}."]
    return lines


def quic_beside(grid: Grid) -> list[str]:
    """QUIC end to end beside SCP without and with pepd and Saratoga at the
    study's longest delay: what a lab asks of QUIC over GEO, where no PEP
    can split it."""
    if not any(r.params["client"] in QUIC_CLIENTS for r in grid.rows):
        return []
    rows = [("quic", "quic", "none", "", "QUIC, one stream (quic)"),
            ("quic", "http3", "none", "", "HTTP/3 (http3)"),
            ("today", "scp", "none", "", "scp, no PEP"),
            ("today", "scp", "pepd", "", "scp, pepd TCP WAN leg"),
            ("today", "scp", "pepd", "wan=rate", "scp, pepd rate-based WAN leg"),
            ("today", "saratoga", "none", "", "Saratoga")]
    out = ["#### QUIC beside SCP and Saratoga at 600 ms, today's hosts", "",
           "quic-go's one congestion control (NewReno) end to end; a PEP in the path passes QUIC through, so "
           "its rows run without one. Goodput in Mbit/s, marks as in the tables below.", "",
           "| | " + " | ".join(fmt_ber(b) for b in BERS) + " |", "|---|" + "---|" * len(BERS)]
    for variant, client, pep, options, label in rows:
        out.append(f"| {label} | " + " | ".join(_cell_text(grid.cells(variant, client, pep, options, 600.0, b))
                                                for b in BERS) + " |")
    return out + [""]


def tables(grid: Grid) -> list[str]:
    out = ["Goodput in Mbit/s, by condition; columns are RTT and BER. `*`: the cell reached its 300 s "
           "measurement window before the 100 MB were through (status `limited`; the goodput is over what "
           "it delivered). Every cell is in `global-hawk/grid.csv` beside this page.", ""]
    out += _stalls(grid)
    out += quic_beside(grid)
    for _, variants, label, _ in CONDITIONS:
        out += [f"#### {label[0].upper() + label[1:]}", "", *_table(grid, variants), ""]
    return out
