"""The processes that run cells: spawning one (its own session, its own
directory), watching it, stopping it, and reading what it left (collect).
A child is `python3 -m satbed.worker cell DIR` or `batch DIR` (the
commands floor runs the cell, then its analysis)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field

from satbed.backends import records
from satbed.backends.clients.payload import PayloadCache
from satbed.backends.testbed import clean
from satbed.core import paths
from satbed.core.errors import SatbedError
from satbed.core.proc import REPO_ROOT
from satbed.execution.admission import Running
from satbed.execution.cellgroup import CellGroup
from satbed.model.experiment import Cell
from satbed.results.metrics import run_metrics
from satbed.results.store import CellRow

PYTHON = "/usr/bin/python3"
WORKER = "satbed.worker"    # the child's entry point (a module run with -m)
TERM_GRACE_S = 30           # a cell's teardown after SIGTERM; then SIGKILL and `clean`
CHILD_FILE = "cell.pid"     # {"pid", "start"} of the process running a cell
EXIT_FILE = "cell.exit"     # its exit status, written as it ends
NODE_FILE = "cell.node"     # {"node", ...}: the machine that ran it, when not this one (a Slurm task's)
PAYLOADS_DIR = ".payloads"  # in the results directory: the payloads its cells share while it runs


@dataclass
class Child:
    cell: Cell                # the cell it runs now (a batch's: its first not yet collected)
    proc: subprocess.Popen
    started: float            # time.time() when `cell` started
    mono: float               # time.monotonic() when `cell` started
    deadline: float
    terminated_at: float | None = None
    reason: str = ""          # timeout | interrupted
    batch: list[Cell] = field(default_factory=list)   # a batch's cells not yet collected, `cell` first
    out: str = ""             # the results directory (a batch's cells are collected from it one by one)
    cpus: frozenset[int] | None = None   # the cores it was pinned to (admission.CorePlacement); None: all
    group: CellGroup | None = None       # its control group (cellgroup), where one could be made
    cpu_mark: float = 0.0     # the group's CPU seconds when `cell` started

    def cpu_s(self) -> float | None:
        """CPU seconds the current cell's processes took so far (its group's,
        since the cell started); None without a group."""
        used = self.group.cpu_s() if self.group is not None else None
        return None if used is None else max(0.0, used - self.cpu_mark)

    def next_cell(self) -> None:
        """The batch's current cell was collected: the clock starts for the next."""
        self.batch.pop(0)
        now = time.monotonic()
        if self.batch:
            self.cpu_mark += self.cpu_s() or 0.0
            self.cell, self.started, self.mono = self.batch[0], time.time(), now
            self.deadline = now + self.cell.timeout_s
        else:
            self.deadline = now + 2 * TERM_GRACE_S    # its teardown


class Orphan:
    """A cell child that a killed matrix left running in its own session. A
    resumed matrix adopts it instead of deleting its directory and starting
    the cell again: it is watched by pid and start time, and its exit status
    is the one its worker wrote (none: it was killed)."""

    def __init__(self, pid: int, start: int, cell_dir: str):
        self.pid, self.start, self.cell_dir = pid, start, cell_dir
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and records.start_time(self.pid) != self.start:
            self.returncode = read_exit(self.cell_dir)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"cell pid {self.pid}", timeout)
            time.sleep(0.1)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if records.start_time(self.pid) == self.start:
            os.kill(self.pid, sig)


