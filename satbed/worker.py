"""A matrix's child process: `python3 -m satbed.worker cell DIR` runs the
cell whose cell.json is in DIR, `batch DIR` the batch whose batch.json is,
`task DIR` the cell of a Slurm array task (DIR: the array's, execution/slurm.py);
each cell's capture is analysed after its transfer (analysis/, above the
execution floor, which only runs). SIGTERM unwinds like Ctrl-C so the
runner's teardown removes the testbed."""

from __future__ import annotations

import os
import signal
import sys

from analysis import report
from satbed.core import crash, signals
from satbed.execution import cellrun, slurm
from satbed.execution.children import clean_leftovers
from satbed.execution.session import describe
from satbed.model.config import RunConfig

USAGE = "usage: python3 -m satbed.worker cell DIR | batch DIR | task DIR (internal; use `satbed matrix`)"


def analyze(run_dir: str, cfg: RunConfig) -> None:
    """tcptrace metrics of the run's captures and, with graphs, the graphs
    and report.html. Without graphs (a matrix cell: drawing a 100 MB
    transfer's graphs costs more CPU than its metrics) the stored tcptrace
    output and captures let `satbed report` draw them later. A broken
    analysis must not lose the run: it is said, and the run stands."""
    try:
        report.analyze_run(run_dir, graphs=False)
        if cfg.graphs:
            report.write_report(run_dir)
    except Exception as e:
        print(f"satbed: analysis of {run_dir} failed: {describe(e)}", file=sys.stderr, flush=True)


def _terminate(signum, frame):
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("cell", "batch", "task"):
        print(USAGE, file=sys.stderr)
        return 2
    with signals.handled(_terminate, signal.SIGTERM, signal.SIGINT):
        if argv[0] == "task":
            return crash.guarded(lambda: _task(argv[1]), lambda: None)
        run = cellrun.run_cell if argv[0] == "cell" else cellrun.run_batch
        # The guard: one line (exit 2, or 70 for a bug with its traceback saved in
        # the cell's directory, where the parent looks), never a traceback.
        return crash.guarded(lambda: run(argv[1], analyze),
                             lambda: argv[1] if os.path.isdir(argv[1]) else None)


def _task(array_dir: str) -> int:
    """A Slurm array task on its node: what a killed attempt left on this
    node goes first (its testbed, its half-written directory)."""
    clean_leftovers()
    cell_dir = slurm.prepare_task(array_dir)
    return crash.guarded(lambda: cellrun.run_cell(cell_dir, analyze), lambda: cell_dir)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
