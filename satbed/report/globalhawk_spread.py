"""How much one run of a Global Hawk cell settles: the claims that
experiments/globalhawk-window-spread.yaml answers (today's hosts, 600 ms, BER
1e-5 per bit, FTP and SCP with and without pepd, each cell run several times
with its own seed), read from every run beside the claims experiment's and
the whole grid's, with how many runs uphold each verdict.

Under those conditions a transfer without a PEP never finishes and several
rows are the largest window a host advertised: one run's extreme, which may
land on either side of the paper's figure. Repetitions say whether a verdict
is the host's or the run's."""

from __future__ import annotations

from satbed.report.common import fmt_value
from satbed.report.globalhawk_claims import CLAIMS, Cells
from satbed.results.store import CellRow

SPREAD_EXPERIMENT = "globalhawk-window-spread"
VARIANT = "today"


def spread_rows(rows: list[CellRow]) -> list[CellRow]:
    return [r for r in rows if r.experiment == SPREAD_EXPERIMENT]


def _how_long(rows: list[CellRow]) -> str:
    """The transfer size and time limit the rows ran with, e.g. "20 MB, 150 s"."""
    kinds = sorted({(r.params.get("size", 0), r.params.get("time_limit") or 0) for r in rows})
    return "; ".join(f"{size / 2**20:g} MB, {limit:g} s" for size, limit in kinds) or "-"


def _shown(value: float | None, unit: str, holds: bool) -> str:
    if value is None:
        return "-"
    return fmt_value(value, unit) + (" (agrees)" if holds else " (**disagrees**)")


def section(spread: list[CellRow], claims: Cells, grid: Cells) -> list[str]:
    runs = sorted({r.repetition for r in spread})
    per_run = [Cells([r for r in spread if r.repetition == k]) for k in runs]
    seeds = sorted({r.params.get("seed", 1) + r.repetition for r in spread})
    claim_rows = [r for r in claims.rows if r.params.get("variant") == VARIANT]
    grid_rows = [r for r in grid.rows if r.params.get("variant") == VARIANT]
    lines = [
        f"The same cells run {len(runs)} times (`experiments/globalhawk-window-spread.yaml`, today's hosts, "
        f"600 ms, BER 1e-5 per bit, seeds {', '.join(map(str, seeds))}; {_how_long(spread)}), beside the "
        f"claims experiment's cells ({_how_long(claim_rows)}) and the whole grid's ({_how_long(grid_rows)}): "
        "every row of the table above that these cells answer.", "",
        "| # | the paper says | claims run | whole grid | "
        + " | ".join(f"run {k + 1}" for k in runs) + " | runs that agree |",
        "|---|---|---|---|" + "---|" * (len(runs) + 1)]
    settled, split, outvoted = [], [], []
    for i, claim in enumerate(CLAIMS, 1):
        values = [claim.value(c, VARIANT) for c in per_run]
        if all(v is None for v in values):
            continue
        upheld = sum(1 for v in values if v is not None and claim.holds(v))
        answered = sum(1 for v in values if v is not None)
        a, b = claim.value(claims, VARIANT), claim.value(grid, VARIANT)
        cells = [_shown(v, claim.unit, v is not None and claim.holds(v)) for v in (a, b, *values)]
        lines.append(f"| {i} | {claim.says} | " + " | ".join(cells) + f" | {upheld} of {answered} |")
        (settled if upheld in (0, answered) else split).append(str(i))
        if upheld in (0, answered) and a is not None and claim.holds(a) != (upheld == answered):
            outvoted.append(str(i))
    lines.append("")
    if settled:
        lines.append(f"Every run gives the same verdict on row{'s' if len(settled) > 1 else ''} "
                     f"{', '.join(settled)}: under today's hosts that verdict is the host's.")
    if outvoted:
        lines.append(f"On row{'s' if len(outvoted) > 1 else ''} {', '.join(outvoted)} the claims experiment's "
                     "verdict is not the one every repeat gives: its cells ran on earlier revisions (\"How "
                     "they were made\" above), the repeats on the grid's, so there the repeats are the current "
                     "code's answer.")
    if split:
        lines.append(f"The runs disagree with each other on row{'s' if len(split) > 1 else ''} "
                     f"{', '.join(split)}: there one run's figure falls on either side of the paper's, so "
                     "under today's hosts with errors per bit these rows' verdicts belong to the run, not "
                     "the host, and neither the table's nor the grid's settles them.")
    return lines
