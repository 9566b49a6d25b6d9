"""The Slurm executor (`satbed matrix --executor slurm`): a matrix's cells
as the tasks of one Slurm job array on a lab's nodes, instead of child
processes on this machine.

The parent writes each cell's directory (cell.json) on a filesystem every
node shares, submits the array (`sbatch --array --requeue`) and polls
`squeue`; each task runs its cell on its node as a local child would
(`python3 -m satbed.worker task DIR`: the node's own namespaces and satemu),
records the node in cell.node and its exit status in cell.exit. The parent
collects each finished cell into results.sqlite as the local supervisor
does, so resume and --retry work the same. A node lost mid-cell: Slurm
requeues the task, which clears the half-written directory before running
the cell again on another node. Ctrl-C cancels the array."""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from satbed.core import paths
from satbed.core.errors import SatbedError
from satbed.core.proc import REPO_ROOT, require_tools
from satbed.core.proc import run as proc_run
from satbed.execution.children import EXIT_FILE, NODE_FILE, PYTHON, WORKER, read_exit, write_cell
from satbed.model.experiment import Cell

TOOLS = ("sbatch", "squeue", "scancel", "sinfo")
TASKS_FILE = "tasks.json"       # an array's cell directories, by task index
JOB_FILE = "slurm.json"         # the results directory's last array: {"job", "dir"}
CALL_TIMEOUT_S = 30             # one sbatch/squeue/scancel call
GONE_GRACE_S = 15               # a task ended without cell.exit: the shared filesystem may lag behind
CANCEL_WAIT_S = 60              # after scancel, for the tasks to stop
SETTLE_S = 60                   # after the last cell, for the array to leave the queue
# squeue's states of a task that will not run again (a requeued one passes
# through REQUEUED or PENDING instead).
ENDED = {"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
         "DEADLINE", "PREEMPTED", "SPECIAL_EXIT", "REVOKED"}
# How a task that ended without its exit status is stored: a lost node or a
# cancel is no result (a resumed matrix runs the cell again), anything else failed.
ENDED_AS = {"TIMEOUT": "timeout", "CANCELLED": "interrupted", "NODE_FAIL": "interrupted",
            "PREEMPTED": "interrupted", "BOOT_FAIL": "interrupted"}
KEEP = ("cell.json", "matrix.log")    # what a requeued task keeps of its cell's directory


@dataclass(frozen=True)
class Task:
    """One cell as one array task."""
    cell: Cell
    cell_dir: str


# What the parent does with a finished cell: (cell, started, cell_dir, rc,
# status override or None).
Record = Callable[[Cell, float, str, int | None, str | None], None]


