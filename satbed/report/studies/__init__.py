"""Study pages: `satbed report DIR` on a matrix that reproduces a published
study draws that study's own figure types from our runs, in place of the
Global Hawk charts (whose axes, BER and RTT, are not what those studies vary).

A study is a module of this package with a STUDY (base.Study): how it
recognises its matrix's cells and its page function. Studies are found by
looking at the package, the way clients are, so a new study is a new module.
Everything comes from what the cells stored (results.sqlite and the cell
directories); nothing is rerun. Each page states its configuration and where
our set-up departs from the study's."""

from __future__ import annotations

import importlib
import os
import pkgutil

from satbed.results.store import CellRow

from .base import Study


def discover() -> list[Study]:
    """Every study of this package, by module name."""
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        study = getattr(importlib.import_module(f"{__name__}.{info.name}"), "STUDY", None)
        if isinstance(study, Study):
            found.append(study)
    return found


def study_of(rows: list[CellRow]) -> Study | None:
    """The study whose cells these are, if any."""
    return next((s for s in discover() if rows and s.recognises(rows)), None)


def for_page(page: str) -> Study | None:
    """The study whose page (docs/studies/DOC.md) this is, if it writes one."""
    stem = os.path.splitext(os.path.basename(page))[0]
    return next((s for s in discover() if s.doc == stem and s.results), None)


def pages(out: str, rows: list[CellRow]) -> list[str]:
    """HTML sections for the study the matrix reproduces ([] if none)."""
    study = study_of(rows)
    return study.page(out, rows) if study else []
