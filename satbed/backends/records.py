"""Pid and namespace records, so `satbed clean` can remove what a killed run
left behind, and only that.

Each live testbed owns /run/satbed/<prefix>.json, naming the owner process,
the network-namespace inode of every node and the pids it started. Only
satbed writes here: no container node mounts this directory. A run's
emulator control sockets live in /run/satbed/runs/<prefix>/<node>/ (0700),
and only that node's directory is mounted into its emulator container.

`satbed clean` (host root) still reads a record as untrusted input: it acts
only on what proves to be the run's (Suspect, owned_netns, pid_is_runs,
run_dir_problem) and reports the rest in one line."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import time
from dataclasses import asdict, dataclass, field, replace

from satbed.core.files import write_json

RECORD_DIR = os.environ.get("SATBED_RECORD_DIR", "/run/satbed")
PREFIX_RE = re.compile(r"^sb[0-9a-f]{4}$")
# In every run directory satbed made: the prefix of the testbed writing it.
# `satbed clean` removes a killed run's payloads and keys only where it finds one.
RUN_MARKER = ".satbed-run"
# In the environment of every process a run starts in its nodes: what proves
# to `satbed clean` that a namespace whose node shell is gone was the run's.
RUN_ENV = "SATBED_RUN"


def netns_inode(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


class HeldNetns:
    """A node's network namespace, held open from the node's start to its
    testbed's teardown. The kernel gives a freed namespace's inode number to
    the next namespace made (seen here within a second), so an inode names a
    run's namespace only while the run holds it: without the hold, the
    teardown's sweep for stray processes could reach a namespace another run
    had just made with that number, and kill its node."""

    def __init__(self, pid: int):
        self.fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        self.inode = os.fstat(self.fd).st_ino

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


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
        remove_control_dirs(self.prefix)

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


@dataclass(frozen=True)
class Suspect:
    """A record file satbed did not write as it stands: left alone, reported."""
    path: str
    reason: str

    def line(self) -> str:
        return f"{os.path.basename(self.path)}: left alone: {self.reason}"


def scan() -> list[RunRecord | str | Suspect]:
    """Every record: parsed, or the path of one that cannot be (records are
    written whole, by rename, so an unreadable one is damaged, not half-written),
    or a Suspect: one that is not a plain file of ours or names another prefix."""
    found: list[RunRecord | str | Suspect] = []
    if not os.path.isdir(RECORD_DIR):
        return found
    for name in sorted(os.listdir(RECORD_DIR)):
        if not name.endswith(".json") or not PREFIX_RE.match(name[:-5]):
            continue
        path = os.path.join(RECORD_DIR, name)
        problem = file_problem(path)
        if problem:
            found.append(Suspect(path, problem))
            continue
        try:
            with open(path, encoding="utf-8") as f:
                rec = RunRecord(**json.load(f))
            rec.owner_pid = int(rec.owner_pid)
            rec.pids = {str(int(p)): (None if st is None else int(st)) for p, st in rec.pids.items()}
            rec.netns = {str(k): int(v) for k, v in rec.netns.items()}
            rec.containers = [c for c in rec.containers if isinstance(c, str)]
            rec.run_dir = rec.run_dir if isinstance(rec.run_dir, str) else ""
            if rec.prefix != name[:-5]:
                found.append(Suspect(path, f"it names prefix {str(rec.prefix)[:16]!r}, not its file's"))
                continue
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


# ---------------------------------------------------------------- control sockets

def control_dir(prefix: str, node: str) -> str:
    """Where a run's emulator node keeps its control socket: the only part of
    /run/satbed its container sees."""
    return os.path.join(RECORD_DIR, "runs", prefix, node)


def make_control_dir(prefix: str, node: str) -> str:
    """control_dir, created 0700 at every level whatever the umask."""
    path = control_dir(prefix, node)
    for d in (os.path.join(RECORD_DIR, "runs"), os.path.dirname(path), path):
        os.makedirs(d, exist_ok=True)
        os.chmod(d, 0o700)
    return path


def remove_control_dirs(prefix: str) -> None:
    root = os.path.join(RECORD_DIR, "runs", prefix)
    if PREFIX_RE.match(prefix) and os.path.isdir(root) and not os.path.islink(root):
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------- vetting

def file_problem(path: str, kind: int = stat.S_IFREG) -> str:
    """'' when path is a file (or directory) of satbed's: of that kind, not a
    symbolic link, owned by this user, writable by no one else."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return f"{path}: {e.strerror}"
    if stat.S_IFMT(st.st_mode) != kind:
        return f"{path} is not a {'directory' if kind == stat.S_IFDIR else 'plain file'}"
    if st.st_uid != os.geteuid():
        return f"{path} is owned by uid {st.st_uid}"
    if st.st_mode & 0o022:
        return f"{path} is writable by others (mode {st.st_mode & 0o777:o})"
    return ""


