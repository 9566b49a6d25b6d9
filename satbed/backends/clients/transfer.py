"""Shared mechanics of the transfer adapters, so each tool's adapter only says
where its server runs, which command moves the file, and where it lands.

A run (class Run) owns: the payload (seeded random bytes, SHA-256 known), the
servers it started (stopped on every exit path), a bounded client command with
its output kept in RUN/logs/<client>.txt, a timed TCP connect probe, and the
verification of the received copy. Payload files are deleted afterwards unless
ctx.keep_files or SATBED_KEEP_FILES=1, so a matrix of 100 MB runs does not
fill the disk."""

from __future__ import annotations

import os
import glob
import shlex
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from satbed.backends.clients.base import Client, ClientContext
from satbed.backends.clients.payload import CHUNK, Payload, make_payload, sha256_file
from satbed.core.errors import SatbedError
from satbed.backends.net import Host, NamespaceSandbox, Node
from satbed.core.proc import last_line, our_binary
from satbed.core.settings import Settings
from satbed.backends.clients.processes import communicate_measured, stop_gently, tail_of, text_of, tree_cpu_seconds

# The Debian package that provides each tool, for the "missing tool" line.
PACKAGES = {
    "vsftpd": "vsftpd", "ncftpget": "ncftp", "ncftpput": "ncftp",
    "sshd": "openssh-server", "ssh": "openssh-client", "scp": "openssh-client",
    "sftp": "openssh-client", "ssh-keygen": "openssh-client", "rsync": "rsync",
    "lighttpd": "lighttpd", "wget": "wget", "nuttcp": "nuttcp", "iperf3": "iperf3",
    "telnetd": "inetutils-telnetd", "telnet": "inetutils-telnet", "socat": "socat",
}
# Daemons live in sbin, which a sudo'd or minimal PATH may lack.
SBIN_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")
SERVER_START_S = 10.0


# satbed's own Go programs (bin/, `make build`) and the clients that need them.
OUR_BINARIES = {"saratoga": "the saratoga client needs it", "satquic": "the quic and http3 clients need it"}


def find_tool(name: str) -> str:
    """Absolute path of a tool; one clear line naming its Debian package if absent."""
    if name in OUR_BINARIES:
        try:
            return our_binary(name)
        except SatbedError as e:
            raise SatbedError(f"{e}; {OUR_BINARIES[name]}") from None
    search = os.pathsep.join([os.environ.get("PATH", ""), *SBIN_DIRS])
    path = shutil.which(name, path=search)
    if path is None:
        pkg = PACKAGES.get(name, name)
        raise SatbedError(f"missing tool {name}: install the Debian package {pkg} "
                          f"(apt-get install {pkg})")
    return path


def keep_files_wanted() -> bool:
    return Settings.from_environ().keep_files


def keep_files(ctx: ClientContext) -> bool:
    return ctx.keep_files or keep_files_wanted()


class FirstByte:
    """When the received copy first holds a byte, seconds after the transfer
    command started: what came before it is the application's own set-up
    (login, key exchange, commands), which no PEP can shorten. Polled from
    a thread, so it serves every backend whose files the host can read."""

    POLL_S = 0.01

    def __init__(self, received: str, start: float):
        self.received, self.start = received, start
        self.seconds: float | None = None
        self.stop_gently = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="first-byte", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self.stop_gently.is_set():
            if delivered_bytes(self.received) > 0:
                self.seconds = time.monotonic() - self.start
                return
            self.stop_gently.wait(self.POLL_S)

    def stop(self) -> float | None:
        self.stop_gently.set()
        self._thread.join()
        return self.seconds


@dataclass
class Limited:
    """A transfer the time limit stopped: when, and what had arrived by then."""
    seconds: float
    bytes: int


