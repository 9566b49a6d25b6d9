"""The ACK-reservation study (scenarios/outage.yaml; J. Zhu, S. Roy and J. H.
Kim, "Enhancing TCP Splitting in Satellite-Terrestrial Networks via ACK
Reservation", IEEE GLOBECOM 2003): the headline of its Table I, a split
connection through 10 s outages with and without the reservation, beside
satbed's runs under three conditions: today's source flow-controlled by
pepd, the study's source (Reno without SACK) flow-controlled by pepd, and the
study's source and access node (its packets dropped while the buffer is
full). docs/studies/ack-reservation.md is written from the stored runs.

Recovery and throughput come from the cells' LAN captures
(analysis/outage.py); they are kept beside results.sqlite as
ack-reservation.json so that a run stored without its captures still
writes the page."""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass
from typing import Callable

from analysis import outage
from analysis.figures import pyplot
from satbed.report.common import fmt_value
from satbed.results.store import CellRow

from .base import Study, from_scenario, page_figure, stored_per_cell
from .headlines import Headline, conditions_table
from .headlines import table as headline_table

NAME = "ACK reservation"

# The conditions, as the scenario's variants name them (without the B/K suffix): today's are the
# sweep's own pepd rows.
CONDITIONS = (("pepd", "satbed today: Linux Reno with SACK (`reno-sack-1500`), pepd's flow control"),
              ("study-source", "the study's source (Reno, no SACK, MaxRto 50 s), pepd's flow control"),
              ("study-drops", "the study's conditions: that source, and its packets dropped while the "
                              "access node's buffer is full"))
PLAIN, RESERVED = "B175", "B175-K0.95"       # Table I's rows (175, 1) and (175, 0.95)
TRACE_S = 60.0                               # the figure's span: the first outage and its recovery
# The traces are kept at 0.2 s (every other 100 ms sample; the rate averaged over two bins).


def _figures(cell: str, row: CellRow) -> dict | None:
    """What the page needs of one cell: outage.run_metrics, and the source's
    congestion window and sending rate over the first cycle."""
    if not os.path.exists(os.path.join(cell, "result.json")):
        return None
    m = outage.run_metrics(cell)
    tr = outage.traces(cell)
    return {"recovery_s": m.recovery_s, "recovery_long_s": m.recovery_long_s,
            "throughput_fraction": m.throughput_fraction, "cycles": m.cycles,
            "goodput_fraction": m.goodput_fraction, "buffer_high_packets": m.buffer_high_packets,
            "integrity": m.integrity, "error": m.error,
            "cwnd": [[round(t, 1), c] for t, c, _ in tr["cwnd"][::2] if 0 <= t <= TRACE_S],
            "rate": [[round(t, 1), round((v + w) / 2)] for (t, v), (_, w) in zip(tr["rate"][::2], tr["rate"][1::2])
                     if t <= TRACE_S],
            "outages": [list(o) for o in tr["outages"][:2]]}


@dataclass
class Runs:
    rows: list[CellRow]
    figures: dict[str, dict]

    def cell(self, variant: str) -> dict | None:
        found = [self.figures[r.hash] for r in self.rows
                 if r.params.get("variant") == variant and r.hash in self.figures]
        return found[0] if found else None

    def throughput(self, variant: str) -> float | None:
        c = self.cell(variant)
        return c["throughput_fraction"] if c else None

    def recovery(self, variant: str) -> float | None:
        """Mean recovery over the outages, an outage never recovered from
        counted as the whole 30 s the link was up."""
        c = self.cell(variant)
        if not c or not c["recovery_s"]:
            return None
        return statistics.fmean(30.0 if v is None else v for v in c["recovery_s"])

    def gain(self, condition: str) -> float | None:
        plain, reserved = self.throughput(f"{condition}-{PLAIN}"), self.throughput(f"{condition}-{RESERVED}")
        return reserved / plain if plain and reserved is not None else None


@dataclass
class Claim:
    where: str
    says: str
    paper: str
    value: Callable[[Runs, str], float | None]
    unit: str
    holds: Callable[[float], bool]
    why: str


def _throughput(suffix: str) -> Callable[[Runs, str], float | None]:
    return lambda runs, cond: runs.throughput(f"{cond}-{suffix}")


def _recovery(suffix: str) -> Callable[[Runs, str], float | None]:
    return lambda runs, cond: runs.recovery(f"{cond}-{suffix}")


