"""`satbed matrix`'s parent: cells (and batches of them) run in parallel,
each in its own child process and its own prefixed testbed, admitted by
the measured load and their cost (admission), stopped at their time limit, and recorded in
DIR/results.sqlite. A second run of the same file skips finished cells; a
killed matrix's children still running are adopted by the next. Cells whose
PEP this machine lacks (its adapter's `available`, pep/CONTRACT.md) are
stored as unavailable, with the adapter's reason, and not started."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import sys
import time
from collections import Counter
from typing import TextIO

from satbed.backends import pepnodes
from satbed.core import paths, signals
from satbed.core.errors import SatbedError
from satbed.core.proc import require_root
from satbed.core.units import human_bps
from satbed.execution import cellgroup
from satbed.execution.admission import Admission, Calibration, CorePlacement, CpuMeter, host_info, pending_load
from satbed.execution.batches import plan_batches, spawn_batch
from satbed.execution.cellgroup import CellGroup
from satbed.execution.children import (EXIT_FILE, TERM_GRACE_S, Child, Orphan, as_running, clean_leftovers,
                                       collect, collect_cell, drop_payload_cache, read_exit, running_child,
                                       signal_child, spawn, stop_children)
from satbed.execution.estimate import fmt_s
from satbed.execution.slurm import SlurmExecutor, array_dir, tasks_for
from satbed.model import peps, topology
from satbed.model.config import PepPlacement
from satbed.model.experiment import Cell, Experiment
from satbed.results.store import DONE, MEASURED, UNAVAILABLE, CellRow, Store

SPAWN_GAP_S = 1.0           # between cell starts: testbed setups are CPU-bound bursts of ~1.5 s


class Progress:
    """A progress line on stderr: redrawn in place on a terminal, one line per
    finished cell otherwise (logs and pipes)."""

    def __init__(self, total: int, parallel: float, stream: TextIO = sys.stderr):
        self.total, self.parallel, self.stream = total, parallel, stream
        self.tty = stream.isatty()
        self.started = time.monotonic()
        self.done = self.ok = self.failed = 0
        self.actual = self.expected = 0.0

    def finished(self, cell: Cell, status: str, seconds: float, note: str = "") -> None:
        self.done += 1
        self.ok += status == "ok"
        self.failed += status != "ok"
        self.actual += seconds
        self.expected += cell.estimate_s
        # On a terminal the line replaces the bar, which the next draw() puts back below it.
        clear = "\r\033[K" if self.tty else ""
        self.stream.write(f"{clear}[{self.done}/{self.total}] {status:<7} "
                          f"{seconds:6.1f}s {cell.label()} {note}  (ETA {fmt_s(self._eta)})\n")
        self.stream.flush()

    def draw(self, running: list[tuple[Cell, float]], pending: list[Cell]) -> None:
        now = time.monotonic()
        ratio = self.actual / self.expected if self.expected else 1.0
        left = ratio * sum(c.estimate_s for c in pending) + sum(
            max(0.0, ratio * c.estimate_s - (now - t)) for c, t in running)
        self._eta = left / max(1.0, self.parallel)
        if not self.tty:
            return
        width = 30
        fill = int(width * self.done / self.total) if self.total else width
        line = (f"\r[{'#' * fill}{'.' * (width - fill)}] {self.done}/{self.total} ok {self.ok} "
                f"failed {self.failed} running {len(running)} elapsed {fmt_s(now - self.started)} "
                f"ETA {fmt_s(self._eta)} ")
        self.stream.write(line)
        self.stream.flush()

    _eta = 0.0

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()



def run_matrix(exp: Experiment, out: str, jobs: int | None = None, backend: str = "mininet",
               retry: bool = False, stream=sys.stderr, batch: bool = True,
               executor: SlurmExecutor | None = None) -> dict:
    """Run every cell not already done; returns counts. Raises KeyboardInterrupt
    after stopping all children when interrupted. With an executor the cells
    run as its tasks (one cell each) instead of children of this process."""
    require_root()
    if executor is not None and (jobs is not None or backend != "mininet"):
        raise SatbedError("--executor slurm runs each cell on a node's namespaces, one per task its node "
                          "offers: no --jobs, no --backend")
    if jobs is not None and jobs < 1:
        raise SatbedError(f"--jobs must be at least 1, got {jobs}")
    if backend == "ansible":
        # One set of machines: two cells at once would share its bridges, emulator and PEPs.
        if jobs not in (None, 1):
            raise SatbedError(f"--backend ansible runs one cell at a time on its machines: --jobs 1, not {jobs}")
        jobs = 1
    out = paths.results_dir(out)    # absolute: cells run from the repository root
    os.makedirs(os.path.join(out, "cells"), exist_ok=True)
    # One matrix per results directory: two would run the same cells twice.
    lock = open(os.path.join(out, ".lock"), "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise SatbedError(f"another `satbed matrix` is running with --out {out}") from None
    try:
        drop_payload_cache(out)
        return _run_locked(exp, out, jobs, backend, retry, stream, batch, executor)
    finally:
        drop_payload_cache(out)
        lock.close()


def _run_locked(exp: Experiment, out: str, jobs: int | None, backend: str, retry: bool, stream,
                batch: bool = True, executor: SlurmExecutor | None = None) -> dict:
    host = host_info()
    if executor is not None:
        executor.check_free(out)
    with Store(os.path.join(out, "results.sqlite")) as store:
        todo, skipped, adopted = [], 0, []
        calibration = Calibration()
        for cell in exp.cells:
            row = store.get(cell.hash)
            if row and row.status in DONE:
                calibration.learn(cell, row.cpu_s, row.seconds)
            if row and (row.status in MEASURED or (row.status in DONE and not retry)):
                skipped += 1
            elif executor is None and (live := running_child(os.path.join(out, "cells", cell.hash))):
                adopted.append((cell, live))
            else:
                todo.append(cell)
        # Never started, stored with the reason: the next run asks again.
        missing = unavailable(todo, backend) if executor is None else {}
        for cell in todo:
            if cell.hash in missing:
                store.put(CellRow(hash=cell.hash, experiment=exp.name, params=cell.params, config=cell.config,
                                  repetition=cell.repetition, status=UNAVAILABLE, error=missing[cell.hash],
                                  estimate=cell.estimate_s, attempts=0))
        todo = [c for c in todo if c.hash not in missing]
        calibration.recost(todo)
        admit = Admission.for_host(jobs, host)
        meter = CpuMeter()
        # Pinning needs every process of a cell to inherit the worker's cores:
        # so on namespaces, not in containers (dockerd starts those).
        cores = CorePlacement.for_host() if backend == "mininet" else None
        # Cells sharing a testbed run as one batch; the longest batches start first,
        # so the long ones do not end the run alone.
        pending = plan_batches(todo, batch)
        parallel = admit.parallel(todo)
        run_id = store.begin_run(exp.name, os.path.abspath(exp.file), jobs or 0, len(exp.cells), skipped, host,
                                 reference=exp.reference)
        batched = sum(len(b) for b in pending if len(b) > 1) if executor is None else 0
        stream.write(f"satbed matrix: {exp.name}: {len(exp.cells)} cells, {skipped} already done, "
                     f"{len(todo)} to run"
                     + (f", {len(missing)} unavailable here (not run: their PEP is not installed)" if missing else "")
                     + f" ({admit.describe() if executor is None else executor.describe()}"
                     + (f"; {batched} of them in {sum(len(b) > 1 for b in pending)} batches sharing a testbed"
                        if batched else "") + f") into {out}\n")
        for reason, n in Counter(missing.values()).most_common():
            stream.write(f"satbed matrix: {n} cell(s) unavailable: {reason}\n")
        stream.flush()
        progress = Progress(len(todo) + len(adopted), parallel, stream)
        running: dict[str, Child] = {}
        for ch in _adopt(adopted, out):
            stream.write(f"satbed matrix: cell {ch.cell.hash} is still running from a killed matrix "
                         f"(pid {ch.proc.pid}): waiting for it\n")
            running[ch.cell.hash] = ch
        counts = {"ok": 0, "limited": 0, "failed": 0, "timeout": 0, "skipped": skipped}
        if missing:
            counts[UNAVAILABLE] = len(missing)
        outcome = "interrupted"
        last_spawn = -SPAWN_GAP_S
        emptied: list[CellGroup] = []     # the groups of ended cells, removed once their last process is gone
        cellgroup.remove_leftovers()        # of a killed matrix's cells, once they ended

        def record(ch: Child, cell_dir: str, override: str | None = None, rc: int | None = None) -> None:
            put(ch.cell, collect(ch, cell_dir, override, rc))

        def put(cell: Cell, row: CellRow) -> None:
            row.experiment = exp.name
            store.put(row)
            if row.status in DONE:
                calibration.learn(cell, row.cpu_s, row.seconds)
                calibration.recost([c for b in pending for c in b] + [ch.cell for ch in running.values()])
            counts[row.status] = counts.get(row.status, 0) + 1
            note = human_bps(row.goodput_bps) if row.goodput_bps else (
                f"rtt {row.metrics['rtt_ms_avg']:.1f} ms" if "rtt_ms_avg" in row.metrics else "")
            if row.status == "limited":
                note += (f" ({row.metrics.get('bytes', 0) / 1e6:.1f} of "
                         f"{row.metrics.get('bytes_expected', 0) / 1e6:.0f} MB in the time limit)")
            elif row.status != "ok":
                note = f"{note} {row.error or ''}".strip()
            progress.finished(cell, row.status, row.seconds or 0.0, note[:160])

        if executor is not None:
            try:
                if todo:
                    executor.run(tasks_for(todo, out), array_dir(out), exp.name, backend,
                                 lambda cell, started, d, rc, why: put(cell, collect_cell(cell, started, d, rc, why)),
                                 on_poll=lambda: progress.draw([], []))
                outcome = "complete"
            finally:
                progress.close()
                store.end_run(run_id, outcome)
            stream.write(f"satbed matrix: {exp.name} complete in {fmt_s(time.monotonic() - progress.started)}; "
                         f"`satbed report {out}` writes {os.path.join(out, 'report.html')}\n")
            return counts

        def collect_finished(ch: Child) -> None:
            """A batch's cells that wrote their exit status, in order."""
            while ch.batch:
                cell_dir = os.path.join(out, "cells", ch.cell.hash)
                if not os.path.exists(os.path.join(cell_dir, EXIT_FILE)):
                    return
                record(ch, cell_dir, rc=read_exit(cell_dir))
                ch.next_cell()

        try:
            while pending or running:
                meter.sample()
                now = time.monotonic()
                seen = as_running(list(running.values()), now)
                pick = admit.pick([b[0] for b in pending], seen, meter.busy_cores())
                if pick is not None and now - last_spawn >= SPAWN_GAP_S:
                    last_spawn = now
                    cells = pending.pop(pick)
                    cpus = cores.pick(cells[0].cost, pending_load(seen), meter.busy_by_core()) if cores else None
                    if len(cells) == 1:
                        proc, group = spawn(cells[0], os.path.join(out, "cells", cells[0].hash), backend, cpus)
                        ch = Child(cells[0], proc, time.time(), now, now + cells[0].timeout_s, cpus=cpus,
                                   group=group)
                    else:
                        proc, group = spawn_batch(cells, out, backend, cpus)
                        ch = Child(cells[0], proc, time.time(), now, now + cells[0].timeout_s,
                                   batch=list(cells), out=out, cpus=cpus, group=group)
                    running[cells[0].hash] = ch
                for h, ch in list(running.items()):
                    collect_finished(ch)
                    now = time.monotonic()
                    if ch.proc.poll() is None:
                        if ch.terminated_at is None and now > ch.deadline:
                            ch.terminated_at, ch.reason = now, "timeout"
                            signal_child(ch, signal.SIGTERM)
                        elif ch.terminated_at is not None and now > ch.terminated_at + TERM_GRACE_S:
                            signal_child(ch, signal.SIGKILL, group=True)
                            ch.proc.wait()
                        else:
                            continue
                    if ch.proc.returncode is None:
                        continue
                    if ch.reason:
                        # The group may hold stragglers (a capture, a server) of a killed cell.
                        signal_child(ch, signal.SIGKILL, group=True)
                        clean_leftovers()
                    collect_finished(ch)
                    if not ch.out:
                        record(ch, os.path.join(out, "cells", h), ch.reason or None)
                    elif ch.batch:
                        # The batch ended before this cell wrote its status: it timed out, or
                        # the child died. The cells after it run again as a batch of their own.
                        record(ch, os.path.join(out, "cells", ch.cell.hash), ch.reason or None)
                        ch.next_cell()
                        if ch.batch:
                            pending.insert(0, list(ch.batch))
                    del running[h]
                    if ch.group is not None:
                        emptied.append(ch.group)
                emptied[:] = [g for g in emptied if not g.remove()]
                progress.draw([(c.cell, c.mono) for c in running.values()], [c for b in pending for c in b])
                time.sleep(0.2)
            outcome = "complete"
        except BaseException:
            # Ctrl-C or SIGTERM: stop children in order so each tears its testbed down.
            with signals.handled(signal.SIG_IGN, signal.SIGINT, signal.SIGTERM):
                try:
                    progress.close()
                    stream.write(f"satbed matrix: stopping {len(running)} running cell(s)...\n")
                    stream.flush()
                    stop_children(list(running.values()))
                    for h, ch in running.items():
                        collect_finished(ch)
                        if not ch.out:
                            record(ch, os.path.join(out, "cells", h), "interrupted")
                        elif ch.batch:
                            # Only the cell under way is interrupted; the batch's later cells never started.
                            record(ch, os.path.join(out, "cells", ch.cell.hash), "interrupted")
                    clean_leftovers()
                    cellgroup.remove_all(emptied + [c.group for c in running.values() if c.group is not None])
                finally:
                    store.end_run(run_id, outcome)
            raise
        progress.close()
        cellgroup.remove_all(emptied)
        store.end_run(run_id, outcome)
        stream.write(f"satbed matrix: {exp.name} complete in {fmt_s(time.monotonic() - progress.started)}; "
                     f"`satbed report {out}` writes {os.path.join(out, 'report.html')}\n")
    return counts


