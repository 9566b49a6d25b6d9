"""Background traffic: the trafficgen generator (clients/trafficgen) driven
from the control plane.

A TrafficSpec (validated data, e.g. a scenario's `traffic:` block) holds one
or more groups, each between two named hosts: the server host runs
`trafficgen serve`, the client host `trafficgen client` with the group's
workload (long-lived flows, finite flows by Poisson arrivals or at a constant
count, sizes, upload share). Which way the bytes go is per flow: download
(server host to client host) or upload.

    spec = TrafficSpec.from_dict(doc["traffic"], source="scenarios/x.yaml")
    check_hosts(spec, testbed.hosts)           # every named host exists
    with Traffic(spec, testbed.hosts, run_dir) as traffic:    # servers up, then clients
        ...                                                   # the main flow
    # leaving the block stops clients then servers: result = traffic.result

Files, each written once by the process that owns it:

    RUN/traffic/server-<host>-<port>.jsonl   per-flow records of a server, then its summary
    RUN/traffic/client-<group>-<host>.jsonl  per-flow records of a client group, then its summary
    RUN/traffic/logs/*.txt                   command lines and stderr

load_flows() joins a client's record with the server's record of the same
flow (the sender's retransmission count lives on the sending side), and
analyze()/plot()/report_section() read only those files, so `satbed report`
redraws them anywhere."""

from __future__ import annotations

import glob
import os
import shlex
import signal
import subprocess
import time
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from satbed.backends.clients.transfer import listening
from satbed.core.errors import SatbedError
from satbed.core.files import jsonl_records
from satbed.core.proc import our_binary
from satbed.model.workload import TRAFFIC_DIR, TrafficSpec

if TYPE_CHECKING:   # the analysis half must load where Mininet is absent
    from satbed.backends.net import Host

SERVER_START_S = 10.0
STOP_GRACE_S = 10.0


def check_hosts(spec: TrafficSpec, hosts: Mapping[str, object]) -> None:
    """Every group names end hosts the testbed has (hosts holds only end
    hosts: a router's name is not in it)."""
    for i, g in enumerate(spec.groups, 1):
        for role, name in (("server", g.server), ("client", g.client)):
            if name not in hosts:
                raise SatbedError(f"traffic group {i}: {role} {name!r} is not a host of the topology "
                                  f"(hosts: {', '.join(sorted(hosts))})")


@dataclass
class _Proc:
    label: str
    host: "Host"
    proc: subprocess.Popen
    log: str


class Traffic:
    """Runs a TrafficSpec on a testbed's hosts; a context manager. Servers
    run in the foreground of their node (never daemonized) and are waited
    for until they listen; clients start after every server is up."""

    def __init__(self, spec: TrafficSpec, hosts: Mapping[str, "Host"], run_dir: str,
                 binary: str | None = None):
        check_hosts(spec, hosts)
        self.spec, self.hosts = spec, hosts
        self.run_dir = os.path.abspath(run_dir)
        self.dir = os.path.join(self.run_dir, TRAFFIC_DIR)
        self.binary = os.path.abspath(binary) if binary else our_binary("trafficgen")
        self.servers: list[_Proc] = []
        self.clients: list[_Proc] = []
        self.started_at: float | None = None
        self.result: dict | None = None

    def __enter__(self) -> "Traffic":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _spawn(self, host: "Host", label: str, args: list[str]) -> _Proc:
        log = os.path.join(self.dir, "logs", f"{label}.txt")
        os.makedirs(os.path.dirname(log), exist_ok=True)
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"$ {shlex.join(args)}\n")
            out.flush()
            proc = host.popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        return _Proc(label, host, proc, log)

    def start(self) -> None:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:

        os.makedirs(self.dir, exist_ok=True)
        if glob.glob(os.path.join(self.dir, "*.jsonl")):
            # The generator appends: a second run here would mix its flows with the first's.
            raise SatbedError(f"{self.dir} already holds traffic records: give each run its own directory")
        self.started_at = time.time()
        for server, port in dict.fromkeys((g.server, g.port) for g in self.spec.groups):
            host = self.hosts[server]
            args = [self.binary, "serve", "-listen", f"{host.ip.ip}:{port}", "-seed", str(self.spec.seed),
                    "-records", os.path.join(self.dir, f"server-{server}-{port}.jsonl")]
            self.servers.append(self._spawn(host, f"server-{server}-{port}", args))
        for p, (server, port) in zip(self.servers, dict.fromkeys((g.server, g.port) for g in self.spec.groups)):
            deadline = time.monotonic() + SERVER_START_S
            while not listening(p.host, port):
                if p.proc.poll() is not None:
                    raise SatbedError(f"trafficgen server on {server} exited (code {p.proc.returncode}) before "
                                      f"listening on port {port}: {_last_line(p.log)}")
                if time.monotonic() > deadline:
                    raise SatbedError(f"trafficgen server on {server} did not listen on port {port} within "
                                      f"{SERVER_START_S:g} s (see {os.path.relpath(p.log, self.run_dir)})")
                time.sleep(0.05)
        for i, g in enumerate(self.spec.groups):
            if g.arrival == "constant" and g.concurrent == 0 and not g.long:
                continue        # no flows asked of this group
            server = self.hosts[g.server]
            args = [self.binary, "client", "-server", f"{server.ip.ip}:{g.port}", "-client-id", str(i),
                    "-tag", g.label, "-seed", str(self.spec.seed + i), "-long", str(g.long),
                    "-arrival", g.arrival, "-upload-fraction", repr(g.upload_fraction),
                    "-max-active", str(g.max_active),
                    "-records", os.path.join(self.dir, f"client-{i}-{g.client}.jsonl")]
            if g.rate:
                args += ["-rate", repr(g.rate)]
            if g.arrival == "constant":
                args += ["-concurrent", str(g.concurrent)]
            if g.sizes:
                args += ["-sizes", g.sizes]
            if self.spec.duration_s is not None:
                args += ["-duration", f"{round(self.spec.duration_s * 1000)}ms"]
            self.clients.append(self._spawn(self.hosts[g.client], f"client-{i}-{g.client}", args))

    def wait(self, timeout: float | None = None) -> None:
        """Wait for clients that end by themselves (a spec with a duration)."""
        if self.spec.duration_s is None:
            raise SatbedError("traffic without a duration runs until stop()")
        limit = timeout if timeout is not None else self.spec.duration_s + STOP_GRACE_S + 30
        deadline = time.monotonic() + limit
        for c in self.clients:
            try:
                c.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise SatbedError(f"trafficgen client {c.label} still running {limit:.0f} s after start "
                                  f"(duration {self.spec.duration_s:g} s)") from None

    def stop(self) -> dict:
        """Stop clients, then servers (SIGTERM: each records its open flows as
        stopped and writes its summary), and return the run's traffic result.
        Safe to call twice."""
        if self.result is not None:
            return self.result
        failures = []
        for p in [*self.clients, *self.servers]:
            _terminate(p)
            if p.proc in p.host.procs:
                p.host.procs.remove(p.proc)
            # SIGTERM ends trafficgen cleanly with 0; anything else is a failure.
            if p.proc.returncode not in (0, -signal.SIGTERM):
                failures.append(f"{p.label} exited {p.proc.returncode}: {_last_line(p.log)}")
        self.result = {"dir": TRAFFIC_DIR, "spec": self.spec.to_dict(), "started": self.started_at}
        if os.path.isdir(self.dir):
            self.result["summary"] = summary(self.run_dir)
        if failures:
            self.result["errors"] = failures
        return self.result


