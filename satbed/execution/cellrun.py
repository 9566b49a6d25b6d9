"""The child side of a matrix: one cell (runner.run into its directory) or a
batch (runner.run_batch over its cells), then each cell's after_run (the
worker's analysis) and its exit status (cell.exit, written last: a cell
without it was killed before it finished). Exit statuses: 0 measured, 2 the
run failed, 3 the transfer's integrity check failed."""

from __future__ import annotations

import concurrent.futures
import json
import os
import sys
import threading
from collections.abc import Callable

from satbed.core.errors import SatbedError, error_line
from satbed.execution import runner
from satbed.execution.batches import BATCH_FILE
from satbed.execution.children import payload_cache, write_exit
from satbed.model.config import RunConfig

# What runs after a cell's transfer, with the cell's directory and
# configuration (the worker: its analysis). It must not raise for a broken
# analysis: the run is measured whatever the analysis says.
AfterRun = Callable[[str, RunConfig], None]


def _wants_analysis(cfg: RunConfig) -> bool:
    return cfg.analyze and cfg.captures != "none"


def _status(result: dict) -> int:
    if result.get("error"):
        return 2
    return 0 if result.get("integrity", "ok") in ("ok", "incomplete") else 3


def _read_cell(cell_dir: str) -> dict:
    with open(os.path.join(cell_dir, "cell.json"), encoding="utf-8") as f:
        return json.load(f)


def _results_dir(cell_or_batch_dir: str) -> str:
    """OUT of OUT/cells/HASH or OUT/batches/ID."""
    return os.path.dirname(os.path.dirname(cell_or_batch_dir))


def run_cell(cell_dir: str, after_run: AfterRun) -> int:
    """One cell into its directory, then after_run at the lowest priority
    (tcptrace, and any graphs, take longer than a small transfer: niced, they
    only use CPU the other cells' transfers leave idle)."""
    doc = _read_cell(cell_dir)
    try:
        cfg = RunConfig.from_dict(doc["config"])
        _, result = runner.run(cfg, cell_dir, run_dir=cell_dir, backend=doc.get("backend", "mininet"),
                               payloads=payload_cache(_results_dir(cell_dir)))
        if _wants_analysis(cfg):
            os.nice(19)
            after_run(cell_dir, cfg)
        rc = _status(result)
    except SatbedError as e:
        rc = error_line(e)
    write_exit(cell_dir, rc)
    return rc


def run_batch(batch_dir: str, after_run: AfterRun) -> int:
    """A batch's cells on one testbed, each cell's after_run beside the next
    transfer (one worker thread at the lowest priority: a transfer mostly
    waits on the satellite's round trips, and a short cell's analysis took
    as long as its transfer), each cell's exit status as its after_run ends."""
    rc = 0
    analyst = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="analysis",
                                                    initializer=_lowest_priority)
    try:
        with open(os.path.join(batch_dir, BATCH_FILE), encoding="utf-8") as f:
            doc = json.load(f)
        out = _results_dir(batch_dir)
        cell_dirs = [os.path.join(out, "cells", h) for h in doc["cells"]]
        cfgs = [RunConfig.from_dict(_read_cell(d)["config"]) for d in cell_dirs]

        def finish(i: int, result: dict) -> None:
            code = _status(result)
            if code != 2 and _wants_analysis(cfgs[i]):
                after_run(cell_dirs[i], cfgs[i])
            if code == 2:
                print(f"satbed: cell {doc['cells'][i]}: {result.get('error')}", file=sys.stderr, flush=True)
            write_exit(cell_dirs[i], code)

        transfers = runner.run_batch(cfgs, cell_dirs, batch_dir, backend=doc.get("backend", "mininet"),
                                     payloads=payload_cache(out))
        pending = []
        try:
            for i, result in transfers:
                pending.append(analyst.submit(finish, i, result))
        finally:
            transfers.close()       # tears the testbed down
        for p in pending:
            p.result()
    except SatbedError as e:
        rc = error_line(e)
    finally:
        # Interrupted: the analyses not begun are dropped (their cells have
        # no exit status and run again on resume); the one under way ends.
        analyst.shutdown(wait=True, cancel_futures=True)
    write_exit(batch_dir, rc)
    return rc


def _lowest_priority() -> None:
    """The calling thread (and what it starts: tcptrace) at nice 19; on
    Linux a thread's nice value is its own."""
    os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
