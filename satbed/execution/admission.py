"""Which cells may run at once (Admission) and on which core (CorePlacement):
the load the cores measurably carry (CpuMeter), plus the modelled cost of
the cells too young for theirs to show in it."""

from __future__ import annotations

import collections
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import NamedTuple, Sequence

from satbed.model.experiment import Cell

CPU_SHARE = 0.9      # of the cores, for cells; the rest for the parent and testbed setups
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
    """Busy cores over the last few seconds, from /proc/stat, in all and per
    core: what the running cells cost, whatever the model says, and what
    else the machine runs. Busy is the wall-clock time a core was not idle:
    the busy counters are sampled by the scheduler's tick, which misses work
    done between ticks on a core that sleeps without one, and during a
    matrix on the development VM they fell 12-16 % short of the clock
    (docs/benchmarks/matrix.md); idle time is measured."""

    HZ = os.sysconf("SC_CLK_TCK")

    def __init__(self, window_s: float = 5.0):
        self.window_s = window_s
        # (monotonic time, {"cpu" or core number: idle and iowait ticks})
        self.samples: collections.deque = collections.deque()
        self.cores = os.cpu_count() or 1

    def sample(self) -> None:
        try:
            with open("/proc/stat", encoding="ascii") as f:
                idle = {}
                for line in f:
                    if not line.startswith("cpu"):
                        break
                    name, _, _, _, idle_ticks, iowait, *_ = line.split()
                    idle["cpu" if name == "cpu" else int(name[3:])] = int(idle_ticks) + int(iowait)
        except (OSError, ValueError):
            return
        now = time.monotonic()
        self.samples.append((now, idle))
        while len(self.samples) > 2 and now - self.samples[1][0] > self.window_s:
            self.samples.popleft()

    def _busy(self, key, cores: int) -> float | None:
        """Busy cores among `cores` (one core, or all as "cpu") over the window."""
        if len(self.samples) < 2:
            return None
        (t0, first), (t1, last) = self.samples[0], self.samples[-1]
        if key not in first or key not in last or t1 <= t0:
            return None
        idle = (last[key] - first[key]) / self.HZ / (t1 - t0)
        return min(float(cores), max(0.0, cores - idle))

    def busy_cores(self) -> float:
        busy = self._busy("cpu", self.cores)
        return busy if busy is not None else 0.0

    def busy_by_core(self) -> dict[int, float]:
        """Each core's busy share (0..1); empty before two samples."""
        if len(self.samples) < 2:
            return {}
        found = {k: self._busy(k, 1) for k in self.samples[-1][1] if k != "cpu"}
        return {k: v for k, v in found.items() if v is not None}


class Running(NamedTuple):
    """A running cell as the admission sees it."""
    cell: Cell
    age_s: float                  # since it started
    cores: float | None = None    # what its control group measured over the last seconds; None: unknown
    cpus: frozenset[int] | None = None   # the cores it was pinned to (CorePlacement); None: all

    @property
    def warming(self) -> bool:
        """Its steady cost does not show in the measured load yet (Cell.warmup_s)."""
        return self.age_s < self.cell.warmup_s

    @property
    def yet_to_add(self) -> float:
        """Cores it is expected to add to the measured load: while warming,
        its modelled cost less what its control group measures (all of it
        where nothing is measured); nothing once settled."""
        return max(0.0, self.cell.cost - (self.cores or 0.0)) if self.warming else 0.0


@dataclass
class Admission:
    """Which pending cell may start now. `--jobs N` runs N cells whatever they
    cost. By default a cell starts while the running cells' load (load())
    and its own modelled cost stay within CPU_SHARE of the cores, and memory
    holds them: a Global Hawk matrix then runs its loss-bound TCP cells, long
    but nearly idle, beside as many full-rate cells as the CPU carries
    without slowing any of them."""
    jobs: int | None
    budget: float         # cores
    max_cells: int

    @classmethod
    def for_host(cls, jobs: int | None = None, host: dict | None = None) -> "Admission":
        host = host or host_info()
        by_mem = int(host["mem_available"] / CELL_MEMORY) if host["mem_available"] else 64
        return cls(jobs, CPU_SHARE * host["cores"], max(1, by_mem))

    def pick(self, pending: list[Cell], running: Sequence[Running], busy: float | None = None) -> int | None:
        """Index of the first pending cell that fits beside the running ones, or None."""
        if not pending:
            return None
        if self.jobs is not None:
            return 0 if len(running) < self.jobs else None
        if not running:
            return 0
        if len(running) >= self.max_cells:
            return None
        used = self.load(running, busy)
        for i, c in enumerate(pending):
            if used + c.cost <= self.budget:
                return i
        return None

    @staticmethod
    def load(running: Sequence[Running], busy: float | None) -> float:
        """Cores the running cells take. The measured busy cores, which
        hold every cell's load as it is now, plus what each cell still in
        its warm-up (Cell.warmup_s: the testbed's build, the handshakes and
        slow start) is yet to add: its modelled cost less what its control
        group measures (all of it where nothing is measured). The model is a
        guess made once for every machine (the loss-bound TCP cells that
        open a Global Hawk matrix took less than half of what it gave them,
        docs/benchmarks/matrix.md); the measurement is this machine, now,
        with whatever else it runs. Without a measurement, the model alone."""
        if busy is None:
            return sum(r.cell.cost for r in running)
        return busy + sum(r.yet_to_add for r in running)

    def parallel(self, cells: list[Cell]) -> float:
        """Cells expected at once, for the ETA."""
        if self.jobs is not None or not cells:
            return float(self.jobs or 1)
        mean = sum(c.cost for c in cells) / len(cells)
        return max(1.0, min(float(self.max_cells), len(cells), self.budget / mean))

    def describe(self) -> str:
        if self.jobs is not None:
            return f"--jobs {self.jobs}"
        return (f"cells started while the measured load and the starting cells' modelled cost fit "
                f"{self.budget:.1f} cores (at most {self.max_cells})")

    def simulate(self, cells: list[Cell], seconds: list[float]) -> float:
        """Wall time of running cells (in this order, each taking its seconds)
        under this admission, ignoring the spawn gap."""
        pending = list(zip(cells, seconds))
        running: list[tuple[float, Cell]] = []
        now = 0.0
        while pending or running:
            while True:
                i = self.pick([c for c, _ in pending], [Running(c, 0.0) for _, c in running])
                if i is None:
                    break
                c, t = pending.pop(i)
                running.append((now + t, c))
            running.sort(key=lambda r: r[0])
            now, _ = running.pop(0)
        return now


