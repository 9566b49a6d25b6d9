"""Fidelity checks (`satbed matrix --fidelity`). Parallel: does a cell
measure the same beside the other cells a matrix runs with it as alone?
Across nodes (with --executor slurm): does a cell measure the same on two of
the cluster's nodes, within NODE_AGREEMENT_PCT?"""

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
from satbed.execution import cellgroup
from satbed.execution.admission import Admission, CorePlacement, CpuMeter, Running, pending_load
from satbed.execution.children import (Child, as_running, clean_leftovers, collect, collect_cell, spawn,
                                       stop_children)
from satbed.execution.slurm import SlurmExecutor, Task
from satbed.model.experiment import Cell, Experiment
from satbed.results.store import CellRow

NODE_AGREEMENT_PCT = 2.0    # two nodes "agree" when their goodputs differ by at most this share


def reference_cell(exp: Experiment) -> Cell:
    """The cell whose goodput a fidelity check compares: the file's first, a transfer."""
    if not exp.cells:
        raise SatbedError(f"{exp.file}: no cells")
    base = exp.cells[0]
    if base.params["client"] == "ping":
        raise SatbedError("fidelity needs a transfer client (its first cell is ping)")
    return base


def fidelity(exp: Experiment, out: str, jobs: int | None = None, rounds: int = 3, backend: str = "mininet",
             stream: TextIO = sys.stderr) -> dict:
    """Parallel fidelity: the first cell's goodput alone vs with other cells of
    the file running throughout (restarted as they finish, and the reference
    started once they are under way), so it meets their setup, transfer,
    teardown and analysis as a cell in a real matrix does. The background is
    what the matrix would run beside it: --jobs - 1 cells, or by default as
    many as the admission's CPU budget takes. Prints and returns the numbers."""
    require_root()
    base = reference_cell(exp)
    admit = Admission.for_host(jobs)
    root = os.path.join(os.path.abspath(out), "fidelity", time.strftime("%Y%m%d-%H%M%S"))
    others = exp.cells[1:] or [base]
    started = 0
    # Placed on the cores as a matrix places them (supervisor.run_matrix).
    cores = CorePlacement.for_host() if backend == "mininet" else None

    meter = CpuMeter()

    def start(cell: Cell, name: str, beside: list[Child]) -> Child:
        d = os.path.join(root, name)
        now = time.monotonic()
        cpus = cores.pick(cell.cost, pending_load(as_running(beside, now)), meter.busy_by_core()) \
            if cores else None
        proc, group = spawn(cell, d, backend, cpus)
        return Child(cell, proc, time.time(), now, now + cell.timeout_s, cpus=cpus, group=group)

    def measure(tag: str, with_others: bool) -> tuple[float | None, list[int]]:
        """The reference's goodput, and how many cells ran beside it (sampled)."""
        nonlocal started
        bg: list[Child] = []
        beside: list[int] = []
        ref: Child | None = None
        try:
            def refill() -> None:
                nonlocal started
                ended = [c for c in bg if c.proc.poll() is not None]
                bg[:] = [c for c in bg if c not in ended]
                cellgroup.remove_all([c.group for c in ended if c.group is not None])
                meter.sample()
                while with_others:
                    nxt = others[started % len(others)]
                    now = time.monotonic()
                    # The reference's place is kept from the start: it counts as a cell just started until it is one.
                    ref_seen = as_running([ref], now) if ref is not None else [Running(base, 0.0)]
                    if admit.pick([nxt], ref_seen + as_running(bg, now), meter.busy_cores()) is None:
                        break
                    bg.append(start(nxt, f"{tag}-bg{started}", bg))
                    started += 1
            refill()
            # Let the background reach its transfers before the reference starts.
            t_end = time.monotonic() + (20 if with_others else 0)
            while time.monotonic() < t_end:
                refill()
                time.sleep(0.5)
            ref = start(base, f"{tag}-ref", bg)
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
            cellgroup.remove_all([c.group for c in [*bg, *([ref] if ref else [])] if c.group is not None])
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


