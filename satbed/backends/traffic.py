"""Background traffic: the trafficgen generator (clients/trafficgen) driven
from the control plane.

A TrafficSpec (validated data, e.g. a scenario's `traffic:` block) holds one
or more groups, each between two named hosts: the server host runs
`trafficgen serve`, the client host `trafficgen client` with the group's
workload (long-lived flows, finite flows by Poisson arrivals or at a constant
count, sizes, upload share). Which way the bytes go is per flow: download
(server host to client host) or upload.

    spec = TrafficSpec.from_dict(doc["traffic"], source="scenarios/x.yaml")
    spec.check_hosts(testbed.hosts)            # every named host exists
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

import base64
import bisect
import glob
import html
import json
import math
import os
import shlex
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Callable, Mapping

from satbed.core import units
from satbed.core.errors import SatbedError
from satbed.core.proc import REPO_ROOT, our_binary

if TYPE_CHECKING:   # the analysis half must load where Mininet is absent
    from satbed.backends.net import Host

TRAFFIC_DIR = "traffic"
TABLE_DIR = os.path.join(REPO_ROOT, "clients", "trafficgen", "tables")
ARRIVALS = ("none", "poisson", "constant")
DEFAULT_PORT = 5301
SERVER_START_S = 10.0
STOP_GRACE_S = 10.0


def table_path(name: str) -> str:
    """A shipped table by name (surge-web) or a path, made absolute."""
    if os.sep not in name and not name.endswith(".cdf"):
        path = os.path.join(TABLE_DIR, name + ".cdf")
        if not os.path.isfile(path):
            known = sorted(f[:-4] for f in os.listdir(TABLE_DIR) if f.endswith(".cdf"))
            raise SatbedError(f"unknown size table {name!r} (shipped: {', '.join(known)}; or give a path)")
        return path
    path = os.path.abspath(name)
    if not os.path.isfile(path):
        raise SatbedError(f"size table {name!r} not found")
    return path


def parse_sizes(text: object) -> str:
    """A size distribution as trafficgen's -sizes takes it, sizes in bytes:
    100K | fixed:100K | exp:MEAN | pareto:SHAPE:MIN[:MAX] | table:NAME-OR-PATH."""
    if isinstance(text, int) and not isinstance(text, bool):
        return f"fixed:{units.parse_size(text)}"
    if not isinstance(text, str) or not text.strip():
        raise SatbedError(f"sizes {text!r}: want e.g. 100K, exp:1M, pareto:1.2:10K:50M or table:surge-web")
    kind, sep, rest = text.strip().partition(":")
    if not sep:
        kind, rest = "fixed", text.strip()
    args = rest.split(":")
    try:
        if kind == "fixed" and len(args) == 1:
            return f"fixed:{units.parse_size(args[0])}"
        if kind == "exp" and len(args) == 1:
            return f"exp:{units.parse_size(args[0])}"
        if kind == "pareto" and len(args) in (2, 3):
            shape = float(args[0])
            if not (shape > 0 and math.isfinite(shape)):
                raise ValueError
            sizes = [units.parse_size(a) for a in args[1:]]
            if len(sizes) == 2 and sizes[1] < sizes[0]:
                raise SatbedError(f"sizes {text!r}: the cap is below the minimum")
            return ":".join(["pareto", f"{shape:g}", *map(str, sizes)])
        if kind == "table" and rest:
            return f"table:{table_path(rest)}"
    except ValueError:
        pass
    except SatbedError as e:
        if str(e).startswith("sizes"):
            raise
        raise SatbedError(f"sizes {text!r}: {e}") from None
    raise SatbedError(f"sizes {text!r}: want BYTES, fixed:BYTES, exp:MEAN, pareto:SHAPE:MIN[:MAX] "
                      f"or table:NAME-OR-PATH")


@dataclass(frozen=True)
class TrafficGroup:
    """One generator pair: `client` opens flows to `server`."""
    server: str
    client: str
    long: int = 0                   # long-lived flows, open the whole run
    arrival: str = "none"           # finite flows: none, poisson or constant
    rate: float = 0.0               # poisson: arrivals per second; constant: the first
                                    # `concurrent` flows start as Poisson arrivals at it (0: at once)
    concurrent: int = 0             # constant: finite flows open at all times
    sizes: str = ""                 # trafficgen -sizes (see parse_sizes)
    upload_fraction: float = 0.0    # share of flows the client host sends
    port: int = DEFAULT_PORT
    max_active: int = 2000          # poisson: arrivals beyond it are skipped and counted

    @property
    def label(self) -> str:
        return f"{self.client}->{self.server}"


@dataclass(frozen=True)
class TrafficSpec:
    groups: tuple[TrafficGroup, ...]
    duration_s: float | None = None     # None: until stopped
    seed: int = 1

    GROUP_KEYS = ("server", "client", "long", "arrival", "rate", "concurrent", "sizes", "upload_fraction",
                  "port", "max_active")

    @classmethod
    def from_dict(cls, doc: object, source: str = "traffic") -> "TrafficSpec":
        """Validate a `traffic:` mapping: {duration, seed, groups: [...]}, or
        one group's keys at the top level. One clear error line on bad input."""
        def bad(msg: str) -> SatbedError:
            return SatbedError(f"{source}: {msg}")

        if not isinstance(doc, dict):
            raise bad("traffic must be a mapping")
        top = {"duration", "seed", "groups"}
        if "groups" in doc:
            unknown = set(doc) - top
            raw_groups = doc["groups"]
            if not isinstance(raw_groups, list) or not raw_groups:
                raise bad("groups must be a non-empty list")
        else:
            unknown = set(doc) - top - set(cls.GROUP_KEYS)
            raw_groups = [{k: v for k, v in doc.items() if k in cls.GROUP_KEYS}]
        if unknown:
            raise bad(f"unknown key(s): {', '.join(sorted(map(str, unknown)))}")
        duration = doc.get("duration")
        if duration is not None and (not _number(duration) or not duration > 0):
            raise bad(f"duration must be a positive number of seconds, got {duration!r}")
        seed = doc.get("seed", 1)
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63:
            raise bad(f"seed must be a non-negative integer, got {seed!r}")
        groups = []
        for i, g in enumerate(raw_groups, 1):
            where = f"group {i}" if len(raw_groups) > 1 else "traffic"
            groups.append(_group(g, lambda msg, w=where: bad(f"{w}: {msg}")))
        return cls(tuple(groups), float(duration) if duration is not None else None, seed)

    def check_hosts(self, hosts: Mapping[str, object]) -> None:
        """Every group names hosts the topology has, and two different ones."""
        from satbed.backends.net import Host
        for i, g in enumerate(self.groups, 1):
            for role, name in (("server", g.server), ("client", g.client)):
                if name not in hosts:
                    raise SatbedError(f"traffic group {i}: {role} {name!r} is not a host of the topology "
                                      f"(hosts: {', '.join(sorted(hosts))})")
                if not isinstance(hosts[name], Host):
                    raise SatbedError(f"traffic group {i}: {role} {name!r} is not an end host")

    def to_dict(self) -> dict:
        return {"duration": self.duration_s, "seed": self.seed, "groups": [asdict(g) for g in self.groups]}


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _group(g: object, bad) -> TrafficGroup:
    if not isinstance(g, dict):
        raise bad("must be a mapping")
    unknown = set(g) - set(TrafficSpec.GROUP_KEYS)
    if unknown:
        raise bad(f"unknown key(s): {', '.join(sorted(map(str, unknown)))}")
    for key in ("server", "client"):
        if not isinstance(g.get(key), str) or not g.get(key):
            raise bad(f"needs a {key} host name")
    if g["server"] == g["client"]:
        raise bad(f"server and client are the same host ({g['server']})")
    long = g.get("long", 0)
    if not isinstance(long, int) or isinstance(long, bool) or not 0 <= long <= 10000:
        raise bad(f"long must be an integer in 0..10000, got {long!r}")
    arrival = g.get("arrival", "none")
    if arrival not in ARRIVALS:
        raise bad(f"arrival must be one of {', '.join(ARRIVALS)}, got {arrival!r}")
    rate, concurrent = g.get("rate", 0), g.get("concurrent")
    if arrival == "poisson" and (not _number(rate) or not 0 < rate <= 1e5):
        raise bad(f"poisson arrivals need rate (flows/s) in (0, 100000], got {rate!r}")
    if arrival == "constant" and (not _number(rate) or not 0 <= rate <= 1e5):
        raise bad(f"a constant count's ramp-up rate (flows/s) must be in [0, 100000], got {rate!r}")
    if arrival == "none" and rate:
        raise bad("rate is for poisson arrivals or a constant count's ramp-up")
    # concurrent 0: the group makes no flows (a sweep's point without competition).
    if arrival == "constant" and (not isinstance(concurrent, int) or isinstance(concurrent, bool)
                                  or not 0 <= concurrent <= 10000):
        raise bad(f"constant arrivals need concurrent (flows) in 0..10000, got {concurrent!r}")
    if arrival != "constant" and concurrent:
        raise bad("concurrent is for constant arrivals only")
    if arrival == "none" and long == 0:
        raise bad("no flows: give long, or arrival poisson/constant")
    sizes = ""
    if arrival != "none":
        if "sizes" not in g:
            raise bad("finite flows need sizes (e.g. 100K, exp:1M, pareto:1.2:10K:50M, table:surge-web)")
        try:
            sizes = parse_sizes(g["sizes"])
        except SatbedError as e:
            raise bad(str(e)) from None
    elif g.get("sizes"):
        raise bad("sizes are for finite flows (arrival poisson or constant)")
    up = g.get("upload_fraction", 0.0)
    if not _number(up) or not 0 <= up <= 1:
        raise bad(f"upload_fraction must be in [0, 1], got {up!r}")
    port = g.get("port", DEFAULT_PORT)
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise bad(f"port must be in 1..65535, got {port!r}")
    max_active = g.get("max_active", 2000)
    if not isinstance(max_active, int) or isinstance(max_active, bool) or max_active < 1:
        raise bad(f"max_active must be a positive integer, got {max_active!r}")
    return TrafficGroup(g["server"], g["client"], long, arrival, float(rate), concurrent or 0, sizes, float(up),
                        port, max_active)


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
        spec.check_hosts(hosts)
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
        from satbed.backends.clients.transfer import listening

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
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue        # a torn last line of a killed process
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