def delivered_bytes(path: str) -> int:
    """Bytes a receiver has written so far: the file's allocated data (a
    receiver that writes out of order leaves holes), or the temporary copy
    beside it that the receiver renames at the end: rsync's and the Saratoga
    server's .NAME.XXXXXX, the Saratoga client's NAME.part."""
    head, tail = os.path.split(path)
    best = 0
    for candidate in [path, f"{path}.part", *glob.glob(os.path.join(glob.escape(head), f".{glob.escape(tail)}.*"))]:
        try:
            st = os.stat(candidate)
        except OSError:
            continue
        best = max(best, min(st.st_size, st.st_blocks * 512))
    return best


def prefix_matches(received: str, source: str) -> bool | None:
    """Is a partial copy the source's prefix? None when it cannot be told: the
    copy has holes (an out-of-order receiver) or is missing."""
    try:
        st = os.stat(received)
    except OSError:
        return None
    if st.st_blocks * 512 < st.st_size - CHUNK:
        return None
    left = st.st_size
    with open(received, "rb") as got, open(source, "rb") as want:
        while left:
            n = min(CHUNK, left)
            if got.read(n) != want.read(n):
                return False
            left -= n
    return True


def listening(node: Node, port: int, proto: str = "tcp") -> bool:
    """Is a socket in the node's namespace listening on (TCP) or bound to (UDP)
    the port? /proc/PID/net shows the namespace of PID, so no process is spawned."""
    try:
        rows = node.sandbox.proc_net(proto).splitlines()[1:]
    except (OSError, SatbedError):
        return False
    for row in rows:
        cols = row.split()
        if len(cols) < 4:
            continue
        local_port = int(cols[1].rsplit(":", 1)[1], 16)
        # 0A is TCP_LISTEN; an unconnected UDP socket shows 07 (TCP_CLOSE).
        if local_port == port and cols[3] == ("0A" if proto == "tcp" else "07"):
            return True
    return False


# Run in the client's node: the median time connect() takes to the server port.
_CONNECT_PROBE = r"""
import socket, statistics, sys, time
host, port, n, timeout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
times = []
for _ in range(n):
    s = socket.socket()
    s.settimeout(timeout)
    t = time.perf_counter()
    s.connect((host, port))
    times.append((time.perf_counter() - t) * 1000)
    s.close()
    time.sleep(0.05)
print(statistics.median(times))
"""