def running_child(cell_dir: str) -> tuple[int, int] | None:
    """(pid, start time) of the process still running this cell, if any."""
    try:
        with open(os.path.join(cell_dir, CHILD_FILE), encoding="utf-8") as f:
            doc = json.load(f)
        pid, start = int(doc["pid"]), int(doc["start"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (pid, start) if records.start_time(pid) == start else None


def payload_cache(out: str) -> PayloadCache:
    """The payloads the cells of the matrix in results directory `out` share."""
    return PayloadCache(os.path.join(out, PAYLOADS_DIR))


def drop_payload_cache(out: str) -> None:
    """Removed as a matrix starts and ends: no cell is running then, and a
    killed matrix's are not kept into the next."""
    shutil.rmtree(os.path.join(out, PAYLOADS_DIR), ignore_errors=True)


def write_exit(cell_dir: str, code: int) -> None:
    """A cell's exit status, whole or not at all: the parent polls for the
    file and read an empty one, just created, as a killed cell."""
    tmp = os.path.join(cell_dir, EXIT_FILE + ".tmp")
    with open(tmp, "w", encoding="ascii") as f:
        f.write(f"{code}\n")
    os.replace(tmp, os.path.join(cell_dir, EXIT_FILE))


def read_exit(cell_dir: str) -> int:
    """The exit status a cell child recorded; -9 (killed) when it recorded none."""
    try:
        with open(os.path.join(cell_dir, EXIT_FILE), encoding="ascii") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return -signal.SIGKILL


def spawn(cell: Cell, cell_dir: str, backend: str,
          cpus: frozenset[int] | None = None) -> tuple[subprocess.Popen, CellGroup | None]:
    """One cell in a child process with its own session: Ctrl-C in the
    terminal reaches only the parent, which then stops children in order.
    cpus: the cores it and everything it starts may run on (None: all).
    Returns the child and its control group (spawn_worker)."""
    if running_child(cell_dir):
        raise SatbedError(f"cell {cell.hash} is still running (never delete a live cell's directory)")
    write_cell(cell, cell_dir, backend)
    child, group = spawn_worker(["cell", cell_dir], os.path.join(cell_dir, "matrix.log"), cpus)
    # Who runs the cell, so a matrix resumed after this one was killed adopts it.
    with open(os.path.join(cell_dir, CHILD_FILE), "w", encoding="utf-8") as f:
        json.dump({"pid": child.pid, "start": records.start_time(child.pid)}, f)
    return child, group


def write_cell(cell: Cell, cell_dir: str, backend: str) -> None:
    """A fresh cell directory holding only its cell.json (what a worker runs)."""
    if os.path.isdir(cell_dir):
        shutil.rmtree(cell_dir)     # leftovers of an interrupted attempt
    os.makedirs(os.path.dirname(cell_dir), exist_ok=True)
    paths.private_dir(cell_dir)
    with open(os.path.join(cell_dir, "cell.json"), "w", encoding="utf-8") as f:
        json.dump({"params": cell.params, "repetition": cell.repetition, "config": cell.config,
                   "hash": cell.hash, "backend": backend}, f, indent=2, sort_keys=True, default=str)


def read_node(cell_dir: str) -> dict:
    """Where a cell ran, as its task recorded it ({} when it ran here)."""
    try:
        with open(os.path.join(cell_dir, NODE_FILE), encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) and isinstance(doc.get("node"), str) else {}


def spawn_worker(args: list[str], log_path: str,
                 cpus: frozenset[int] | None = None) -> tuple[subprocess.Popen, CellGroup | None]:
    """The worker process and its control group (cellgroup.CellGroup, None
    where none can be made); with cpus, pinned to those cores. Both before
    it starts anything: its processes (the namespaces' hosts, satemu, the
    PEPs, captures) inherit the affinity and the group."""
    log = open(log_path, "w", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    # Every cell alike, whatever --jobs: satemu's busy-waiting (its default
    # outside a matrix) would take the CPU cells side by side need, so no cell
    # spins unless SATBED_EMULATOR_SPIN_US says; environment.json records it.
    env.setdefault("SATBED_EMULATOR_SPIN_US", "0")
    try:
        child = subprocess.Popen([PYTHON, "-m", WORKER, *args], stdout=log,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                 start_new_session=True, cwd=REPO_ROOT)
    finally:
        log.close()
    # Popen returns once the worker has executed Python, which starts no
    # thread or process before its imports: it and all it starts run on cpus
    # and in the group. A child gone already has nothing left to pin.
    group = CellGroup.make(child.pid)
    if cpus:
        try:
            os.sched_setaffinity(child.pid, cpus)
        except ProcessLookupError:
            pass
    return child, group


def as_running(children: list[Child], now: float) -> list[Running]:
    """The running cells as the admission weighs them; the control groups
    of those still warming up are read now (their load over the last seconds)."""
    seen = []
    for ch in children:
        r = Running(ch.cell, now - ch.mono, cpus=ch.cpus)
        if ch.group is not None and r.warming:
            ch.group.sample()
            r = r._replace(cores=ch.group.cores())
        seen.append(r)
    return seen


def collect(child: Child, cell_dir: str, status_override: str | None = None, rc: int | None = None) -> CellRow:
    """The row of child's current cell; rc: the cell's own exit status (a
    batch's cells record theirs), else the child process's."""
    row = collect_cell(child.cell, child.started, cell_dir, child.proc.returncode if rc is None else rc,
                       status_override)
    row.cpu_s = child.cpu_s()
    return row


def collect_cell(cell: Cell, started: float, cell_dir: str, rc: int | None,
                 status_override: str | None = None) -> CellRow:
    """The row of a cell that ran in cell_dir, whoever ran it; rc: its exit status."""
    finished = time.time()
    # result.json with the cell's analysis.json laid over it.
    metrics = run_metrics(cell_dir)
    error = metrics.get("error")
    if status_override:
        # The runner only saw a SIGTERM; say why it came.
        status = status_override
        error = f"timed out after {cell.timeout_s:.0f}s" if status == "timeout" else status
    elif rc == 0 and not error:
        status = "limited" if metrics.get("time_limited") else "ok"
    elif rc is not None and (rc < 0 or rc >= 128):
        # Killed (SIGKILL, SIGTERM from outside): not a result; a resumed matrix redoes it.
        status, error = "interrupted", error or f"cell process killed (exit {rc})"
    else:
        status = "failed"
        if not error and rc == 3:
            error = f"integrity {metrics.get('integrity')}"
        error = error or _log_tail(cell_dir) or f"exit {rc}"
    return CellRow(hash=cell.hash, experiment="", params=cell.params, config=cell.config,
                   repetition=cell.repetition, status=status, error=error,
                   goodput_bps=metrics.get("goodput_bps"), metrics=metrics, started=started,
                   finished=finished, seconds=finished - started, estimate=cell.estimate_s,
                   node=read_node(cell_dir).get("node") or os.uname().nodename)


def _log_tail(cell_dir: str) -> str:
    """The last line its child logged: the cell's own, or its batch's."""
    log = os.path.join(cell_dir, "matrix.log")
    if not os.path.exists(log):
        try:
            with open(os.path.join(cell_dir, "cell.json"), encoding="utf-8") as f:
                log = os.path.join(str((json.load(f).get("batch") or {}).get("dir") or cell_dir), "matrix.log")
        except (OSError, ValueError, AttributeError):
            pass
    try:
        with open(log, encoding="utf-8", errors="replace") as f:
            lines = [ln.strip() for ln in f if ln.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def signal_child(child: Child, sig: int, group: bool = False) -> None:
    try:
        if group:
            os.killpg(child.proc.pid, sig)
        else:
            child.proc.send_signal(sig)
    except (ProcessLookupError, PermissionError):
        pass


def clean_leftovers() -> list[str]:
    """What SIGKILLed children left: their testbeds' records name dead owners."""
    try:
        return clean()
    except SatbedError as e:
        return [f"clean failed: {e}"]


def stop_children(children: list[Child]) -> None:
    for ch in children:
        if ch.proc.poll() is None:
            signal_child(ch, signal.SIGTERM)
    deadline = time.monotonic() + TERM_GRACE_S
    for ch in children:
        try:
            ch.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            signal_child(ch, signal.SIGKILL, group=True)
            ch.proc.wait()