def unavailable(cells: list[Cell], backend: str) -> dict[str, str]:
    """cell hash -> why a PEP it names cannot run on this machine (its
    adapter's one line). Each PEP with its options is asked once: the options
    may name the program (bin=). Only namespace nodes run the repository's
    adapters here; an image carries its program, and Ansible's machines are
    elsewhere, so those are not asked."""
    if backend != "mininet":
        return {}
    answers: dict[tuple[str, str], str] = {}
    pep_nodes: dict[str, list[str]] = {}
    out: dict[str, str] = {}
    for cell in cells:
        cfg = cell.run_config()
        key = json.dumps([cfg.topology, cfg.topology_overrides], sort_keys=True, default=str)
        if key not in pep_nodes:
            try:
                spec = topology.load(cfg.topology, cfg.topology_overrides)
                pep_nodes[key] = [t.name for t in spec.of_kind("pep")]
            except SatbedError:
                pep_nodes[key] = []     # the cell fails on it when it runs, saying why
        # What runs on each PEP node, as the session places it: `pep` where
        # no placement names the node (a pep every node's placement overrides
        # is not asked about).
        placed = [cfg.peps.get(n, PepPlacement(cfg.pep, cfg.pep_options)) for n in pep_nodes[key]]
        wanted = [(p.name, p.options) for p in placed] or [(cfg.pep, cfg.pep_options)]
        reasons: list[str] = []
        for name, options in wanted:
            if peps.is_image(name):
                continue
            if (name, options) not in answers:
                answers[name, options] = pepnodes.available(name, options)
            why = answers[name, options]
            if why and why not in reasons:
                reasons.append(why)
        if reasons:
            out[cell.hash] = "; ".join(reasons)
    return out


