"""Pid and namespace records, so `satbed clean` can remove what a killed run
left behind, and only that.

Each live testbed owns /run/satbed/<prefix>.json, naming the owner process,
the network-namespace inode of every node and the pids it started."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from dataclasses import asdict, dataclass, field, replace

from satbed.core.files import write_json

RECORD_DIR = os.environ.get("SATBED_RECORD_DIR", "/run/satbed")
PREFIX_RE = re.compile(r"^sb[0-9a-f]{4}$")


def netns_inode(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def start_time(pid: int) -> int | None:
    """The kernel's start time of a pid: tells a recorded process from a reused pid."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


@dataclass
class RunRecord:
    prefix: str
    owner_pid: int
    owner_start: int | None
    created: float = field(default_factory=time.time)
    netns: dict[str, int] = field(default_factory=dict)         # node name -> netns inode
    pids: dict[str, int | None] = field(default_factory=dict)   # pid -> start time
    containers: list[str] = field(default_factory=list)
    root_links: list[str] = field(default_factory=list)
    run_dir: str = ""       # its payloads and keys (RUN/files) go with a killed run

    @property
    def path(self) -> str:
        return os.path.join(RECORD_DIR, self.prefix + ".json")

    def save(self) -> None:
        os.makedirs(RECORD_DIR, exist_ok=True)
        # Nodes start processes from several threads (a transfer's and the
        # samplers'): copy the mappings first (a dict copy is atomic), since
        # asdict iterating one another thread grows fails.
        doc = asdict(replace(self, netns=self.netns.copy(), pids=self.pids.copy(),
                             containers=self.containers.copy(), root_links=self.root_links.copy()))
        write_json(self.path, doc)

    def add_pid(self, pid: int) -> None:
        self.pids[str(pid)] = start_time(pid)
        self.save()

    def remove(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def owner_alive(self) -> bool:
        return start_time(self.owner_pid) is not None and start_time(self.owner_pid) == self.owner_start


def new_prefix() -> str:
    """A per-run prefix for node, interface and container names: sb + 4 hex digits."""
    os.makedirs(RECORD_DIR, exist_ok=True)
    while True:
        prefix = "sb" + os.urandom(2).hex()
        if not os.path.exists(os.path.join(RECORD_DIR, prefix + ".json")):
            return prefix


def load_all() -> list[RunRecord]:
    return [r for r in scan() if isinstance(r, RunRecord)]


def scan() -> list[RunRecord | str]:
    """Every record: parsed, or the path of one that cannot be (records are
    written whole, by rename, so an unreadable one is damaged, not half-written)."""
    found: list[RunRecord | str] = []
    if not os.path.isdir(RECORD_DIR):
        return found
    for name in sorted(os.listdir(RECORD_DIR)):
        if not name.endswith(".json") or not PREFIX_RE.match(name[:-5]):
            continue
        path = os.path.join(RECORD_DIR, name)
        try:
            with open(path, encoding="utf-8") as f:
                rec = RunRecord(**json.load(f))
            rec.owner_pid = int(rec.owner_pid)
            rec.pids = {str(int(p)): (None if st is None else int(st)) for p, st in rec.pids.items()}
            rec.netns = {str(k): int(v) for k, v in rec.netns.items()}
            found.append(rec)
        except (OSError, ValueError, TypeError, AttributeError):
            found.append(path)
    return found


def root_netns() -> int | None:
    """The root namespace's inode: pid 1's, or where /proc/1 is hidden, this
    process's own (satbed runs in the root namespace)."""
    return netns_inode(1) or netns_inode(os.getpid())


def processes_in_netns(inodes: set[int]) -> list[int]:
    root = root_netns()
    if root is None:
        return []       # cannot tell the root namespace from a node's: kill nothing
    inodes = {i for i in inodes if i and i != root}
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid() and netns_inode(int(entry)) in inodes:
            found.append(int(entry))
    return found


def kill_pids(pids: list[int], grace: float = 2.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = []
        for pid in pids:
            try:
                os.kill(pid, sig)
                alive.append(pid)
            except ProcessLookupError:
                pass
        if not alive:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(start_time(p) is not None for p in alive):
            time.sleep(0.05)
        pids = [p for p in alive if start_time(p) is not None]
