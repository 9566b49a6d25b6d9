"""Batches: cells whose configurations differ only in what a transfer sets
for itself (PER_TRANSFER: size, the repetition's seed, time limit,
analysis) share one testbed, run one after another by one child
(runner.run_batch): the testbed, PEPs, emulator and background traffic
stay up, and each cell still gets its own directory with its own
captures, config.json, result.json and analysis, and its window of the
shared daemons' records. The key is computed from the cells'
configurations (batch_key), not from the file; cells with a link schedule
or self-ending traffic get a testbed each, and so does every cell with
--no-batch. A failed transfer fails its cell; a failed testbed fails the
batch's remaining cells with the reason. An interrupted batch resumes at
its first cell without a result; its testbed's own files stay in
DIR/batches/ID."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess

from satbed.backends import records
from satbed.core import paths
from satbed.core.errors import SatbedError
from satbed.execution.cellgroup import CellGroup
from satbed.execution.children import CHILD_FILE, running_child, spawn_worker
from satbed.execution.estimate import SETUP_S
from satbed.model.experiment import Cell

BATCH_FILE = "batch.json"   # a batch's cells, in the order its child runs them
BATCH_S = 600               # a batch's expected length: a testbed build is then a small share of it,
                            # and the batches still spread over the jobs
# RunConfig fields a transfer sets for itself on a running testbed (runner.run_batch);
# every other field, and the seeds (the repetition), shape the testbed.
PER_TRANSFER = ("size_bytes", "seed", "time_limit_s", "analyze", "graphs", "cwnd_interval_s")


def _without_seeds(doc):
    if isinstance(doc, dict):
        return {k: _without_seeds(v) for k, v in doc.items() if k != "seed"}
    if isinstance(doc, list):
        return [_without_seeds(v) for v in doc]
    return doc


def batch_key(cell: Cell) -> str | None:
    """Cells with the same key can share one testbed: their configurations
    differ only in what a transfer sets for itself (PER_TRANSFER: the size,
    the repetition's seed, the time limit, the analysis). None for a cell
    that needs a testbed of its own: a link schedule (outage, profile) runs
    on a clock the transfer starts, and background traffic with a duration
    ends by itself."""
    cfg = cell.config
    for link in (cfg.get("link") or {}, *(cfg.get("links") or {}).values()):
        for d in (link.get("a_to_b") or {}, link.get("b_to_a") or {}):
            if d.get("outage") or d.get("profile"):
                return None
    if (cfg.get("traffic") or {}).get("duration") is not None:
        return None
    shared = _without_seeds({k: v for k, v in cfg.items() if k not in PER_TRANSFER})
    return hashlib.sha256(json.dumps(shared, sort_keys=True, default=str).encode()).hexdigest()[:16]


def plan_batches(cells: list[Cell], batch: bool = True) -> list[list[Cell]]:
    """The cells to run, grouped into batches that share a testbed (one
    cell each without batching), longest first. A batch runs repetition by
    repetition (every size of the first, then of the second, ...), so a slow
    spell of the machine or the background traffic does not fall on one
    size alone; a group longer than BATCH_S is cut into several batches."""
    groups: dict[str, list[Cell]] = {}
    for i, c in enumerate(cells):
        key = batch_key(c) if batch else None
        groups.setdefault(key or f"single-{i}", []).append(c)
    order = {c.hash: i for i, c in enumerate(cells)}
    out: list[list[Cell]] = []
    for group in groups.values():
        group.sort(key=lambda c: (c.repetition, order[c.hash]))
        chunk: list[Cell] = []
        length = 0.0
        for c in group:
            # After the first, a cell costs its transfer, not a testbed build and the traffic's head start.
            extra = max(1.0, c.estimate_s - SETUP_S - float(c.config.get("main_delay_s") or 0))
            if chunk and length + extra > BATCH_S:
                out.append(chunk)
                chunk, length = [], 0.0
            chunk.append(c)
            length += extra if len(chunk) > 1 else c.estimate_s
        if chunk:
            out.append(chunk)
    out.sort(key=lambda b: -sum(c.estimate_s for c in b))
    return out


def batch_estimate(batch: list[Cell]) -> float:
    return batch[0].estimate_s + sum(max(1.0, c.estimate_s - SETUP_S - float(c.config.get("main_delay_s") or 0))
                                     for c in batch[1:])


def spawn_batch(cells: list[Cell], out: str, backend: str,
                cpus: frozenset[int] | None = None) -> tuple[subprocess.Popen, CellGroup | None]:
    """Several cells in one child process on one testbed (runner.run_batch).
    Each cell keeps its own directory, written as it finishes (cell.exit
    last); the testbed's own files go to OUT/batches/ID. Returns the child
    and its control group (children.spawn_worker)."""
    ident = hashlib.sha256("".join(c.hash for c in cells).encode()).hexdigest()[:16]
    batch_dir = os.path.join(out, "batches", ident)
    for c in cells:
        if running_child(os.path.join(out, "cells", c.hash)):
            raise SatbedError(f"cell {c.hash} is still running (never delete a live cell's directory)")
    if running_child(batch_dir):
        raise SatbedError(f"batch {ident} is still running")
    for d in [batch_dir, *(os.path.join(out, "cells", c.hash) for c in cells)]:
        if os.path.isdir(d):
            shutil.rmtree(d)    # leftovers of an interrupted attempt
    os.makedirs(os.path.dirname(batch_dir), exist_ok=True)
    paths.private_dir(batch_dir)
    for i, c in enumerate(cells):
        cell_dir = os.path.join(out, "cells", c.hash)
        os.makedirs(os.path.dirname(cell_dir), exist_ok=True)
        paths.private_dir(cell_dir)
        with open(os.path.join(cell_dir, "cell.json"), "w", encoding="utf-8") as f:
            json.dump({"params": c.params, "repetition": c.repetition, "config": c.config, "hash": c.hash,
                       "backend": backend, "batch": {"dir": batch_dir, "index": i, "cells": len(cells)}},
                      f, indent=2, sort_keys=True, default=str)
    with open(os.path.join(batch_dir, BATCH_FILE), "w", encoding="utf-8") as f:
        json.dump({"cells": [c.hash for c in cells], "backend": backend}, f, indent=2)
    child, group = spawn_worker(["batch", batch_dir], os.path.join(batch_dir, "matrix.log"), cpus)
    # Who runs the cells, so a matrix resumed after this one was killed adopts them.
    who = {"pid": child.pid, "start": records.start_time(child.pid)}
    for d in [batch_dir, *(os.path.join(out, "cells", c.hash) for c in cells)]:
        with open(os.path.join(d, CHILD_FILE), "w", encoding="utf-8") as f:
            json.dump(who, f)
    return child, group
