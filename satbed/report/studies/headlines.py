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


def table(headlines: tuple[Headline, ...], rows: list[CellRow]) -> list[str]:
    """The Markdown table: the paper, satbed today, satbed under the study's
    conditions, whether they agree, why."""
    out = ["| # | the paper says | the paper | satbed today | satbed, the study's conditions | agree? | why |",
           "|---|---|---|---|---|---|---|"]
    for i, h in enumerate(headlines, 1):
        shown, verdicts = [], []
        for value in (h.today(rows), h.study(rows)):
            if value is None:
                shown.append("no cell")
                verdicts.append(None)
                continue
            ok = h.holds(value)
            shown.append(h.shown(value) + (" (agrees)" if ok else " (**disagrees**)"))
            verdicts.append(ok)
        out.append(f"| {i} | {h.says} | {h.paper} | {shown[0]} | {shown[1]} | "
                   f"{VERDICT.get((verdicts[0], verdicts[1]), 'not measured')} | "
                   f"{h.why(rows) if callable(h.why) else h.why} |")
    return out


def repetitions(rows: list[CellRow]) -> str:
    """How many repetitions the points have, for the page."""
    reps = sorted({r.repetition for r in rows})
    return f"{len(reps)} repetition{'s' if len(reps) != 1 else ''} per point"