class Run:
    """One adapter run's resources; use as a context manager."""

    def __init__(self, ctx: ClientContext, name: str):
        self.ctx, self.name = ctx, name
        self.log_path = ctx.path("logs", f"{name}.txt")
        self.log = open(self.log_path, "a", encoding="utf-8")
        self.servers: list[tuple[str, Node, subprocess.Popen]] = []
        self.files: list[str] = []
        self.received: str | None = None
        self.limited: Limited | None = None
        self.first_byte_s: float | None = None
        self.dir = os.path.join(ctx.run_dir, "files", name)
        os.makedirs(self.dir, exist_ok=True)
        # CPU seconds of the transfer command and of the servers while it
        # ran, when both are processes of this host (namespace nodes).
        self.cpu: dict[str, float] = {}

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def note(self, text: str) -> None:
        self.log.write(text if text.endswith("\n") else text + "\n")
        self.log.flush()

    def mkdir(self, *parts: str) -> str:
        p = os.path.join(self.dir, *parts)
        os.makedirs(p, exist_ok=True)
        return p

    def path(self, *parts: str) -> str:
        p = os.path.join(self.dir, *parts)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        return p

    def env(self, **extra: str) -> dict[str, str]:
        """The tool's environment: no proxies (nothing outside is reachable),
        and a per-run HOME so no tool reads or writes root's dotfiles."""
        env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
        home = self.path("home", ".keep")
        env["HOME"] = os.path.dirname(home)
        env.update(extra)
        return env

    # The payload --------------------------------------------------------

    def payload(self, path: str) -> Payload:
        self.files.append(path)     # first: an interrupt mid-write leaves no partial file
        p = make_payload(path, self.ctx.size_bytes, self.ctx.seed, self.ctx.payloads)
        self.note(f"payload {path}: {p.size} bytes sha256 {p.sha256}")
        return p

    def expect(self, path: str) -> str:
        """A path the received copy will land at (removed at the end)."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.exists(path):
            os.unlink(path)
        self.files.append(path)
        self.received = path
        return path

    # Servers -------------------------------------------------------------

    def server(self, node: Node, label: str, args: list[str], port: int, proto: str = "tcp",
               wait: float = SERVER_START_S, stdout: str | None = None, **popen) -> subprocess.Popen:
        """Start a server in a node and wait, bounded, until its port listens.
        Its output goes to RUN/logs/<client>-<label>.txt; stdout: a file for
        its standard output instead (a receiver streaming the payload)."""
        out_path = self.ctx.path("logs", f"{self.name}-{label}.txt")
        out = open(out_path, "a", encoding="utf-8")
        out.write(f"$ {shlex.join(args)}" + (f" > {stdout}" if stdout else "") + "\n")
        out.flush()
        data = open(stdout, "wb") if stdout else None
        try:
            proc = node.popen(args, stdin=subprocess.DEVNULL, stdout=data or out,
                              stderr=out if data else subprocess.STDOUT, **popen)
        finally:
            out.close()
            if data:
                data.close()
        self.servers.append((label, node, proc))
        where = f"{_ip(node)}:{port}/{proto}"
        deadline = time.monotonic() + wait
        while True:
            if listening(node, port, proto):
                self.note(f"{label} listening on {where} (pid {proc.pid})")
                return proc
            if proc.poll() is not None:
                raise SatbedError(f"{self.name}: {label} exited (code {proc.returncode}) before listening on "
                                  f"{where}: {last_line(tail_of(out_path)) or 'no output'}")
            if time.monotonic() > deadline:
                raise SatbedError(f"{self.name}: {label} did not start listening on {where} within "
                                  f"{wait:g} s (see {os.path.relpath(out_path, self.ctx.run_dir)})")
            time.sleep(0.05)

    def wait_exit(self, proc: subprocess.Popen, label: str, timeout: float) -> int | None:
        """Wait, bounded, for a server that ends by itself (a one-shot receiver).
        After the time limit stopped the sender there is nothing to wait for."""
        if self.limited:
            return None
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise SatbedError(f"{self.name}: transfer stalled: {label} did not finish within "
                              f"{timeout:.0f} s after the sender did") from None

    def stop_servers(self) -> None:
        for label, node, proc in reversed(self.servers):
            stop_gently(proc)
            if proc in node.procs:
                node.procs.remove(proc)
            self.note(f"{label} stopped (exit {proc.returncode})")
        self.servers.clear()

    # Client side -----------------------------------------------------------

    def connect_ms(self, node: Node, ip: str, port: int, samples: int = 3) -> float:
        """Median time of connect() from `node` to ip:port: one RTT end to end,
        LAN-short when a split PEP answers the SYN."""
        limit = 5 + 3 * self.ctx.rtt_ms / 1000
        cp = node.run([sys.executable, "-c", _CONNECT_PROBE, ip, str(port), str(samples), str(limit)],
                      timeout=samples * (limit + 1) + 10, check=False)
        if cp.returncode != 0:
            raise SatbedError(f"{self.name}: cannot connect to {ip}:{port} from {node.name}: "
                              f"{last_line(cp.stderr) or 'exit ' + str(cp.returncode)}")
        ms = round(float(cp.stdout.strip()), 3)
        self.note(f"tcp connect {node.name} -> {ip}:{port}: {ms} ms (median of {samples})")
        return ms

    def client(self, node: Node, args: list[str], timeout: float | None = None, stdin: str | None = None,
               stdout: str | None = None, **popen) -> tuple[float, str]:
        """Run the transfer command in a node, bounded; returns (seconds, output).
        stdin/stdout: files to connect (for tools that stream the payload).
        The file transfer itself (no explicit timeout, a received file
        expected) is subject to ctx.time_limit_s: when it fires, the bytes
        delivered so far are measured, the tool is stopped and self.limited
        says so."""
        limit = self.ctx.time_limit_s if timeout is None and self.received else None
        timeout_given, timeout = timeout, self.ctx.transfer_timeout() if timeout is None else timeout
        if limit is not None and limit >= timeout:
            limit = None
        tool = os.path.basename(args[0])
        self.note(f"$ {shlex.join(args)}" + (f" < {stdin}" if stdin else "") + (f" > {stdout}" if stdout else ""))
        fin = open(stdin, "rb") if stdin else subprocess.DEVNULL
        fout = open(stdout, "wb") if stdout else subprocess.PIPE
        measured = (timeout_given is None and self.received is not None
                    and all(isinstance(n.sandbox, NamespaceSandbox) for n in (node, *(s for _, s, _ in self.servers))))
        try:
            servers_before = self._servers_cpu() if measured else 0.0
            start = time.monotonic()
            proc = node.popen(args, stdin=fin, stdout=fout, stderr=subprocess.PIPE if stdout else subprocess.STDOUT,
                              **popen)
            watch = FirstByte(self.received, start) if timeout_given is None and self.received else None
            try:
                wait = limit if limit is not None else timeout
                if measured:
                    out, err, client_cpu = communicate_measured(proc, wait)
                    self.cpu = {"cpu_client_s": round(client_cpu, 3),
                                "cpu_server_s": round(self._servers_cpu() - servers_before, 3)}
                else:
                    out, err = proc.communicate(timeout=wait)
            except subprocess.TimeoutExpired as e:
                if limit is not None:
                    # Measured before the stop: what arrived within the limit.
                    self.limited = Limited(time.monotonic() - start, delivered_bytes(self.received))
                stop_gently(proc)
                try:
                    out, err = proc.communicate(timeout=5)
                except subprocess.TimeoutExpired:   # something that escaped still holds the pipe
                    out, err = b"", b"(output lost: the pipe stayed open)"
                if measured:    # what communicate_measured read is not in Popen's own buffers
                    out = (e.output or b"") + (out or b"")
                self.note(text_of(out) + text_of(err))
                if self.limited:
                    self.note(f"[{tool} stopped by the time limit of {limit:g} s: "
                              f"{self.limited.bytes} bytes delivered]")
                    return self.limited.seconds, text_of(out) + text_of(err)
                raise SatbedError(f"{self.name}: transfer stalled: {tool} did not finish within {timeout:.0f} s "
                                  f"(see {os.path.relpath(self.log_path, self.ctx.run_dir)})") from None
            finally:
                if proc in node.procs:
                    node.procs.remove(proc)
                if watch is not None:
                    self.first_byte_s = watch.stop()
            seconds = time.monotonic() - start
        finally:
            for f in (fin, fout):
                if hasattr(f, "close"):
                    f.close()
        text = text_of(out) + text_of(err)
        self.note(text)
        self.note(f"[{tool} exit {proc.returncode} after {seconds:.3f} s]")
        if proc.returncode != 0:
            raise SatbedError(f"{self.name}: {tool} failed (exit {proc.returncode}): "
                              f"{last_line(text) or 'no output'}")
        return seconds, text

    # Result ------------------------------------------------------------------

    def verify(self, payload: Payload, received: str, seconds: float, **extra) -> dict:
        """The metrics of a file transfer; a mismatch is reported loudly."""
        if self.limited:
            return self._verify_partial(payload, received, **extra)
        got = sha256_file(received)
        size = os.path.getsize(received) if got is not None else 0
        ok = got == payload.sha256 and size == payload.size
        metrics = {"client": self.name, "direction": self.ctx.direction, "bytes": size,
                   "seconds": round(seconds, 3),
                   "goodput_bps": round(size * 8 / seconds) if seconds > 0 else 0,
                   "integrity": "ok" if ok else "fail", "sha256": got, "sha256_expected": payload.sha256,
                   **self._after_first_byte(size, seconds), **self.cpu, **extra}
        self.note(f"received {received}: {size} bytes sha256 {got}: integrity {metrics['integrity']}")
        if not ok:
            why = "missing" if got is None else f"{size} of {payload.size} bytes, sha256 {got}"
            metrics["error"] = f"integrity check failed: {self.name} delivered {why}; expected sha256 {payload.sha256}"
            print(f"satbed: INTEGRITY FAILURE: {metrics['error']} (run directory: {self.ctx.run_dir})",
                  file=sys.stderr, flush=True)
        return metrics

    def _after_first_byte(self, size: int, seconds: float) -> dict:
        """The set-up before the first received byte, and the goodput after
        it: the application's own round trips (ssh's key exchange and
        login, FTP's commands) apart from how fast the data then moved."""
        first = self.first_byte_s
        if first is None or not 0 <= first < seconds:
            return {}
        return {"first_byte_s": round(first, 3),
                "goodput_after_first_byte_bps": round(size * 8 / (seconds - first))}

    def _verify_partial(self, payload: Payload, received: str, **extra) -> dict:
        """A time-limited transfer: goodput from the bytes delivered within the
        limit; what arrived must be the payload's prefix, else it is an
        integrity failure like any other."""
        lim = self.limited
        assert lim is not None
        self.stop_servers()     # nothing may still be writing the copy being checked
        prefix = prefix_matches(received, payload.path)
        metrics = {"client": self.name, "direction": self.ctx.direction, "bytes": lim.bytes,
                   "bytes_expected": payload.size, "seconds": round(lim.seconds, 3),
                   "goodput_bps": round(lim.bytes * 8 / lim.seconds) if lim.seconds > 0 else 0,
                   "time_limited": True, "time_limit_s": self.ctx.time_limit_s,
                   "integrity": "incomplete",
                   "prefix_integrity": {True: "ok", False: "fail", None: "unchecked"}[prefix],
                   "sha256_expected": payload.sha256, **self._after_first_byte(lim.bytes, lim.seconds), **extra}
        self.note(f"time limit: {lim.bytes} of {payload.size} bytes in {lim.seconds:.1f} s; "
                  f"prefix integrity {metrics['prefix_integrity']}")
        if prefix is False:
            metrics["integrity"] = "fail"
            metrics["error"] = (f"integrity check failed: the {lim.bytes} bytes {self.name} delivered "
                                f"before the time limit are not the payload's prefix")
            print(f"satbed: INTEGRITY FAILURE: {metrics['error']} (run directory: {self.ctx.run_dir})",
                  file=sys.stderr, flush=True)
        return metrics

    def _servers_cpu(self) -> float:
        return sum(tree_cpu_seconds(proc.pid) for _, _, proc in self.servers)

    def close(self) -> None:
        try:
            self.stop_servers()
        finally:
            if not keep_files(self.ctx):
                for path in self.files:
                    try:
                        os.unlink(path)
                    except OSError:
                        pass
            self.log.close()


class TransferClient(Client):
    """A client whose run is: check tools, open a Run, transfer(), close."""

    def __init__(self) -> None:
        self.paths = {tool: find_tool(tool) for tool in self.tools}

    def run(self, ctx: ClientContext) -> dict:
        with Run(ctx, self.name) as t:
            return self.transfer(ctx, t)

    def transfer(self, ctx: ClientContext, t: Run) -> dict:
        raise NotImplementedError

    def tool(self, name: str) -> str:
        return self.paths[name]


def ip(host: Host) -> str:
    return str(host.ip.ip)


def _ip(node: Node) -> str:
    return str(node.ip.ip) if isinstance(node, Host) else node.name


def percentiles(values: list[float]) -> dict:
    """avg/p50/p95/min/max of a sample, in the units given, rounded."""
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, max(0, round(0.95 * len(ordered)) - 1))]
    return {"avg": round(statistics.fmean(ordered), 3), "p50": round(statistics.median(ordered), 3),
            "p95": round(p95, 3), "min": round(ordered[0], 3), "max": round(ordered[-1], 3)}
