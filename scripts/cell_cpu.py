#!/usr/bin/python3
"""Where a command's CPU goes, process by process (docs/benchmarks/matrix.md,
"A Global Hawk cell's CPU, process by process").

    scripts/cell_cpu.py [--interval 0.2] -- satbed matrix ONE-CELL.yaml --out DIR

The command runs in a control group of its own (cgroup v2, or v1's cpuacct
hierarchy), so the group's total counts every process it started, those that
have exited too. Each process in the group is read every --interval seconds
(/proc/PID/stat: user and system time) and filed under a name: the program,
or for Python the satbed part it runs (the CLI, a matrix cell's worker).
Processes that live shorter than the interval are missed by the samples;
the difference between the group's total and the samples' sum says how much
that was. The machine's own busy time over the command is printed beside
it (/proc/stat: the cores' wall time less idle and iowait, and what the
tick counted busy): work done in interrupt context
(timers, packets received while a core idled) is charged to no control
group, so on an otherwise quiet machine the machine's figure is the cell's
whole cost. Root only (the group is made under /sys/fs/cgroup). Exit status:
the command's; 2 for bad usage or no control group to make."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass

HZ = os.sysconf("SC_CLK_TCK")


@dataclass
class Group:
    """A control group made for the command, and how to read its CPU total."""
    path: str
    v2: bool

    @classmethod
    def make(cls) -> Group:
        name = f"satbed-cell-cpu-{os.getpid()}"
        if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            path, v2 = os.path.join("/sys/fs/cgroup", name), True
        elif os.path.isdir("/sys/fs/cgroup/cpuacct"):
            path, v2 = os.path.join("/sys/fs/cgroup/cpuacct", name), False
        else:
            raise OSError("neither cgroup v2 nor v1's cpuacct is mounted under /sys/fs/cgroup")
        os.mkdir(path)
        return cls(path, v2)

    def pids(self) -> list[int]:
        """The processes in the group and in the groups under it (a matrix
        puts each cell's worker in one of its own)."""
        found = []
        for d, _, _ in os.walk(self.path):
            try:
                with open(os.path.join(d, "cgroup.procs"), encoding="ascii") as f:
                    found += [int(p) for p in f.read().split()]
            except OSError:
                continue    # removed as its cell ended
        return found

    def cpu_s(self) -> float:
        if self.v2:
            with open(os.path.join(self.path, "cpu.stat"), encoding="ascii") as f:
                return int(dict(line.split() for line in f)["usage_usec"]) / 1e6
        with open(os.path.join(self.path, "cpuacct.usage"), encoding="ascii") as f:
            return int(f.read()) / 1e9

    def remove(self) -> None:
        """Any process still in the group goes back to the root group first."""
        root = os.path.dirname(self.path)
        for pid in self.pids():
            try:
                with open(os.path.join(root, "cgroup.procs"), "w", encoding="ascii") as f:
                    f.write(str(pid))
            except OSError:
                pass
        os.rmdir(self.path)


def name_of(pid: int) -> str | None:
    """A process's name for the table: its program, or for Python what it runs."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        with open(f"/proc/{pid}/comm", encoding="utf-8") as f:
            comm = f.read().strip()
    except OSError:
        return None
    if argv and os.path.basename(argv[0]).startswith("python3"):
        line = " ".join(argv)
        if "satbed.worker" in line:
            return "python: a matrix cell's worker"
        if "-m satbed" in line:
            return "python: satbed command"
        return "python: other"
    return comm


def cpu_of(pid: int) -> tuple[float, float] | None:
    """(user, system) seconds of a live process, its exited threads included."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) / HZ, int(fields[12]) / HZ


def machine_times() -> tuple[float, float, float]:
    """(busy, idle, steal) CPU seconds of the whole machine since boot, from
    /proc/stat. Busy is sampled by the scheduler's tick, which misses work
    done between ticks on a core that idles without one (NO_HZ); idle is
    measured, so wall time less idle is the figure to trust where they differ."""
    with open("/proc/stat", encoding="ascii") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal (guest time is inside user)
    return (v[0] + v[1] + v[2] + v[5] + v[6]) / HZ, (v[3] + v[4]) / HZ, v[7] / HZ


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=float, default=0.2, help="seconds between samples (default 0.2)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command or not args.interval > 0:
        parser.print_usage(sys.stderr)
        return 2
    try:
        group = Group.make()
    except OSError as e:
        print(f"cell_cpu: cannot make a control group: {e}", file=sys.stderr)
        return 2
    seen: dict[int, tuple[str, float, float]] = {}
    started = time.monotonic()
    busy0, idle0, steal0 = machine_times()
    try:
        # The child joins the group before it executes the command.
        proc = subprocess.Popen(command, preexec_fn=lambda: _join(group.path))
        try:
            while proc.poll() is None:
                for pid in group.pids():
                    cpu = cpu_of(pid)
                    name = seen[pid][0] if pid in seen else name_of(pid)
                    if cpu is not None and name is not None:
                        seen[pid] = (name, *cpu)
                time.sleep(args.interval)
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGINT)
            proc.wait()
        wall = time.monotonic() - started
        total = group.cpu_s()
        busy1, idle1, steal1 = machine_times()
    finally:
        group.remove()
    table: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for name, user, system in seen.values():
        row = table[name]
        row[0] += user
        row[1] += system
        row[2] += 1
    sampled = sum(u + s for u, s, _ in table.values())
    print(f"wall {wall:.1f} s; CPU {total:.2f} s in all, {sampled:.2f} s in the samples "
          f"({total - sampled:.2f} s in processes shorter than {args.interval:g} s)")
    own = os.times()
    not_idle = (os.cpu_count() or 1) * wall - (idle1 - idle0)
    print(f"the machine: {not_idle:.2f} CPU s not idle ({busy1 - busy0:.2f} s counted busy by the tick), "
          f"{steal1 - steal0:.2f} s stolen, over {os.cpu_count()} cores; "
          f"this sampler's own share {own.user + own.system:.2f} s")
    print(f"{'CPU s':>8} {'user':>7} {'system':>7} {'procs':>5}  process")
    for name, (user, system, n) in sorted(table.items(), key=lambda kv: -(kv[1][0] + kv[1][1])):
        print(f"{user + system:8.2f} {user:7.2f} {system:7.2f} {int(n):5d}  {name}")
    return proc.returncode if proc.returncode >= 0 else 128 - proc.returncode


def _join(group: str) -> None:
    with open(os.path.join(group, "cgroup.procs"), "w", encoding="ascii") as f:
        f.write(str(os.getpid()))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