@dataclass(frozen=True)
class SlurmExecutor:
    """Where cells run: a Slurm partition (the cluster's default when empty).
    The Slurm client tools find the cluster as they do for the lab's users
    (/etc/slurm/slurm.conf, or SLURM_CONF)."""
    partition: str = ""
    poll_s: float = 1.0

    def describe(self) -> str:
        return f"Slurm partition {self.partition}" if self.partition else "Slurm's default partition"

    def nodes(self) -> list[str]:
        """The partition's nodes that can take a task now."""
        args = ["sinfo", "-h", "-N", "-o", "%N|%t"] + (["-p", self.partition] if self.partition else [])
        out = _call(args).stdout
        up = [ln.split("|")[0] for ln in out.splitlines()
              if "|" in ln and ln.split("|")[1] in ("idle", "mix", "alloc")]
        return sorted(set(up))

    def check_free(self, out: str) -> None:
        """One array per results directory: refuse while an earlier matrix's still runs."""
        prev = _read_json(os.path.join(out, JOB_FILE))
        job = str(prev.get("job", "")) if isinstance(prev, dict) else ""
        if job and any(state not in ENDED for state, _ in self.states(job).values()):
            raise SatbedError(f"Slurm job {job} of an earlier matrix on {out} is still queued or running: "
                              f"wait for it, or `scancel {job}`, then run the matrix again")

    def submit(self, tasks: list[Task], array_dir: str, name: str, backend: str, node: str = "") -> str:
        """The tasks as one array job (on `node` alone when given); its job id."""
        paths.private_dir(array_dir)
        for i, t in enumerate(tasks):
            write_cell(t.cell, t.cell_dir, backend)
            # The task's Slurm output, where the parent looks for a failed cell's last line.
            os.symlink(os.path.join(array_dir, f"{i}.log"), os.path.join(t.cell_dir, "matrix.log"))
        with open(os.path.join(array_dir, TASKS_FILE), "w", encoding="utf-8") as f:
            json.dump([t.cell_dir for t in tasks], f, indent=1)
        limit_min = math.ceil(max(t.cell.timeout_s for t in tasks) / 60) + 2
        script = os.path.join(array_dir, "task.sh")
        with open(script, "w", encoding="utf-8") as f:
            # PYTHONPATH: the node runs the repository as the submit host sees it.
            f.write(f"#!/bin/sh\nexport PYTHONPATH={REPO_ROOT}\nexec {PYTHON} -m {WORKER} task {array_dir}\n")
        args = ["sbatch", "--parsable", f"--array=0-{len(tasks) - 1}", "--requeue", "--cpus-per-task=1",
                f"--job-name=satbed-{name}"[:60], f"--chdir={REPO_ROOT}", f"--time={limit_min}",
                f"--output={os.path.join(array_dir, '%a.log')}"]
        args += ["--partition", self.partition] if self.partition else []
        args += ["--nodelist", node] if node else []
        job = _call(args + [script]).stdout.strip().split(";")[0]
        if not job.isdigit():
            raise SatbedError(f"sbatch gave no job id: {job[:80]!r}")
        return job

    def states(self, job: str) -> dict[int, tuple[str, str]]:
        """task index -> (state, node) of the array's tasks Slurm still knows."""
        cp = _call(["squeue", "-h", "-r", "-j", job, "--states=all", "-o", "%K|%T|%N"], check=False)
        if cp.returncode != 0:
            if "Invalid job id" in (cp.stderr or ""):
                return {}       # aged out of slurmctld's memory: every task ended
            raise SatbedError(f"squeue -j {job} failed: {(cp.stderr or cp.stdout).strip()[:200]}")
        out: dict[int, tuple[str, str]] = {}
        for line in cp.stdout.splitlines():
            idx, _, rest = line.partition("|")
            state, _, node = rest.partition("|")
            if idx.strip().isdigit():
                out[int(idx)] = (state.strip(), node.strip())
        return out

    def cancel(self, job: str) -> None:
        _call(["scancel", job], check=False)

    def run(self, tasks: list[Task], array_dir: str, name: str, backend: str, record: Record,
            on_poll: Callable[[], None] = lambda: None, node: str = "") -> str:
        """Submit the tasks as an array and record each as it finishes (wait).
        Returns the job id."""
        require_tools(*TOOLS)
        job = self.submit(tasks, array_dir, name, backend, node)
        out = os.path.dirname(os.path.dirname(array_dir))
        with open(os.path.join(out, JOB_FILE), "w", encoding="utf-8") as f:
            json.dump({"job": job, "dir": array_dir}, f)
        self.wait(job, tasks, record, on_poll)
        self.settle(job)
        return job

    def settle(self, job: str) -> None:
        """Wait (at most SETTLE_S) for the array to leave the queue: a task
        that wrote its cell's exit status is still RUNNING or COMPLETING for
        a moment, and the next matrix on this directory must not find it so."""
        deadline = time.monotonic() + SETTLE_S
        while any(state not in ENDED for state, _ in self.states(job).values()) and time.monotonic() < deadline:
            time.sleep(self.poll_s)

    def wait(self, job: str, tasks: list[Task], record: Record, on_poll: Callable[[], None] = lambda: None) -> None:
        """Record each of the job's tasks as it finishes; on any exception
        (Ctrl-C) cancel the job and record the unfinished as interrupted."""
        submitted = time.time()
        left = dict(enumerate(tasks))
        ended_at: dict[int, float] = {}
        try:
            while left:
                states = self.states(job)
                for i, t in list(left.items()):
                    state, _ = states.get(i, ("GONE", ""))
                    if os.path.exists(os.path.join(t.cell_dir, EXIT_FILE)):
                        record(t.cell, _started(t.cell_dir, submitted), t.cell_dir, read_exit(t.cell_dir), None)
                        del left[i]
                    elif state in ENDED or state == "GONE":
                        # Ended without its exit status: killed by its time limit, cancelled,
                        # or its worker died. Wait out the shared filesystem first.
                        ended_at.setdefault(i, time.monotonic())
                        if time.monotonic() - ended_at[i] > GONE_GRACE_S:
                            why = ENDED_AS.get(state)
                            record(t.cell, _started(t.cell_dir, submitted), t.cell_dir, 1 if why is None else None,
                                   why)
                            del left[i]
                    else:
                        ended_at.pop(i, None)
                on_poll()
                if left:
                    time.sleep(self.poll_s)
        except BaseException:
            ended_first = {i for i, t in left.items() if os.path.exists(os.path.join(t.cell_dir, EXIT_FILE))}
            self.cancel(job)
            deadline = time.monotonic() + CANCEL_WAIT_S
            while time.monotonic() < deadline and any(s not in ENDED for s, _ in self.states(job).values()):
                time.sleep(1)
            for i, t in left.items():
                rc = read_exit(t.cell_dir) if os.path.exists(os.path.join(t.cell_dir, EXIT_FILE)) else None
                # scancel signals every process of a task, so a cell under way may
                # record a failed transfer before its worker sees the signal: what
                # ended during the cancel, other than in success, the cancel ended.
                if rc is not None and (i in ended_first or rc == 0):
                    record(t.cell, _started(t.cell_dir, submitted), t.cell_dir, rc, None)
                else:
                    record(t.cell, _started(t.cell_dir, submitted), t.cell_dir, None, "interrupted")
            raise