@dataclass
class Calibration:
    """The model's costs corrected by what cells measurably took. A cell's
    cost is a guess made once for every machine (estimate.cell_cost); as
    cells finish, each one's mean load (its control group's CPU seconds over
    its wall time, its setup and analysis included) against its modelled
    cost gives a ratio for its kind: the same client, PEP, PEP options and
    BER, whose cells differ in the round-trip time the model already scales
    by. Cells not yet started, and those still warming up, then cost their
    model times the median ratio of their kind, else of their PEP, options
    and BER; a kind with no finished cell keeps the model. Shrinks the
    reserve the admission keeps for warming cells the model overrates, and
    grows it for those it underrates."""
    model: dict[str, float] = field(default_factory=dict)         # cell hash: its modelled cost
    ratios: dict[tuple, list[float]] = field(default_factory=dict)

    MIN_S = 20.0           # a shorter cell is mostly setup: no measure of its steady load
    RATIO_RANGE = (0.25, 4.0)

    @staticmethod
    def kinds(p: dict) -> tuple[tuple, tuple]:
        """A cell's kind, from its parameters, finest first."""
        coarse = (str(p.get("pep", "")), str(p.get("pep_options", "")), str(p.get("ber", "")))
        return (str(p.get("client", "")), *coarse), coarse

    def model_cost(self, cell: Cell) -> float:
        return self.model.setdefault(cell.hash, cell.cost)

    def learn(self, cell: Cell, cpu_s: float | None, seconds: float | None) -> None:
        """A finished cell's CPU seconds over its wall time."""
        self.measured(cell.params, self.model_cost(cell), cpu_s, seconds)

    def measured(self, params: dict, model: float, cpu_s: float | None, seconds: float | None) -> bool:
        """A finished cell of these parameters and this modelled cost, not
        necessarily one of this matrix (estimate.wall_estimate learns from
        stored results): whether it taught anything."""
        if cpu_s is None or not seconds or seconds < self.MIN_S or model <= 0:
            return False
        lo, hi = self.RATIO_RANGE
        ratio = min(hi, max(lo, cpu_s / seconds / model))
        for kind in self.kinds(params):
            self.ratios.setdefault(kind, []).append(ratio)
        return True

    def ratio(self, cell: Cell) -> float | None:
        for kind in self.kinds(cell.params):
            if kind in self.ratios:
                return statistics.median(self.ratios[kind])
        return None

    def recost(self, cells: Sequence[Cell]) -> None:
        """Set each cell's cost to its model times its kind's ratio."""
        for cell in cells:
            model = self.model_cost(cell)
            ratio = self.ratio(cell)
            cell.cost = model if ratio is None else model * ratio


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

    def pick(self, cost: float, running: list[tuple[float, frozenset[int] | None]],
             measured: dict[int, float] | None = None) -> frozenset[int] | None:
        """The core for a cell of this modelled cost beside the running
        cells (each its cost and the cores it was given), on top of each
        core's measured busy share where given (then the running cells'
        costs are what they are yet to add: pending_load); None: no pinning."""
        if len(self.cores) < 2 or cost > PIN_MAX_COST:
            return None
        load = {c: (measured or {}).get(c, 0.0) for c in self.cores}
        for c_cost, cpus in running:
            if cpus is None:
                continue    # spread over every core: weighs on all alike
            for c in cpus & load.keys():
                load[c] += c_cost / len(cpus)
        return frozenset({min(self.cores, key=lambda c: (load[c], c))})



def pending_load(running: Sequence[Running]) -> list[tuple[float, frozenset[int] | None]]:
    """What the warming cells are yet to add, and where, for CorePlacement.pick
    beside the measured load."""
    return [(r.yet_to_add, r.cpus) for r in running if r.yet_to_add > 0]