def goodput_cdf(flows: list[dict], status: str = "completed",
                select: Callable[[dict], bool] | None = None) -> dict[str, list[tuple[float, float]]]:
    """Per-flow goodput CDF per direction: [(goodput_bps, P(X <= x))], of the
    flows with that status that `select` keeps (e.g. those that ran while
    the link's BER was in one decade)."""
    out: dict[str, list[tuple[float, float]]] = {}
    for direction in ("download", "upload"):
        vals = sorted(r["goodput_bps"] for r in flows if r["status"] == status and r["direction"] == direction
                      and (select is None or select(r)))
        if vals:
            out[direction] = [(v, (i + 1) / len(vals)) for i, v in enumerate(vals)]
    return out


def active_flows(flows: list[dict], step_s: float = 0.1, t0: float | None = None) -> list[tuple[float, int]]:
    """The number of open flows over time, sampled every step_s from t0
    (default: the first flow's start): [(seconds since t0, open flows)]."""
    if not flows:
        return []
    t0 = min(r["start"] for r in flows) if t0 is None else t0
    starts = sorted(r["start"] for r in flows)
    ends = sorted(r["end"] for r in flows)
    t_end = max(ends)
    out = []
    n = int(math.floor((t_end - t0) / step_s)) + 1
    for i in range(n):
        t = t0 + i * step_s
        # Open at t: started at or before t, not yet ended.
        out.append((round(i * step_s, 6), bisect.bisect_right(starts, t) - bisect.bisect_right(ends, t)))
    return out