def tasks_for(cells: list[Cell], out: str) -> list[Task]:
    return [Task(c, os.path.join(out, "cells", c.hash)) for c in cells]


def array_dir(out: str) -> str:
    return os.path.join(out, "slurm", time.strftime("%Y%m%d-%H%M%S"))


def prepare_task(array_dir: str, env: dict[str, str] | None = None) -> str:
    """On the node, before the cell runs: this task's cell directory, cleared
    of what an earlier attempt left (a requeued task's node may have died
    mid-cell), with cell.node saying where and which attempt this is."""
    env = os.environ if env is None else env
    cells = _read_json(os.path.join(array_dir, TASKS_FILE))
    try:
        cell_dir = str(cells[int(env.get("SLURM_ARRAY_TASK_ID", ""))])
    except (TypeError, ValueError, IndexError, KeyError):
        raise SatbedError(f"{array_dir}: no cell for array task {env.get('SLURM_ARRAY_TASK_ID')!r}") from None
    if not os.path.isfile(os.path.join(cell_dir, "cell.json")):
        raise SatbedError(f"{cell_dir}: no cell.json (is the results directory shared with this node?)")
    for name in os.listdir(cell_dir):
        if name not in KEEP:
            p = os.path.join(cell_dir, name)
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.unlink(p)
    doc = {"node": env.get("SLURMD_NODENAME") or socket.gethostname(), "job": env.get("SLURM_ARRAY_JOB_ID"),
           "task": env.get("SLURM_ARRAY_TASK_ID"), "restarts": int(env.get("SLURM_RESTART_COUNT") or 0),
           "started": time.time()}
    with open(os.path.join(cell_dir, NODE_FILE), "w", encoding="utf-8") as f:
        json.dump(doc, f)
    return cell_dir


def _started(cell_dir: str, default: float) -> float:
    doc = _read_json(os.path.join(cell_dir, NODE_FILE))
    v = doc.get("started") if isinstance(doc, dict) else None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def _read_json(path: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _call(args: list[str], check: bool = True):
    return proc_run(args, timeout=CALL_TIMEOUT_S, check=check)
