"""What a result needs to describe itself: kernel, tool versions, git revision."""

from __future__ import annotations

import hashlib
import os
import platform
import re
import subprocess
from dataclasses import dataclass

from satbed import __version__
from satbed.core.proc import BIN_DIR, REPO_ROOT
from satbed.core.settings import Settings

# tool -> the arguments that make it print its version
TOOL_VERSIONS = {
    "tcpdump": ["--version"], "tcptrace": ["-v"], "nuttcp": ["-V"], "iperf3": ["--version"],
    "ssh": ["-V"], "rsync": ["--version"], "vsftpd": ["-v"], "ncftpget": ["-v"], "wget": ["--version"],
    "lighttpd": ["-v"], "tc": ["-V"], "ip": ["-V"], "nft": ["--version"], "iptables": ["--version"],
    "mnexec": ["-v"], "go": ["version"], "docker": ["--version"],
}


def _first_line(args: list[str]) -> str:
    try:
        cp = subprocess.run(args, capture_output=True, text=True, timeout=5, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return "not found"
    text = (cp.stdout or "") + (cp.stderr or "")
    for line in text.splitlines():
        if re.search(r"\d+\.\d+", line):
            return line.strip()
    return text.strip().splitlines()[0] if text.strip() else "unknown"


def git_revision() -> dict:
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", "-C", REPO_ROOT, *args], capture_output=True, text=True,
                                  timeout=5).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""
    return {"commit": git("rev-parse", "HEAD") or "unknown",
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def collect(tools: tuple[str, ...] = tuple(TOOL_VERSIONS)) -> dict:
    uname = platform.uname()
    versions = {t: _first_line([t, *TOOL_VERSIONS.get(t, ["--version"])]) for t in tools}
    for binary in ("satemu", "pepd", "saratoga", "trafficgen", "satquic"):
        path = os.path.join(BIN_DIR, binary)
        if os.path.exists(path):
            versions[binary] = "sha256:" + _sha256(path)[:16]
    return {
        "satbed": __version__,
        "git": git_revision(),
        "kernel": {"release": uname.release, "version": uname.version, "machine": uname.machine},
        "hostname": uname.node,
        "cpus": os.cpu_count(),
        # The cores the run's processes were allowed (a matrix pins a light cell to one).
        "affinity": sorted(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "tools": versions,
        "tcp_available_congestion_control": _read("/proc/sys/net/ipv4/tcp_available_congestion_control"),
        "settings": Settings.from_environ().to_dict(),
    }


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


@dataclass(frozen=True)
class CpuTimes:
    """The machine's CPU time so far (/proc/stat, all CPUs, in ticks). Steal
    is time the hypervisor gave this virtual machine's CPUs to others: on a
    shared host it delays every timer wake-up, the emulator's departures
    included, and no process here can prevent it, so a run records it."""
    busy: int
    idle: int
    steal: int

    @classmethod
    def read(cls, path: str = "/proc/stat") -> "CpuTimes | None":
        try:
            with open(path, encoding="ascii") as f:
                fields = f.readline().split()
        except OSError:
            return None
        if not fields or fields[0] != "cpu" or len(fields) < 9:
            return None
        user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
        return cls(busy=user + nice + system + irq + softirq, idle=idle + iowait, steal=steal)

    def since(self, earlier: "CpuTimes") -> dict:
        """Shares of all CPU time between earlier and now: busy, steal."""
        busy, idle, steal = self.busy - earlier.busy, self.idle - earlier.idle, self.steal - earlier.steal
        total = busy + idle + steal
        if total <= 0:
            return {}
        return {"busy_fraction": round(busy / total, 4), "steal_fraction": round(steal / total, 4)}