CLAIMS = (
    Claim("Table I, (175, 1)", "without ACK reservation the source is slow to recover: throughput as a "
             "fraction of the link (at most 0.75)", "0.492", _throughput(PLAIN), "fraction",
             lambda x: abs(x - 0.492) <= 0.08,
             "Two causes tested. The source's TCP is ruled out: the study's source behind pepd's flow control "
             "does as well as today's. The access node's drops are ruled in: pepd's full buffer closes the "
             "source's window, so the source keeps its congestion window through the outage and resumes when "
             "the window reopens; dropping what it sends while the link is down, as the study's full buffer "
             "did, brings the study's throughput back."),
    Claim("Table I, (175, 1)", "recovery after an outage without ACK reservation (s; mean over the "
             "outages, one never recovered from counted as 30 s)", "11.6", _recovery(PLAIN), "s",
             lambda x: 0.5 * 11.6 <= x <= 1.5 * 11.6,
             "Under flow control only the satellite leg's own restart remains (pepd's RTO capped at 1 s, then "
             "a slow start on a 0.5 s round trip). With drops the source's retransmission timer, doubled at "
             "each timeout through the outage, decides when it sends again, seconds after link-up; where that "
             "timer falls depends on its starting value and its growth, which the paper gives only as MaxRto, "
             "so the stall is reproduced and its length is of the same order, not the same."),
    Claim("Table I, (175, 0.95)", "with ACK reservation at K = 0.95: throughput as a fraction of the link",
             "0.726", _throughput(RESERVED), "fraction", lambda x: abs(x - 0.726) <= 0.08,
             "With flow control the reservation's throughput is reached without it (row 1, today). Under the "
             "study's drops pepd's reservation does not restore it: pepd reserves window, not "
             "acknowledgements (the kernel acknowledges whatever it accepts, and pepd only decides when to "
             "read), so at link-up it can reopen the window but cannot acknowledge anything the source is "
             "still waiting on; the source waits for its retransmission timer as without K."),
    Claim("Table I, (175, 0.95)", "recovery with ACK reservation (s)", "2.67", _recovery(RESERVED), "s",
             lambda x: 0.5 * 2.67 <= x <= 1.5 * 2.67,
             "Under flow control the recovery is the satellite leg's restart, with or without K, and matches "
             "the paper's; under drops it is the source's timer, with or without K (row 3)."),
    Claim("Section VI", "ACK reservation improves throughput by nearly 50% (K = 0.95 over no "
             "reservation at B = 175)", "1.48x", lambda runs, cond: runs.gain(cond), "x",
             lambda x: x >= 1.25,
             "Not reproduced, and the experiments say why: without drops there is no stall for the reservation "
             "to cure, and with them pepd's reservation cannot cure it (row 3). The study's gain needs an "
             "access node that holds back real acknowledgements of buffered data, which a proxy on Linux "
             "sockets cannot send or withhold."),
)


def _headlines(runs: Runs) -> tuple[Headline, ...]:
    """The claims in the shared headline table: today's condition and the study's."""
    today, study = CONDITIONS[0][0], CONDITIONS[-1][0]
    return tuple(Headline(f"{c.where}: {c.says}", c.paper, lambda _rows, c=c: c.value(runs, today),
                          lambda _rows, c=c: c.value(runs, study), lambda v, c=c: fmt_value(v, c.unit), c.holds, c.why)
                 for c in CLAIMS)


def _conditions_table(runs: Runs) -> list[str]:
    """Every claim under every condition: the causes tested one by one."""
    return conditions_table([cond for cond, _ in CONDITIONS],
                            [(c.paper, [c.value(runs, cond) for cond, _ in CONDITIONS],
                              lambda v, c=c: fmt_value(v, c.unit), c.holds) for c in CLAIMS])