def _adopt(adopted: list[tuple[Cell, tuple[int, int]]], out: str) -> list[Child]:
    """Children a killed matrix left running, one per process: a batch's
    cells are collected from it in its order as they finish."""
    by_pid: dict[tuple[int, int], list[tuple[int, Cell, str]]] = {}
    for cell, live in adopted:
        cell_dir = os.path.join(out, "cells", cell.hash)
        try:
            with open(os.path.join(cell_dir, "cell.json"), encoding="utf-8") as f:
                b = json.load(f).get("batch") or {}
        except (OSError, ValueError):
            b = {}
        by_pid.setdefault(live, []).append((int(b.get("index", 0)), cell, str(b.get("dir") or "")))
    children = []
    for (pid, start), members in by_pid.items():
        members.sort(key=lambda m: m[0])
        first, batch_dir = members[0][1], members[0][2]
        now = time.monotonic()
        if batch_dir:
            children.append(Child(first, Orphan(pid, start, batch_dir), time.time(), now, now + first.timeout_s,
                                  batch=[m[1] for m in members], out=out))
        else:
            children.append(Child(first, Orphan(pid, start, os.path.join(out, "cells", first.hash)), time.time(),
                                  now, now + first.timeout_s))
    return children


def rows_of(exp: Experiment, out: str) -> list[CellRow]:
    """The stored rows of this experiment's cells (a results directory may hold others)."""
    path = os.path.join(os.path.abspath(out), "results.sqlite")
    if not os.path.exists(path):
        return []
    with Store(path, read_only=True) as store:
        found = {r.hash: r for r in store.cells()}
    return [found[c.hash] for c in exp.cells if c.hash in found]