def mark_run_dir(run_dir: str, prefix: str) -> None:
    """Say that satbed made run_dir, for this testbed's `satbed clean`."""
    path = os.path.join(run_dir, RUN_MARKER)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(prefix + "\n")
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def run_dir_problem(run_dir: str, prefix: str) -> str:
    """'' when run_dir (absolute; give it resolved) is a directory satbed made
    for this prefix: ours, holding our marker naming the prefix, its files/
    (if any) a directory and not a link."""
    if not run_dir or not os.path.isabs(run_dir):
        return f"run directory {run_dir[:200]!r} is not an absolute path"
    marker = os.path.join(run_dir, RUN_MARKER)
    problem = file_problem(run_dir, stat.S_IFDIR) or file_problem(marker)
    if problem:
        return f"run directory {run_dir} is not one satbed made ({problem})"
    try:
        with open(marker, encoding="ascii") as f:
            said = f.read(64).strip()
    except (OSError, ValueError) as e:
        return f"run directory {run_dir}: unreadable {RUN_MARKER} ({e})"
    if said != prefix:
        return f"run directory {run_dir} belongs to {said[:16]!r}, not {prefix}"
    files = os.path.join(run_dir, "files")
    if os.path.islink(files):
        return f"{files} is a symbolic link"
    return ""


def tagged_env(prefix: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """A node process's environment (the caller's by default), tagged with its run."""
    return {**(os.environ if env is None else env), RUN_ENV: prefix}


def tagged(pid: int, prefix: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"{RUN_ENV}={prefix}".encode() in f.read().split(b"\0")
    except OSError:
        return False


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace").split("\0")
    except OSError:
        return []


def owned_netns(rec: RunRecord, container_pids: dict[str, int]) -> set[int]:
    """The record's namespaces that show they are its run's: the namespace of
    one of the run's containers (container_pids, as Docker reports the
    containers labelled with the prefix), or one holding a process of the
    run (a Mininet node's shell, mininet:PREFIX-node, or a process tagged
    with RUN_ENV=PREFIX: the run started it)."""
    claimed = {i for i in rec.netns.values() if i} - {root_netns()}
    proven = {netns_inode(p) for p in container_pids.values()} & claimed
    tag = f"mininet:{rec.prefix}-"
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or not claimed - proven:
            continue
        pid = int(entry)
        ino = netns_inode(pid)
        if ino in claimed and ino not in proven and (
                any(a.startswith(tag) for a in cmdline(pid)) or tagged(pid, rec.prefix)):
            proven.add(ino)
    return {i for i in proven if i is not None}


def pid_is_runs(pid: int, rec: RunRecord, netns: set[int], container_ids: set[str]) -> bool:
    """A recorded pid is the run's when it lives in one of the run's proven
    namespaces, carries the run's tag, or its command line names the run's
    prefix (an ssh to a machine of the physical test bed, over the run's
    control socket) or one of its containers (runc exec, entering it)."""
    if netns_inode(pid) in netns or tagged(pid, rec.prefix):
        return True
    args = cmdline(pid)
    return any(rec.prefix in a for a in args) or any(a in container_ids for a in args)
