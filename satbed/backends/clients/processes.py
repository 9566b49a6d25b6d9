"""The processes a transfer runs: stopped gently then firmly, their output
read while the CPU they and their children used is measured."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time


def stop_gently(proc: subprocess.Popen, grace: float = 3.0) -> None:
    """Terminate a process and everything it forked (vsftpd and sshd fork a
    process per session, which outlive the listener): the tree is collected
    before anything dies, since orphans lose their parent link."""
    if proc.poll() is not None:
        return
    tree = descendants(proc.pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in tree:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        # Through the Popen: a program on a machine (satbed.backends.ansible) is
        # signalled there, not only its local ssh client.
        proc.send_signal(sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if proc.poll() is not None and not any(alive(p) for p in tree):
                return
            time.sleep(0.05)
    proc.wait(timeout=grace)


def communicate_measured(proc: subprocess.Popen, timeout: float) -> tuple[bytes, bytes, float]:
    """proc.communicate(timeout=timeout) that also returns the CPU seconds
    (user + system) of the process and of every descendant it waited for:
    it is reaped here with wait4, which reports them, and Popen learns the
    exit status through returncode. On timeout the process is left running
    and unreaped, and subprocess.TimeoutExpired carries the output so far."""
    sel = selectors.DefaultSelector()
    got: dict[int, list[bytes]] = {}
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            got[pipe.fileno()] = []
            sel.register(pipe.fileno(), selectors.EVENT_READ)
    pidfd = os.pidfd_open(proc.pid)
    sel.register(pidfd, selectors.EVENT_READ)
    cpu, exited = 0.0, False
    deadline = time.monotonic() + timeout
    try:
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                if not exited:
                    raise subprocess.TimeoutExpired(proc.args, timeout, output=b"".join(sum(got.values(), [])))
                break   # an escaped descendant holds the pipe: the output so far
            for key, _ in sel.select(left):
                if key.fd == pidfd:
                    sel.unregister(pidfd)
                    _, status, usage = os.wait4(proc.pid, 0)
                    proc.returncode = os.waitstatus_to_exitcode(status)
                    cpu, exited = usage.ru_utime + usage.ru_stime, True
                    deadline = min(deadline, time.monotonic() + 5)
                    continue
                data = os.read(key.fd, 1 << 16)
                if data:
                    got[key.fd].append(data)
                else:
                    sel.unregister(key.fd)
    finally:
        sel.close()
        os.close(pidfd)
    out = [b"".join(got[p.fileno()]) if p is not None else b"" for p in (proc.stdout, proc.stderr)]
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    return out[0], out[1], cpu


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of a process and everything it started:
    each living (or not yet reaped) process's own time plus what it collected
    from the children it reaped, so every process is counted once."""
    ticks = 0
    for p in [pid, *descendants(pid)]:
        try:
            with open(f"/proc/{p}/stat", encoding="ascii", errors="replace") as f:
                # utime, stime, cutime, cstime: fields 14-17, after the ')'
                # that ends the command name (which may hold spaces).
                ticks += sum(int(v) for v in f.read().rsplit(")", 1)[1].split()[11:15])
        except (OSError, ValueError):
            pass
    return ticks / os.sysconf("SC_CLK_TCK")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                # The command name may hold spaces; the ppid follows its ')'.
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def tail_of(path: str, n: int = 4096) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def text_of(data) -> str:
    if data is None:
        return ""
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else data