def node_agreement(goodputs: dict[str, list[float]]) -> tuple[dict[str, float], float]:
    """Each node's median goodput, and how far apart the two medians are, in
    percent of the lower."""
    medians = {n: statistics.median(g) for n, g in goodputs.items()}
    low, high = min(medians.values()), max(medians.values())
    return medians, 100 * (high - low) / low


def node_fidelity(exp: Experiment, out: str, executor: SlurmExecutor, rounds: int = 3,
                  stream: TextIO = sys.stderr) -> dict:
    """The first cell on each of two nodes, `rounds` times (each round both
    at once, each pinned to its node): do their median goodputs agree within
    NODE_AGREEMENT_PCT of the lower? One transfer's goodput carries its
    machine's moment (a burst of other work stalls the emulator); the median
    of a few leaves out one such moment, where a mean would carry it. Writes fidelity.json beside the cells' directories;
    prints and returns the numbers."""
    require_root()
    base = reference_cell(exp)
    nodes = executor.nodes()[:2]
    if len(nodes) < 2:
        raise SatbedError(f"node fidelity needs two nodes up in {executor.describe()}, found {nodes or 'none'}")
    root = os.path.join(os.path.abspath(out), "fidelity", time.strftime("%Y%m%d-%H%M%S"))
    goodputs: dict[str, list[float]] = {n: [] for n in nodes}
    ran_on: dict[str, str | None] = {}
    for r in range(rounds):
        rows: dict[str, CellRow] = {}
        tasks = {n: [Task(base, os.path.join(root, f"r{r}-{n}", "cell"))] for n in nodes}
        # One job per node (a pinned array runs on that node only), both submitted before either is waited for.
        jobs: dict[str, str] = {}
        try:
            for n in nodes:
                jobs[n] = executor.submit(tasks[n], os.path.join(root, f"r{r}-{n}", "array"),
                                          f"fidelity-{exp.name}", "mininet", node=n)
            for n in nodes:
                executor.wait(jobs[n], tasks[n],
                              lambda cell, started, d, rc, why, n=n: rows.__setitem__(
                                  n, collect_cell(cell, started, d, rc, why)))
        except BaseException:
            for job in jobs.values():
                executor.cancel(job)
            raise
        bad = [f"{n}: {row.status} {row.error or ''}".strip() for n, row in rows.items()
               if row.status != "ok" or not row.goodput_bps]
        if bad:
            raise SatbedError(f"node fidelity: {'; '.join(bad)} (see {root})")
        for n, row in rows.items():
            goodputs[n].append(float(row.goodput_bps or 0))
            ran_on[n] = row.node
        stream.write(f"round {r + 1}/{rounds}: " + ", ".join(f"{n} {human_bps(rows[n].goodput_bps or 0)}"
                                                            for n in nodes) + "\n")
        stream.flush()
    n1, n2 = nodes
    medians, diff = node_agreement(goodputs)
    m1, m2 = medians[n1], medians[n2]
    doc = {"cell": base.label(), "kind": "nodes", "rounds": rounds, "goodputs_bps": goodputs,
           "nodes": medians, "means_bps": {n: statistics.fmean(g) for n, g in goodputs.items()},
           "ran_on": ran_on, "diff_pct": diff, "limit_pct": NODE_AGREEMENT_PCT,
           "agree": diff <= NODE_AGREEMENT_PCT, "dir": root}
    print(f"fidelity: {base.label()} on {n1} {human_bps(m1)}, on {n2} {human_bps(m2)} (medians of {rounds}): "
          f"{diff:.2f}% apart, {'within' if doc['agree'] else 'OUTSIDE'} {NODE_AGREEMENT_PCT:g}%")
    with open(os.path.join(root, "fidelity.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
    return doc