def _terminate(p: _Proc) -> None:
    if p.proc.poll() is None:
        p.proc.send_signal(signal.SIGTERM)
    try:
        p.proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        p.proc.kill()
        p.proc.wait(timeout=5)


def _last_line(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [ln.strip() for ln in f if ln.strip()]
        return lines[-1] if lines else "no output"
    except OSError:
        return "no output"


# Analysis: from the stored files only ------------------------------------


def _read_jsonl(path: str) -> tuple[list[dict], dict | None]:
    flows, summ = [], None
    for rec in jsonl_records(path):
        if rec.get("record") == "flow":
            flows.append(rec)
        elif rec.get("record") == "summary":
            summ = rec
    return flows, summ


def load_flows(run_dir: str) -> list[dict]:
    """Every client flow record, joined with the server's record of the same
    flow: `retransmissions` and `retrans_bytes` come from the sending side
    (the server's for a download), `server_bytes` is what the server counted."""
    d = os.path.join(run_dir, TRAFFIC_DIR)
    server: dict[tuple[int, int], dict] = {}
    for path in sorted(glob.glob(os.path.join(d, "server-*.jsonl"))):
        port = os.path.basename(path)[:-len(".jsonl")].rsplit("-", 1)[1]
        for r in _read_jsonl(path)[0]:
            server[(port, r["client"], r["flow"])] = r
    flows = []
    for path in sorted(glob.glob(os.path.join(d, "client-*.jsonl"))):
        for r in _read_jsonl(path)[0]:
            port = r.get("remote", "").rsplit(":", 1)[-1]
            s = server.get((port, r["client"], r["flow"]))
            joined = dict(r)
            joined["server_bytes"] = s["bytes"] if s else None
            if not r.get("sender"):
                joined["retransmissions"] = s.get("retransmissions") if s else None
                joined["retrans_bytes"] = s.get("retrans_bytes") if s else None
            flows.append(joined)
    flows.sort(key=lambda r: r["start"])
    return flows


def summary(run_dir: str) -> dict:
    """The summaries the processes wrote, and totals over the joined flows."""
    d = os.path.join(run_dir, TRAFFIC_DIR)
    procs = {}
    for path in sorted(glob.glob(os.path.join(d, "*.jsonl"))):
        summ = _read_jsonl(path)[1]
        procs[os.path.basename(path)[:-len(".jsonl")]] = summ
    flows = load_flows(run_dir)
    by_status: dict[str, int] = {}
    for r in flows:
        by_status[r["status"]] = by_status.get(r["status"], 0) + 1
    done = [r["goodput_bps"] for r in flows if r["status"] == "completed"]
    retrans = [r["retransmissions"] for r in flows if isinstance(r.get("retransmissions"), int)]
    return {"flows": len(flows), "by_status": by_status, "bytes": sum(r["bytes"] for r in flows),
            "completed_goodput_bps": percentiles(done), "retransmissions": sum(retrans),
            "processes": procs,
            "cpu_share": {k: v.get("cpu_share") for k, v in procs.items() if v}}


def percentiles(values: list[float]) -> dict | None:
    if not values:
        return None
    s = sorted(values)

    def q(p: float) -> float:
        return s[min(len(s) - 1, max(0, math.ceil(p * len(s)) - 1))]
    return {"n": len(s), "mean": round(sum(s) / len(s), 1), "p10": q(0.1), "p50": q(0.5), "p90": q(0.9),
            "min": s[0], "max": s[-1]}