def arrival_rate(flows: list[dict], tag: str | None = None) -> float | None:
    """Finite-flow arrivals per second over the span of their starts."""
    starts = sorted(r["start"] for r in flows if r["kind"] == "finite" and (tag is None or r.get("tag") == tag))
    if len(starts) < 2:
        return None
    return (len(starts) - 1) / (starts[-1] - starts[0])


def analyze(run_dir: str) -> dict:
    """Figures' numbers: goodput CDF per direction, open flows over time."""
    flows = load_flows(run_dir)
    return {"flows": len(flows), "goodput_cdf": goodput_cdf(flows), "active_flows": active_flows(flows),
            "arrival_rate_per_s": arrival_rate(flows)}


def plot(run_dir: str) -> bytes:
    """PNG: completed flows' goodput CDF (per direction) and open flows over time."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    flows = load_flows(run_dir)
    fig, (ax_cdf, ax_n) = plt.subplots(2, 1, figsize=(7.5, 6.4), dpi=110)
    cdf = goodput_cdf(flows)
    for direction, pts in cdf.items():
        ax_cdf.step([v / 1e6 for v, _ in pts], [p for _, p in pts], where="post", linewidth=1.4,
                    label=f"{direction} ({len(pts)} flows)")
    if cdf:
        ax_cdf.set_xscale("log")
        ax_cdf.legend(fontsize=8, loc="best")
    else:
        ax_cdf.text(0.5, 0.5, "no completed flows", ha="center", va="center", transform=ax_cdf.transAxes)
    ax_cdf.set_xlabel("per-flow goodput (Mbit/s)")
    ax_cdf.set_ylabel("fraction of flows")
    ax_cdf.set_ylim(0, 1)
    ax_cdf.set_title("Background traffic: completed flows' goodput", fontsize=11)
    ax_cdf.grid(True, alpha=0.3, which="both")
    series = active_flows(flows)
    if series:
        ax_n.step([t for t, _ in series], [n for _, n in series], where="post", linewidth=1.2, color="#1f77b4")
    ax_n.set_xlabel("time since the first flow (s)")
    ax_n.set_ylabel("open flows")
    ax_n.set_ylim(bottom=0)
    ax_n.grid(True, alpha=0.3)
    ax_n.set_title("Open flows over time", fontsize=11)
    fig.tight_layout()
    from satbed.report.charts import png
    return png(fig)


def report_section(run_dir: str) -> str:
    """The run report's HTML section for RUN/traffic/, or "" without one."""
    if not os.path.isdir(os.path.join(run_dir, TRAFFIC_DIR)):
        return ""
    try:
        s = summary(run_dir)
        png = plot(run_dir)
    except Exception as e:  # a broken record file must not lose the report
        return f'<h2>Background traffic</h2><p class="error">{html.escape(str(e))}</p>'
    g = s["completed_goodput_bps"] or {}
    status = ", ".join(f"{k} {v}" for k, v in sorted(s["by_status"].items()))
    cpu = ", ".join(f"{k} {v:.3f}" for k, v in s["cpu_share"].items() if v is not None)
    rows = [("flows", f"{s['flows']:,} ({status})"), ("bytes delivered", f"{s['bytes']:,}"),
            ("completed flows' goodput p10 / p50 / p90",
             " / ".join(f"{g[k] / 1e6:.3f}" for k in ("p10", "p50", "p90")) + " Mbit/s" if g else "none"),
            ("retransmitted segments (sender side)", f"{s['retransmissions']:,}"),
            ("generator CPU (cores)", cpu or "NA")]
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    img = base64.b64encode(png).decode("ascii")
    return ("<h2>Background traffic</h2>\n"
            f"<p>trafficgen records in <code>{TRAFFIC_DIR}/</code>, one per flow.</p>\n"
            f"<table>{body}</table>\n"
            f'<figure><img alt="traffic" src="data:image/png;base64,{img}"><figcaption>Goodput CDF of '
            "completed finite flows per direction, and the number of open flows over time.</figcaption>"
            "</figure>\n")
