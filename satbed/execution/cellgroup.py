"""A running cell's own control group: the CPU of every process the cell
starts (its namespaces' hosts, satemu, the PEPs, captures and clients),
those reparented away from the worker and those already exited included.
The admission reads it while the cell warms up (admission.Admission.load).
cgroup v2, or v1's cpuacct hierarchy where that is what the kernel mounts;
made under the matrix's own group, so a group around the matrix (as
scripts/cell_cpu.py makes) still counts the cells."""

from __future__ import annotations

import collections
import os
import time

V2_ROOT = "/sys/fs/cgroup"
V1_ROOT = "/sys/fs/cgroup/cpuacct"
PREFIX = "satbed-worker-"    # and the worker's pid


def _own_group() -> tuple[str, bool] | None:
    """(directory of this process's group, whether it is cgroup v2), or None."""
    v2 = os.path.exists(os.path.join(V2_ROOT, "cgroup.controllers"))
    try:
        with open("/proc/self/cgroup", encoding="ascii") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.count(":") < 2:
            continue
        hier, controllers, path = line.split(":", 2)
        if v2 and hier == "0":
            return os.path.join(V2_ROOT, path.lstrip("/")), True
        if not v2 and "cpuacct" in controllers.split(","):
            return os.path.join(V1_ROOT, path.lstrip("/")), False
    return None


class CellGroup:
    """One cell's group, and its CPU over the last few seconds."""

    def __init__(self, path: str, v2: bool, window_s: float = 5.0):
        self.path, self.v2, self.window_s = path, v2, window_s
        self.samples: collections.deque = collections.deque()

    @classmethod
    def make(cls, pid: int) -> CellGroup | None:
        """A group for the worker `pid` and all it will start; None where
        groups cannot be made (not root, a read-only /sys/fs/cgroup in a
        container): the admission then counts the cell by its model."""
        own = _own_group()
        if own is None:
            return None
        path = os.path.join(own[0], f"{PREFIX}{pid}")
        try:
            os.mkdir(path)
        except OSError:
            return None
        group = cls(path, own[1])
        try:
            with open(os.path.join(path, "cgroup.procs"), "w", encoding="ascii") as f:
                f.write(str(pid))
        except OSError:
            group.remove()
            return None
        return group

    def cpu_s(self) -> float | None:
        try:
            if self.v2:
                with open(os.path.join(self.path, "cpu.stat"), encoding="ascii") as f:
                    return int(dict(line.split() for line in f)["usage_usec"]) / 1e6
            with open(os.path.join(self.path, "cpuacct.usage"), encoding="ascii") as f:
                return int(f.read()) / 1e9
        except (OSError, ValueError, KeyError):
            return None

    def sample(self) -> None:
        used = self.cpu_s()
        if used is None:
            return
        now = time.monotonic()
        self.samples.append((now, used))
        while len(self.samples) > 2 and now - self.samples[1][0] > self.window_s:
            self.samples.popleft()

    def cores(self) -> float | None:
        """Cores the cell kept busy over the window; None before two samples."""
        if len(self.samples) < 2:
            return None
        (t0, u0), (t1, u1) = self.samples[0], self.samples[-1]
        return (u1 - u0) / (t1 - t0) if t1 > t0 else None

    def remove(self) -> bool:
        """Remove the group once its processes are gone; False while any remain."""
        try:
            os.rmdir(self.path)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return True


def remove_all(groups: list[CellGroup], wait_s: float = 5.0) -> list[CellGroup]:
    """Remove the groups of ended cells, waiting up to wait_s for their last
    processes to be reaped; returns those still holding processes."""
    deadline = time.monotonic() + wait_s
    left = [g for g in groups if not g.remove()]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [g for g in left if not g.remove()]
    return left


def remove_leftovers() -> list[str]:
    """Empty cell groups that a killed matrix, or cells it left running,
    left behind (under this process's group and the hierarchy's root);
    returns those removed. A group holding processes is a live cell's."""
    own = _own_group()
    if own is None:
        return []
    removed = []
    root = V2_ROOT if own[1] else V1_ROOT
    for base in dict.fromkeys((own[0], root)):
        try:
            names = [n for n in os.listdir(base) if n.startswith(PREFIX)]
        except OSError:
            continue
        for name in names:
            if CellGroup(os.path.join(base, name), own[1]).remove():
                removed.append(os.path.join(base, name))
    return removed
