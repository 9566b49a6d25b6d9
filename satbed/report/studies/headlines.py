"""A study page's headlines: each of the paper's headline claims as a row,
the paper's figure beside satbed's under two conditions, the scenario as it
is (`today`) and with the study's conditions (`study`: host profiles and
matrix variants that model what the paper had), whether they agree, and
why. The values are read from the stored cells; the verdicts are computed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from satbed.results.store import CellRow


@dataclass(frozen=True)
class Headline:
    says: str                                           # the paper's claim, in our words
    paper: str                                          # the paper's own figure
    today: Callable[[list[CellRow]], float | None]
    study: Callable[[list[CellRow]], float | None]
    shown: Callable[[float], str]                       # how a value is written
    holds: Callable[[float], bool]                      # does a value support the paper
    # The explanation the conditions test: text, or text written from the
    # cells where it cites an experiment's numbers.
    why: str | Callable[[list[CellRow]], str]


VERDICT = {(True, True): "yes", (False, True): "under the study's conditions only",
           (True, False): "today only", (False, False): "**no**"}


def judged(value: float | None, shown: Callable[[float], str], holds: Callable[[float], bool]) -> str:
    """A table's cell: the value written and whether it supports the paper;
    "no cell" where nothing measured it."""
    if value is None:
        return "no cell"
    return shown(value) + (" (agrees)" if holds(value) else " (**disagrees**)")


def table(headlines: tuple[Headline, ...], rows: list[CellRow]) -> list[str]:
    """The Markdown table: the paper, satbed today, satbed under the study's
    conditions, whether they agree, why."""
    out = ["| # | the paper says | the paper | satbed today | satbed, the study's conditions | agree? | why |",
           "|---|---|---|---|---|---|---|"]
    for i, h in enumerate(headlines, 1):
        values = (h.today(rows), h.study(rows))
        shown = [judged(v, h.shown, h.holds) for v in values]
        verdicts = [None if v is None else h.holds(v) for v in values]
        out.append(f"| {i} | {h.says} | {h.paper} | {shown[0]} | {shown[1]} | "
                   f"{VERDICT.get((verdicts[0], verdicts[1]), 'not measured')} | "
                   f"{h.why(rows) if callable(h.why) else h.why} |")
    return out


def section(headlines: tuple[Headline, ...], rows: list[CellRow], conditions: str) -> list[str]:
    """A page's first section: how many cells, what the conditions are (text),
    and the headline table."""
    return ["### The paper's headlines beside satbed's", "",
            f"{len(rows)} cells, {repetitions(rows)}.", "",
            conditions, "",
            *table(headlines, rows), ""]


def conditions_table(conditions: list[str], claims: list[tuple[str, list[float | None], Callable[[float], str],
                                                                Callable[[float], bool]]]) -> list[str]:
    """Every claim under every condition, the causes tested one by one: per
    claim the paper's figure, its value under each condition, how a value is
    written and whether it supports the paper."""
    out = ["| # | the paper | " + " | ".join(f"`{c}`" for c in conditions) + " |",
           "|---|---|" + "---|" * len(conditions)]
    for i, (paper, values, shown, holds) in enumerate(claims, 1):
        out.append(f"| {i} | {paper} | " + " | ".join(judged(v, shown, holds) for v in values) + " |")
    return out


def repetitions(rows: list[CellRow]) -> str:
    """How many repetitions the points have, for the page."""
    reps = sorted({r.repetition for r in rows})
    return f"{len(reps)} repetition{'s' if len(reps) != 1 else ''} per point"