def _cells_table(runs: Runs) -> list[str]:
    lines = ["| variant | recovery per outage, 0.5 s window (s) | 1 s window (s) | throughput / link | "
             "goodput / link (whole transfer) | buffer max (pkts) | SHA-256 |", "|---|---|---|---|---|---|---|"]

    def each(vals: list) -> str:
        return ", ".join("never" if v is None else f"{v:.1f}" for v in vals) or "-"

    for cond, _ in CONDITIONS:
        for suffix in (PLAIN, RESERVED):
            c = runs.cell(f"{cond}-{suffix}")
            if not c:
                continue
            tp, gp, buf = c["throughput_fraction"], c["goodput_fraction"], c["buffer_high_packets"]
            lines.append(f"| `{cond}-{suffix}` | {each(c['recovery_s'])} | {each(c['recovery_long_s'])} | "
                         f"{fmt_value(tp, 'fraction')} | {fmt_value(gp, 'fraction')} | "
                         f"{'-' if buf is None else f'{buf:.0f}'} | "
                         f"{c['integrity'] or '-'}{(' (' + c['error'] + ')') if c['error'] else ''} |")
    return lines


def _trace_figure(runs: Runs, figures: str) -> str | None:
    """The source's congestion window and sending rate over the first cycle,
    one panel per condition (the study's Figures 3 and 7 in kind)."""
    shown = [(cond, label) for cond, label in CONDITIONS
             if any(runs.cell(f"{cond}-{s}") for s in (PLAIN, RESERVED))]
    if not shown:
        return None
    fig, axes = pyplot().subplots(2, len(shown), figsize=(4.6 * len(shown), 5.4), sharex=True, squeeze=False)
    for col, (cond, label) in enumerate(shown):
        for suffix, style in ((PLAIN, "-"), (RESERVED, "--")):
            c = runs.cell(f"{cond}-{suffix}")
            if not c:
                continue
            name = "no reservation" if suffix == PLAIN else "K = 0.95"
            axes[0, col].plot([t for t, _ in c["cwnd"]], [v for _, v in c["cwnd"]], style, lw=0.9, label=name)
            axes[1, col].plot([t for t, _ in c["rate"]], [v for _, v in c["rate"]], style, lw=0.7, label=name)
            for ax in axes[:, col]:
                for down, up in c["outages"]:
                    ax.axvspan(down, min(up, TRACE_S), color="0.9")
        axes[0, col].set_title(cond, fontsize=10)
        axes[1, col].set_xlabel("s from the schedule's start (grey: link down)")
    axes[0, 0].set_ylabel("source cwnd (packets)")
    axes[1, 0].set_ylabel("source sends (packets/s)")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    return page_figure(fig, figures, "source-traces.png")


def results(dirs: list[str], rows: list[CellRow], figures: str) -> list[str]:
    runs = Runs([r for r in rows if from_scenario("outage")([r])],
                stored_per_cell(dirs, rows, "ack-reservation", _figures))
    reps = max((r.repetition for r in runs.rows), default=0) + 1
    chart = _trace_figure(runs, figures)
    return [
        "### The paper's headlines beside satbed's", "",
        f"One run per cell ({reps} repetition{'s' if reps > 1 else ''}): differences of a few hundredths "
        "are noise. Conditions, each a pair of the scenario's variants (B = 175 packets, without and with "
        "K = 0.95, the paper's Table I rows):", "",
        *[f"- `{cond}-{PLAIN}`, `{cond}-{RESERVED}`: {label}." for cond, label in CONDITIONS], "",
        "A verdict says whether satbed's number matches the paper's (throughput within 0.08 of the link, "
        "recovery within half either way of the paper's, the gain at least 1.25x).", "",
        *headline_table(_headlines(runs), runs.rows), "",
        "### Each condition", "",
        "The same claims under every condition, the study's source alone included (the first cause "
        "tested):", "",
        *_conditions_table(runs), "",
        "### The cells", "",
        "Recovery: from link-up until the source sends 90% of the link's payload rate over the window "
        "(its LAN capture). Throughput: data reaching `dst` over whole 40 s cycles from the first "
        "outage, over the link's payload rate.", "",
        *_cells_table(runs), "",
        *([f"![The source's congestion window and sending rate]({chart})", "",
           "The source's congestion window (`ss -ti`) and sending rate over the first cycle, no reservation "
           "solid, K = 0.95 dashed (the study's Figures 3 and 7 in kind).", ""] if chart else []),
    ]


def page(out: str, rows: list[CellRow]) -> list[str]:
    """`satbed report` on an outage matrix: its own report is outage.html."""
    return [f"<h2>{NAME}</h2><p>Recovery, throughput and traces per configuration: outage.html beside "
            "this report (analysis/outage.py).</p>"]


STUDY = Study(NAME, from_scenario("outage"), page, doc="ack-reservation", results=results)
