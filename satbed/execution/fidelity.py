"""Parallel fidelity (`satbed matrix --fidelity`): does a cell measure the
same beside the other cells a matrix runs with it as alone?"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import TextIO

from satbed.core.errors import SatbedError
from satbed.core.proc import require_root
from satbed.core.units import human_bps
from satbed.execution.admission import Admission
from satbed.execution.children import Child, clean_leftovers, collect, spawn, stop_children
from satbed.model.experiment import Cell, Experiment


def fidelity(exp: Experiment, out: str, jobs: int | None = None, rounds: int = 3, backend: str = "mininet",
             stream: TextIO = sys.stderr) -> dict:
    """Parallel fidelity: the first cell's goodput alone vs with other cells of
    the file running throughout (restarted as they finish, and the reference
    started once they are under way), so it meets their setup, transfer,
    teardown and analysis as a cell in a real matrix does. The background is
    what the matrix would run beside it: --jobs - 1 cells, or by default as
    many as the admission's CPU budget takes. Prints and returns the numbers."""
    require_root()
    if not exp.cells:
        raise SatbedError(f"{exp.file}: no cells")
    base = exp.cells[0]
    if base.params["client"] == "ping":
        raise SatbedError("fidelity needs a transfer client (its first cell is ping)")
    admit = Admission.for_host(jobs)
    root = os.path.join(os.path.abspath(out), "fidelity", time.strftime("%Y%m%d-%H%M%S"))
    others = exp.cells[1:] or [base]
    started = 0

    def start(cell: Cell, name: str) -> Child:
        d = os.path.join(root, name)
        now = time.monotonic()
        return Child(cell, spawn(cell, d, backend), time.time(), now, now + cell.timeout_s)

    def measure(tag: str, with_others: bool) -> tuple[float | None, list[int]]:
        """The reference's goodput, and how many cells ran beside it (sampled)."""
        nonlocal started
        bg: list[Child] = []
        beside: list[int] = []
        try:
            def refill() -> None:
                nonlocal started
                bg[:] = [c for c in bg if c.proc.poll() is None]
                while with_others:
                    nxt = others[started % len(others)]
                    if admit.pick([nxt], [base] + [c.cell for c in bg]) is None:
                        break
                    bg.append(start(nxt, f"{tag}-bg{started}"))
                    started += 1
            refill()
            # Let the background reach its transfers before the reference starts.
            t_end = time.monotonic() + (20 if with_others else 0)
            while time.monotonic() < t_end:
                refill()
                time.sleep(0.5)
            ref = start(base, f"{tag}-ref")
            while ref.proc.poll() is None:
                if time.monotonic() > ref.deadline:
                    stop_children([ref])
                    break
                refill()
                beside.append(len(bg))
                time.sleep(0.5)
            row = collect(ref, os.path.join(root, f"{tag}-ref"))
        finally:
            stop_children(bg)
            if bg:
                clean_leftovers()
        if row.status == "ok" and row.goodput_bps:
            return row.goodput_bps, beside
        stream.write(f"  {tag}: {row.status} {row.error or 'no goodput'}\n")
        return None, beside

    alone: list[float] = []
    together: list[float] = []
    beside_all: list[int] = []
    for r in range(rounds):
        a, _ = measure(f"r{r}-alone", False)
        t, beside = measure(f"r{r}-parallel", True)
        beside_all += beside
        alone += [a] if a else []
        together += [t] if t else []
        n = f"{statistics.fmean(beside):.1f}" if beside else "?"
        stream.write(f"round {r + 1}/{rounds}: alone {human_bps(a) if a else 'failed'}, with {n} other "
                     f"cells {human_bps(t) if t else 'failed'}\n")
        stream.flush()
    if not alone or not together:
        raise SatbedError(f"fidelity: no successful reference cells (see {root})")
    a, t = statistics.fmean(alone), statistics.fmean(together)
    worst = min(together)
    n = statistics.fmean(beside_all) if beside_all else 0.0
    doc = {"cell": base.label(), "background": [c.label() for c in others], "admission": admit.describe(),
           "jobs": jobs, "cells_beside_mean": round(n, 2), "cells_beside_max": max(beside_all, default=0),
           "rounds": rounds, "alone_bps": alone, "parallel_bps": together, "alone_mean_bps": a,
           "parallel_mean_bps": t, "mean_diff_pct": 100 * (t - a) / a, "worst_diff_pct": 100 * (worst - a) / a,
           "dir": root}
    print(f"fidelity: {base.label()} with {n:.1f} other cells running ({admit.describe()}): "
          f"alone {human_bps(a)}, with others {human_bps(t)} ({doc['mean_diff_pct']:+.2f}%), "
          f"worst {human_bps(worst)} ({doc['worst_diff_pct']:+.2f}%)")
    with open(os.path.join(root, "fidelity.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
    return doc
