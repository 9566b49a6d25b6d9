"""Which cells may run at once: their modelled CPU cost against the cores
(Admission), checked against the measured load (CpuMeter)."""

from __future__ import annotations

import collections
import os
import time
from dataclasses import dataclass

from satbed.model.experiment import Cell

CPU_SHARE = 0.8      # of the cores, for cells; the rest for the parent and testbed setups
CELL_MEMORY = 300 << 20
# A cell modelled above this many cores may need more than one, so it is
# not pinned to one (CorePlacement).
PIN_MAX_COST = 0.5


def host_info() -> dict:
    mem = 0
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    return {"cores": os.cpu_count() or 1, "mem_available": mem, "kernel": os.uname().release,
            "hostname": os.uname().nodename}


class CpuMeter:
    """Busy cores over the last few seconds, from /proc/stat: the admission's
    check on its own model, which does not know what else the machine runs
    or how a cell's cost grows when many share the cores."""

    def __init__(self, window_s: float = 5.0):
        self.window_s = window_s
        self.samples: collections.deque = collections.deque()
        self.cores = os.cpu_count() or 1

    def sample(self) -> None:
        try:
            with open("/proc/stat", encoding="ascii") as f:
                v = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return
        now = time.monotonic()
        self.samples.append((now, sum(v) - v[3] - v[4], sum(v)))   # busy (all but idle, iowait), total
        while len(self.samples) > 2 and now - self.samples[1][0] > self.window_s:
            self.samples.popleft()

    def busy_cores(self) -> float:
        if len(self.samples) < 2:
            return 0.0
        (_, b0, t0), (_, b1, t1) = self.samples[0], self.samples[-1]
        return self.cores * (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0


@dataclass
class Admission:
    """Which pending cell may start now. `--jobs N` runs N cells whatever they
    cost. By default cells start while their summed cost stays within
    CPU_SHARE of the cores (and memory holds them): a Global Hawk matrix then
    runs its loss-bound TCP cells, long but nearly idle, beside as many
    full-rate cells as the CPU carries without slowing any of them."""
    jobs: int | None
    budget: float         # cores
    max_cells: int

    @classmethod
    def for_host(cls, jobs: int | None = None, host: dict | None = None) -> "Admission":
        host = host or host_info()
        by_mem = int(host["mem_available"] / CELL_MEMORY) if host["mem_available"] else 64
        return cls(jobs, CPU_SHARE * host["cores"], max(1, by_mem))

    def pick(self, pending: list[Cell], running: list[Cell], busy: float | None = None) -> int | None:
        """Index of the first pending cell that fits beside the running ones:
        by their modelled cost and, given the measured busy cores, by that too."""
        if not pending:
            return None
        if self.jobs is not None:
            return 0 if len(running) < self.jobs else None
        if not running:
            return 0
        if len(running) >= self.max_cells:
            return None
        used = sum(c.cost for c in running)
        for i, c in enumerate(pending):
            if used + c.cost <= self.budget and (busy is None or busy + c.cost <= self.budget):
                return i
        return None

    def parallel(self, cells: list[Cell]) -> float:
        """Cells expected at once, for the ETA."""
        if self.jobs is not None or not cells:
            return float(self.jobs or 1)
        mean = sum(c.cost for c in cells) / len(cells)
        return max(1.0, min(float(self.max_cells), len(cells), self.budget / mean))

    def describe(self) -> str:
        if self.jobs is not None:
            return f"--jobs {self.jobs}"
        return f"cells started while their cost fits {self.budget:.1f} cores (at most {self.max_cells})"

    def simulate(self, cells: list[Cell], seconds: list[float]) -> float:
        """Wall time of running cells (in this order, each taking its seconds)
        under this admission, ignoring the spawn gap."""
        pending = list(zip(cells, seconds))
        running: list[tuple[float, Cell]] = []
        now = 0.0
        while pending or running:
            while True:
                i = self.pick([c for c, _ in pending], [c for _, c in running])
                if i is None:
                    break
                c, t = pending.pop(i)
                running.append((now + t, c))
            running.sort(key=lambda r: r[0])
            now, _ = running.pop(0)
        return now


@dataclass
class CorePlacement:
    """Which core a cell's processes run on. A cell's emulator, PEPs, hosts
    and captures wake each other for every frame; on a virtual machine a
    wake-up sent to another vCPU is an interrupt between vCPUs that the
    hypervisor delivers, and on this 2-core VM a ping-pong between two
    threads took 31 us of CPU a round across cores against 2 us on one. A
    light cell therefore runs all on one core: the one whose running cells
    cost least (docs/benchmarks/matrix.md). A cell that may need more than
    one core (PIN_MAX_COST) is left free, as is every cell on one core."""
    cores: tuple[int, ...]

    @classmethod
    def for_host(cls) -> "CorePlacement":
        return cls(tuple(sorted(os.sched_getaffinity(0))))

    def pick(self, cost: float, running: list[tuple[float, frozenset[int] | None]]) -> frozenset[int] | None:
        """The core for a cell of this modelled cost beside the running
        cells (each its cost and the cores it was given); None: no pinning."""
        if len(self.cores) < 2 or cost > PIN_MAX_COST:
            return None
        load = {c: 0.0 for c in self.cores}
        for c_cost, cpus in running:
            if cpus is None:
                continue    # spread over every core: weighs on all alike
            for c in cpus & load.keys():
                load[c] += c_cost / len(cpus)
        return frozenset({min(self.cores, key=lambda c: (load[c], c))})
