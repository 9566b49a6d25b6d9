"""Experiment matrices: a declarative file (experiments/*.yaml) expands into
cells; `satbed matrix` runs them in parallel, each in its own child process
and its own prefixed testbed, and records them in DIR/results.sqlite.

File format (YAML):

  name: quick                 # optional; defaults to the file's stem
  description: ...
  repetitions: 3              # runs per combination (seed = seed + repetition)
  timeout: 900                # optional per-cell limit in seconds (default: from size and rate)
  fixed:   {size: 20M, direction: download}
  axes:    {client: [scp, ftp], pep: [none, pepd], rtt: [600], ber: [0, 1e-5]}
  variants:                   # optional: one more axis whose values are bundles of settings
    - {name: terrestrial, set: {rtt: 0}}
    - {name: gateways, set: {pep: pepd, pep_options: wan_buf=195000}}
    - {name: study, clients: [ftp], set: {profiles.clientA: ncftp-3.2.2}}

A variant is a named set of parameters (or scenario paths) applied on top of
`fixed:`, for studies whose configurations are not a cross product (seed
001's four set-ups). `clients:` limits a variant to those clients: several
entries may share a name for disjoint clients (the Global Hawk study's hosts
are NcFTP's for FTP, the 2.6.18 host for the rest). A variant may not set an
axis. Each cell records its variant's name in the `variant` parameter.

Parameters (in `fixed` as one value, in `axes` as a list): client, pep,
pep_options, rtt (ms), ber, size, direction, rate, ceil, queue (packets),
emulator (auto|userspace|tc|bridge), captures, topology, analyze, graphs,
time_limit (seconds), seed, and link (a mapping of per-direction emulator
fields applied to both directions, e.g. {cburst_bytes: 0, queue_bytes: 262144}).

time_limit is a measurement window: a transfer still running after that many
seconds is stopped and measured by the bytes it delivered (status `limited`;
what arrived must be the payload's prefix). Without it every transfer runs to
completion, which for TCP without a PEP at BER 1e-5 means hours per 100 MB.
graphs (default false in a matrix) draws each cell's graphs and report.html
as it finishes; otherwise `satbed report` draws them from the stored tcptrace
output and captures when asked (drawing a 100 MB transfer costs more CPU than
analysing it).

A cell's identity is the hash of its full configuration, so a second run of
the same file skips finished cells, and changing any parameter makes a new
cell rather than reusing a stale result.

Batches: cells whose configurations differ only in what a transfer sets for
itself (PER_TRANSFER: size, the repetition's seed, time limit, analysis)
share one testbed, run one after another by one child (runner.run_batch):
the testbed, PEPs, emulator and background traffic stay up, and each cell
still gets its own directory with its own captures, config.json,
result.json and analysis, and its window of the shared daemons' records.
The key is computed from the cells' configurations (batch_key), not from
the file; cells with a link schedule or self-ending traffic get a testbed
each, and so does every cell with --no-batch. A failed transfer fails its
cell; a failed testbed fails the batch's remaining cells with the reason.
An interrupted batch resumes at its first cell without a result; its
testbed's own files stay in DIR/batches/ID.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import collections
import concurrent.futures
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field


from satbed.backends import clients, records


from satbed.core import paths, yamlfile


from satbed.model import schemas

from satbed.core.errors import SatbedError, error_line
from satbed.core.proc import REPO_ROOT
from satbed.results.metrics import run_metrics
from satbed.results.store import DONE, MEASURED, CellRow, Store
from satbed.core.units import human_bps, parse_ber, parse_delay_ms, parse_rate, parse_size

PYTHON = "/usr/bin/python3"
BACKENDS = ("mininet", "docker", "ansible")
TERM_GRACE_S = 30           # a cell's teardown after SIGTERM; then SIGKILL and `clean`
SETUP_S = 8                 # building and removing one testbed, measured on 2 cores
ANALYSIS_S_PER_MB = 0.12    # tcptrace metrics of four header captures, per MB transferred
SPAWN_GAP_S = 1.0           # between cell starts: testbed setups are CPU-bound bursts of ~1.5 s
MAX_CELLS = 10_000          # about a week of 100 MB cells on 2 cores
CHILD_FILE = "cell.pid"     # {"pid", "start"} of the process running a cell
EXIT_FILE = "cell.exit"     # its exit status, written as it ends
BATCH_FILE = "batch.json"   # a batch's cells, in the order its child runs them
BATCH_S = 600               # a batch's expected length: a testbed build is then a small share of it,
                            # and the batches still spread over the jobs
# RunConfig fields a transfer sets for itself on a running testbed (runner.run_batch);
# every other field, and the seeds (the repetition), shape the testbed.
PER_TRANSFER = ("size_bytes", "seed", "time_limit_s", "analyze", "graphs", "cwnd_interval_s")


def _choice(*allowed: str):
    def check(v):
        v = str(v)
        if v not in allowed:
            raise SatbedError(f"{v!r} is not one of {', '.join(allowed)}")
        return v
    return check


def _client(v) -> str:
    clients.get(str(v))
    return str(v)


def _pep(v) -> str:
    from satbed.model import peps
    peps.check(str(v))
    return str(v)


def _topology(v) -> str:
    from satbed.model import topology
    topology.find(str(v))
    return str(v)


def _rate(v):
    if v is None:
        return None
    parse_rate(v)
    return v if isinstance(v, (int, float)) else str(v)


def _queue(v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise SatbedError(f"queue must be a positive number of packets, got {v!r}")
    return v


def _bool(v) -> bool:
    if not isinstance(v, bool):
        raise SatbedError(f"expected true or false, got {v!r}")
    return v


def _time_limit(v) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise SatbedError(f"time_limit must be a positive number of seconds or null, got {v!r}")
    return float(v)


def _seed(v) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise SatbedError(f"seed must be an integer, got {v!r}")
    return v


def _link(v) -> dict:
    from satbed.model.link import Direction
    if not isinstance(v, dict):
        raise SatbedError(f"link must be a mapping of emulator fields, got {v!r}")
    known = {f.name for f in dataclasses.fields(Direction)}
    bad = sorted(set(v) - known)
    if bad:
        raise SatbedError(f"unknown link field {bad[0]!r} (known: {', '.join(sorted(known))})")
    out = dict(v)
    if isinstance(out.get("profile"), str) and not os.path.isabs(out["profile"]):
        # A repository path (profiles/link/...): satemu opens it from the
        # cell's own directory, where a relative name finds nothing.
        out["profile"] = os.path.join(REPO_ROOT, out["profile"])
    return out


def _scenario(v) -> str | None:
    if v is None:
        return None
    from satbed.model import scenario
    return scenario.find(str(v))


# parameter -> (normaliser, default)
PARAMS = {
    "client": (_client, "ping"),
    "pep": (_pep, "none"),
    "pep_options": (str, ""),
    "rtt": (lambda v: parse_delay_ms(v, "rtt"), 0.0),
    "ber": (parse_ber, 0.0),
    "size": (parse_size, 10 << 20),
    "direction": (_choice("download", "upload"), "download"),
    "rate": (_rate, None),
    "ceil": (_rate, None),
    "queue": (_queue, None),
    "emulator": (_choice("auto", "userspace", "tc", "bridge"), "auto"),
    "captures": (_choice("headers", "full", "none"), "headers"),
    "topology": (_topology, "globalhawk"),
    "analyze": (_bool, True),
    "graphs": (_bool, False),
    "time_limit": (_time_limit, None),
    "seed": (_seed, 1),
    "link": (_link, None),
    "scenario": (_scenario, None),
    "variant": (str, ""),
}


@dataclass
class Cell:
    params: dict                 # every parameter, normalised
    repetition: int
    config: dict                 # RunConfig.to_dict() plus the testbed backend: what the hash covers
    hash: str
    estimate_s: float            # expected wall time, for scheduling and the ETA
    timeout_s: float
    cost: float = 0.0            # cores it keeps busy (cell_cost), for admission

    def label(self) -> str:
        p = self.params
        paths = "".join(f" {k}={v}" for k, v in sorted(p.items()) if "." in k)
        variant = f" [{p['variant']}]" if p.get("variant") else ""
        opts = f" {p['pep_options']}" if p.get("pep_options") else ""
        return (f"{p['client']}/{p['pep']}{opts}{variant} rtt={p['rtt']:g} ber={p['ber']:g} "
                f"size={human_size(p['size'])}{paths} #{self.repetition}")


@dataclass
class Experiment:
    name: str
    file: str
    description: str
    cells: list[Cell] = field(default_factory=list)
    reference: dict | None = None   # parameter: value of the row the summary compares every row with


def human_size(n: int) -> str:
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def load(path: str, backend: str = "mininet", repetitions: int | None = None) -> Experiment:
    """Read and validate an experiment file; every error is one line naming the file."""
    doc = yamlfile.load(path, "experiment file")
    from satbed.model import scenario
    if scenario.is_scenario(doc):
        try:
            sc = scenario.load(path)
        except SatbedError as e:
            raise SatbedError(str(e)) from None
        # The sweep's axes vary what the scenario fixes for a single run.
        axes = sc.matrix.get("axes") or {}
        fixed = {k: v for k, v in sc.params.items() if not isinstance(axes, dict) or k not in axes}
        doc = {"name": sc.name, "description": sc.description, "fixed": fixed, **sc.matrix}
    try:
        if repetitions is not None:
            if repetitions < 1:
                raise SatbedError(f"--repetitions must be at least 1, got {repetitions}")
            doc = {**doc, "repetitions": repetitions} if isinstance(doc, dict) else doc
        return _build(doc, path, backend)
    except SatbedError as e:
        raise SatbedError(f"{path}: {e}") from None


def _build(doc, path: str, backend: str) -> Experiment:
    schemas.validate(doc, "experiment")
    if backend not in BACKENDS:
        raise SatbedError(f"unknown testbed backend {backend!r} (known: {', '.join(BACKENDS)})")
    name = str(doc.get("name") or os.path.splitext(os.path.basename(path))[0])
    reps = doc.get("repetitions", 1)
    timeout = doc.get("timeout")
    fixed = doc.get("fixed") or {}
    axes = doc.get("axes") or {}
    base = {k: default for k, (_, default) in PARAMS.items()}
    for k, v in fixed.items():
        base[k] = _normalise(f"fixed.{k}", k, v)
    axis_values: list[tuple[str, list]] = []
    for k, vs in axes.items():
        if k in fixed:
            raise SatbedError(f"axes.{k}: also given in fixed:")
        values = [_normalise(f"axes.{k}", k, v) for v in vs]
        if len({json.dumps(v, sort_keys=True) for v in values}) != len(values):
            raise SatbedError(f"axes.{k}: repeated value")
        axis_values.append((k, values))
    variants = _variants(doc.get("variants"), {k for k, _ in axis_values})
    total = reps * math.prod(len(values) for _, values in axis_values) * max(1, len(variants))
    if total > MAX_CELLS:
        raise SatbedError(f"{total} cells: more than {MAX_CELLS} (split the experiment)")
    combos = [dict(base)]
    for k, values in axis_values:
        combos = [{**c, k: v} for c in combos for v in values]
    if variants:
        combos = [{**c, **v.settings, "variant": v.name} for c in combos for v in variants
                  if v.clients is None or {**c, **v.settings}["client"] in v.clients]
    # A pep_options axis beside pep: [none, pepd] (the Global Hawk matrix's
    # pepd wan=rate rows) runs the no-PEP cells once, not once per option
    # (the hash dedupes them below).
    combos = [without_options_for_no_pep(c) for c in combos]
    _check_peps({c["pep"] for c in combos}, backend)
    exp = Experiment(name, path, str(doc.get("description") or ""), reference=_reference(doc.get("reference"), combos))
    seen: set[str] = set()
    for params in combos:
        for rep in range(reps):
            cell = make_cell(params, rep, backend, timeout)
            if cell.hash not in seen:
                seen.add(cell.hash)
                exp.cells.append(cell)
    return exp


def without_options_for_no_pep(params: dict) -> dict:
    """A PEP's options without a PEP mean nothing: a cell without one has none."""
    return {**params, "pep_options": ""} if params.get("pep") == "none" and params.get("pep_options") else params


def _reference(doc: dict | None, combos: list[dict]) -> dict | None:
    """The summary's reference row (parameter: value): it must name
    parameters the experiment has and match at least one cell."""
    if not doc:
        return None
    ref = {}
    for k, v in doc.items():
        if k not in PARAMS:
            raise SatbedError(f"reference.{k}: not a parameter (known: {', '.join(sorted(PARAMS))})")
        ref[k] = _normalise(f"reference.{k}", k, v)
    if not any(all(c.get(k) == v for k, v in ref.items()) for c in combos):
        raise SatbedError(f"reference: no cell has {', '.join(f'{k}={v}' for k, v in ref.items())}")
    return ref


@dataclass
class Variant:
    name: str
    settings: dict               # parameter or scenario path -> normalised value
    clients: list[str] | None    # the clients it applies to (None: all)


def _variants(doc, axes: set[str]) -> list[Variant]:
    # The shape (a list of {name, set, clients}) is the schema's.
    out: list[Variant] = []
    for i, v in enumerate(doc or []):
        where = f"variants.{i}"
        settings = v.get("set") or {}
        for k in settings:
            if k in axes:
                raise SatbedError(f"{where}.set.{k}: also an axis")
            if k == "variant":
                raise SatbedError(f"{where}.set.variant: the variant's name is its name:")
        clients = v.get("clients")
        if clients is not None:
            clients = [_normalise(f"{where}.clients", "client", c) for c in clients]
        out.append(Variant(str(v["name"]), {k: _normalise(f"{where}.set.{k}", k, val) for k, val in settings.items()},
                           clients))
    # Entries sharing a name must not claim the same client twice.
    claimed: dict[str, set] = {}
    for v in out:
        mine = set(v.clients) if v.clients is not None else {"*"}
        other = claimed.setdefault(v.name, set())
        if "*" in other or ("*" in mine and other) or mine & other:
            raise SatbedError(f"variants: {v.name!r} given twice for the same client")
        other |= mine
    return out


def _check_peps(names: set[str], backend: str) -> None:
    """PEP images exist and declare the contract before any cell starts."""
    from satbed.backends import docker
    from satbed.model import peps
    for name in sorted(names):
        peps.check_backend(name, backend)
        if peps.is_image(name):
            docker.pep_image(name)


def _normalise(where: str, key: str, value):
    if "." in key:
        from satbed.model import scenario
        try:
            scenario.check_path(key)
        except SatbedError as e:
            raise SatbedError(f"{where}: {e}") from None
        return value
    if key not in PARAMS:
        raise SatbedError(f"{where}: unknown parameter (known: {', '.join(PARAMS)})")
    try:
        return PARAMS[key][0](value)
    except SatbedError as e:
        raise SatbedError(f"{where}: {e}") from None
    except (TypeError, ValueError) as e:
        raise SatbedError(f"{where}: bad value {value!r}: {e}") from None


def run_config(params: dict, repetition: int):
    """The RunConfig of a cell; raises SatbedError for a bad combination."""
    from satbed.model.link import LinkConfig
    from satbed.model.config import RunConfig
    seed = params["seed"] + repetition
    extra = {"queue_packets": params["queue"]} if params["queue"] else {}
    link = LinkConfig.symmetric(rate=params["rate"], rtt_ms=params["rtt"], ber=params["ber"],
                                ceil=params["ceil"], backend=params["emulator"], seed=seed, **extra)
    if params["link"]:
        link = dataclasses.replace(link, a_to_b=dataclasses.replace(link.a_to_b, **params["link"]),
                                   b_to_a=dataclasses.replace(link.b_to_a, **params["link"]))
    extra = {}
    paths = {k: v for k, v in params.items() if "." in k}
    if params.get("scenario"):
        from satbed.model import scenario
        doc = scenario.read(params["scenario"])
        scen_paths, topo_paths = scenario.split_overrides(paths)
        for k, v in scen_paths.items():
            doc = yamlfile.set_path(doc, k, v)
        extra = scenario.extras(doc, params["scenario"], seed)
        if topo_paths:
            extra["topology_overrides"] = topo_paths
    elif paths:
        raise SatbedError(f"{next(iter(paths))}: dotted paths need a scenario file")
    cfg = RunConfig(client=params["client"], pep=params["pep"], pep_options=params["pep_options"], link=link,
                    size_bytes=params["size"], direction=params["direction"], topology=params["topology"],
                    captures=params["captures"], seed=seed, analyze=params["analyze"],
                    graphs=params["graphs"], time_limit_s=params["time_limit"], **extra)
    cfg.validate(clients.REGISTRY)
    return cfg


def config_from_dict(doc: dict):
    from satbed.model.config import RunConfig
    return RunConfig.from_dict(doc)


def _portable(v):
    """Paths inside the repository made relative to it."""
    if isinstance(v, dict):
        return {k: _portable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_portable(x) for x in v]
    if isinstance(v, str) and v.startswith(REPO_ROOT + os.sep):
        return os.path.relpath(v, REPO_ROOT)
    return v


def cell_digest(config: dict) -> str:
    """A cell's identity: its configuration, with the repository's paths
    relative, so a matrix resumes from another checkout of it."""
    return hashlib.sha256(json.dumps(_portable(config), sort_keys=True, default=str).encode()).hexdigest()[:16]


def make_cell(params: dict, repetition: int, backend: str = "mininet", timeout: float | None = None) -> Cell:
    try:
        cfg = run_config(params, repetition)
    except SatbedError as e:
        raise SatbedError(f"cell {params['client']}/{params['pep']} rtt={params['rtt']:g} "
                          f"ber={params['ber']:g}: {e}") from None
    config = {**cfg.to_dict(), "testbed_backend": backend}
    digest = cell_digest(config)
    est = estimate_seconds(cfg)
    return Cell(dict(params), repetition, config, digest, est, float(timeout) if timeout else default_timeout(cfg),
                cell_cost(cfg))


MATHIS_C = 3.0
MSS_BITS = 1448 * 8


def expected_goodput(cfg) -> float:
    """A model for scheduling, not a result: the link rate less frame loss,
    and for end-to-end TCP (no PEP) the Mathis form MSS/RTT x C/sqrt(p),
    which is what makes TCP at 600 ms and BER 1e-5 crawl. C is fitted to this
    testbed (the kernel's default congestion control with SACK), not Reno's
    1.22: at BER 1e-7 and 300 ms FTP moved 3.34 Mbit/s (C = 3.0), at 600 ms
    1.6-3.0 Mbit/s (C = 1.4-2.7); at BER 1e-5 C hardly matters (the time
    limit ends those cells). The higher C keeps the admission's cost of such
    cells from being underestimated."""
    rate = cfg.link.rate_bps or 1e9
    per = cfg.link.a_to_b.per()
    goodput = 0.95 * rate * (1 - per)
    cls = clients.REGISTRY.get(cfg.client)
    if cls is not None and cls.tcp and cfg.pep == "none" and per > 0 and cfg.link.rtt_ms > 0:
        goodput = min(goodput, MATHIS_C * MSS_BITS / (cfg.link.rtt_ms / 1000 * math.sqrt(per)))
    return goodput


def estimate_seconds(cfg) -> float:
    """A rough wall time for one cell: setup, handshakes, the transfer at the
    modelled goodput (at most the time limit) and the capture's analysis. The
    ETA corrects the estimates from the cells that finished."""
    if cfg.client == "ping":
        return SETUP_S + 3 + 10 * cfg.link.rtt_ms / 1000
    goodput = expected_goodput(cfg)
    transfer = cfg.size_bytes * 8 / goodput
    if cfg.time_limit_s:
        transfer = min(transfer, cfg.time_limit_s)
    analysis = ANALYSIS_S_PER_MB * min(cfg.size_bytes, transfer * goodput / 8) / 1e6
    return SETUP_S + cfg.main_delay_s + 5 * cfg.link.rtt_ms / 1000 + transfer + analysis


def default_timeout(cfg) -> float:
    """Generous but finite: how long the transfer may run (client_limit),
    plus setup, teardown and the analysis of the capture."""
    params = {"rtt": cfg.link.rtt_ms, "size": cfg.size_bytes, "time_limit": cfg.time_limit_s}
    return 180 + client_limit(params, cfg.link.rate_bps) + cfg.size_bytes / 2e6


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


# Cores a cell keeps busy, measured per process over whole runs on this 2-core
# VM (30 MB, 8 Mbit/s HTB, buffered captures; setup excluded): scp and ftp
# 0.16 cores at 7.6 Mbit/s, rsync 0.19, saratoga 0.28 (its sender paces each
# frame), a pepd pair 0.06 more at 6.3 Mbit/s, and a cell whose TCP crawls at
# BER 1e-5 0.03. Nearly all of it is per-packet work (every hop's wake-ups,
# the emulator's departures), so it scales with the goodput.
IDLE_CORES = 0.03
CORES_PER_MBIT = {"saratoga": 0.037, "rsync": 0.025}
CORES_PER_MBIT_DEFAULT = 0.021
PEP_CORES_PER_MBIT = 0.009
CPU_SHARE = 0.8      # of the cores, for cells; the rest for the parent and testbed setups
CELL_MEMORY = 300 << 20


def cell_cost(cfg) -> float:
    """Cores one cell keeps busy at its modelled goodput (see CORES_PER_MBIT)."""
    if cfg.client == "ping":
        return IDLE_CORES
    per_mbit = CORES_PER_MBIT.get(cfg.client, CORES_PER_MBIT_DEFAULT)
    if cfg.pep != "none" or any(p.name != "none" for p in cfg.peps.values()):
        per_mbit += PEP_CORES_PER_MBIT
    return IDLE_CORES + per_mbit * expected_goodput(cfg) / 1e6 + background_cost(cfg)


def background_cost(cfg) -> float:
    """Background traffic can fill the fastest emulated link: model it as a
    TCP transfer at that rate (unshaped links count as 100 Mbit/s)."""
    if not cfg.traffic:
        return 0.0
    rates = [link.rate_bps or 100e6 for link in (cfg.link, *cfg.links.values())]
    return CORES_PER_MBIT_DEFAULT * max(rates) / 1e6


class CpuMeter:
    """Busy cores over the last few seconds, from /proc/stat: the admission's
    check on its own model, which does not know what else the machine runs
    or how a cell's cost grows when many share the cores."""

    def __init__(self, window_s: float = 5.0):
        self.window_s = window_s
        self.samples: collections.deque = collections.deque()
        self.cores = os.cpu_count() or 1

    def sample(self) -> None:
        try:
            with open("/proc/stat", encoding="ascii") as f:
                v = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return
        now = time.monotonic()
        self.samples.append((now, sum(v) - v[3] - v[4], sum(v)))   # busy (all but idle, iowait), total
        while len(self.samples) > 2 and now - self.samples[1][0] > self.window_s:
            self.samples.popleft()

    def busy_cores(self) -> float:
        if len(self.samples) < 2:
            return 0.0
        (_, b0, t0), (_, b1, t1) = self.samples[0], self.samples[-1]
        return self.cores * (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0


@dataclass
class Admission:
    """Which pending cell may start now. `--jobs N` runs N cells whatever they
    cost. By default cells start while their summed cost stays within
    CPU_SHARE of the cores (and memory holds them): a Global Hawk matrix then
    runs its loss-bound TCP cells, long but nearly idle, beside as many
    full-rate cells as the CPU carries without slowing any of them."""
    jobs: int | None
    budget: float         # cores
    max_cells: int

    @classmethod
    def for_host(cls, jobs: int | None = None, host: dict | None = None) -> "Admission":
        host = host or host_info()
        by_mem = int(host["mem_available"] / CELL_MEMORY) if host["mem_available"] else 64
        return cls(jobs, CPU_SHARE * host["cores"], max(1, by_mem))

    def pick(self, pending: list[Cell], running: list[Cell], busy: float | None = None) -> int | None:
        """Index of the first pending cell that fits beside the running ones:
        by their modelled cost and, given the measured busy cores, by that too."""
        if not pending:
            return None
        if self.jobs is not None:
            return 0 if len(running) < self.jobs else None
        if not running:
            return 0
        if len(running) >= self.max_cells:
            return None
        used = sum(c.cost for c in running)
        for i, c in enumerate(pending):
            if used + c.cost <= self.budget and (busy is None or busy + c.cost <= self.budget):
                return i
        return None

    def parallel(self, cells: list[Cell]) -> float:
        """Cells expected at once, for the ETA."""
        if self.jobs is not None or not cells:
            return float(self.jobs or 1)
        mean = sum(c.cost for c in cells) / len(cells)
        return max(1.0, min(float(self.max_cells), len(cells), self.budget / mean))

    def describe(self) -> str:
        if self.jobs is not None:
            return f"--jobs {self.jobs}"
        return f"cells started while their cost fits {self.budget:.1f} cores (at most {self.max_cells})"

    def simulate(self, cells: list[Cell], seconds: list[float]) -> float:
        """Wall time of running cells (in this order, each taking its seconds)
        under this admission, ignoring the spawn gap."""
        pending = list(zip(cells, seconds))
        running: list[tuple[float, Cell]] = []
        now = 0.0
        while pending or running:
            while True:
                i = self.pick([c for c, _ in pending], [c for _, c in running])
                if i is None:
                    break
                c, t = pending.pop(i)
                running.append((now + t, c))
            running.sort(key=lambda r: r[0])
            now, _ = running.pop(0)
        return now


class Progress:
    """A progress line on stderr: redrawn in place on a terminal, one line per
    finished cell otherwise (logs and pipes)."""

    def __init__(self, total: int, parallel: float, stream=sys.stderr):
        self.total, self.parallel, self.stream = total, parallel, stream
        self.tty = stream.isatty()
        self.started = time.monotonic()
        self.done = self.ok = self.failed = 0
        self.actual = self.expected = 0.0

    def finished(self, cell: Cell, status: str, seconds: float, note: str = "") -> None:
        self.done += 1
        self.ok += status == "ok"
        self.failed += status != "ok"
        self.actual += seconds
        self.expected += cell.estimate_s
        # On a terminal the line replaces the bar, which the next draw() puts back below it.
        clear = "\r\033[K" if self.tty else ""
        self.stream.write(f"{clear}[{self.done}/{self.total}] {status:<7} "
                          f"{seconds:6.1f}s {cell.label()} {note}  (ETA {fmt_s(self._eta)})\n")
        self.stream.flush()

    def draw(self, running: list[tuple[Cell, float]], pending: list[Cell]) -> None:
        now = time.monotonic()
        ratio = self.actual / self.expected if self.expected else 1.0
        left = ratio * sum(c.estimate_s for c in pending) + sum(
            max(0.0, ratio * c.estimate_s - (now - t)) for c, t in running)
        self._eta = left / max(1.0, self.parallel)
        if not self.tty:
            return
        width = 30
        fill = int(width * self.done / self.total) if self.total else width
        line = (f"\r[{'#' * fill}{'.' * (width - fill)}] {self.done}/{self.total} ok {self.ok} "
                f"failed {self.failed} running {len(running)} elapsed {fmt_s(now - self.started)} "
                f"ETA {fmt_s(self._eta)} ")
        self.stream.write(line)
        self.stream.flush()

    _eta = 0.0

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def fmt_s(s: float) -> str:
    s = int(s)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


@dataclass
class Child:
    cell: Cell                # the cell it runs now (a batch's: its first not yet collected)
    proc: subprocess.Popen
    started: float            # time.time() when `cell` started
    mono: float               # time.monotonic() when `cell` started
    deadline: float
    terminated_at: float | None = None
    reason: str = ""          # timeout | interrupted
    batch: list[Cell] = field(default_factory=list)   # a batch's cells not yet collected, `cell` first
    out: str = ""             # the results directory (a batch's cells are collected from it one by one)

    def next_cell(self) -> None:
        """The batch's current cell was collected: the clock starts for the next."""
        self.batch.pop(0)
        now = time.monotonic()
        if self.batch:
            self.cell, self.started, self.mono = self.batch[0], time.time(), now
            self.deadline = now + self.cell.timeout_s
        else:
            self.deadline = now + 2 * TERM_GRACE_S    # its teardown


class Orphan:
    """A cell child that a killed matrix left running in its own session. A
    resumed matrix adopts it instead of deleting its directory and starting
    the cell again: it is watched by pid and start time, and its exit status
    is the one run_cell_child wrote (none: it was killed)."""

    def __init__(self, pid: int, start: int, cell_dir: str):
        self.pid, self.start, self.cell_dir = pid, start, cell_dir
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and records.start_time(self.pid) != self.start:
            self.returncode = read_exit(self.cell_dir)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"cell pid {self.pid}", timeout)
            time.sleep(0.1)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if records.start_time(self.pid) == self.start:
            os.kill(self.pid, sig)


def running_child(cell_dir: str) -> tuple[int, int] | None:
    """(pid, start time) of the process still running this cell, if any."""
    try:
        with open(os.path.join(cell_dir, CHILD_FILE), encoding="utf-8") as f:
            doc = json.load(f)
        pid, start = int(doc["pid"]), int(doc["start"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (pid, start) if records.start_time(pid) == start else None


def write_exit(cell_dir: str, code: int) -> None:
    """A cell's exit status, whole or not at all: the parent polls for the
    file and read an empty one, just created, as a killed cell."""
    tmp = os.path.join(cell_dir, EXIT_FILE + ".tmp")
    with open(tmp, "w", encoding="ascii") as f:
        f.write(f"{code}\n")
    os.replace(tmp, os.path.join(cell_dir, EXIT_FILE))


def read_exit(cell_dir: str) -> int:
    """The exit status a cell child recorded; -9 (killed) when it recorded none."""
    try:
        with open(os.path.join(cell_dir, EXIT_FILE), encoding="ascii") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return -signal.SIGKILL


def spawn(cell: Cell, cell_dir: str, backend: str) -> subprocess.Popen:
    """One cell in a child process with its own session: Ctrl-C in the
    terminal reaches only the parent, which then stops children in order."""
    if running_child(cell_dir):
        raise SatbedError(f"cell {cell.hash} is still running (never delete a live cell's directory)")
    if os.path.isdir(cell_dir):
        shutil.rmtree(cell_dir)     # leftovers of an interrupted attempt
    os.makedirs(os.path.dirname(cell_dir), exist_ok=True)
    paths.private_dir(cell_dir)
    with open(os.path.join(cell_dir, "cell.json"), "w", encoding="utf-8") as f:
        json.dump({"params": cell.params, "repetition": cell.repetition, "config": cell.config,
                   "hash": cell.hash, "backend": backend}, f, indent=2, sort_keys=True, default=str)
    child = _spawn_child(["--run-cell", cell_dir], os.path.join(cell_dir, "matrix.log"))
    # Who runs the cell, so a matrix resumed after this one was killed adopts it.
    with open(os.path.join(cell_dir, CHILD_FILE), "w", encoding="utf-8") as f:
        json.dump({"pid": child.pid, "start": records.start_time(child.pid)}, f)
    return child



def _spawn_child(args: list[str], log_path: str) -> subprocess.Popen:
    log = open(log_path, "w", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    # Every cell alike, whatever --jobs: satemu's busy-waiting (its default
    # outside a matrix) would take the CPU cells side by side need, so no cell
    # spins unless SATBED_EMULATOR_SPIN_US says; environment.json records it.
    env.setdefault("SATBED_EMULATOR_SPIN_US", "0")
    try:
        return subprocess.Popen([PYTHON, "-m", "satbed.execution.matrix", *args], stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True, cwd=REPO_ROOT)
    finally:
        log.close()


def _without_seeds(doc):
    if isinstance(doc, dict):
        return {k: _without_seeds(v) for k, v in doc.items() if k != "seed"}
    if isinstance(doc, list):
        return [_without_seeds(v) for v in doc]
    return doc


def batch_key(cell: Cell) -> str | None:
    """Cells with the same key can share one testbed: their configurations
    differ only in what a transfer sets for itself (PER_TRANSFER: the size,
    the repetition's seed, the time limit, the analysis). None for a cell
    that needs a testbed of its own: a link schedule (outage, profile) runs
    on a clock the transfer starts, and background traffic with a duration
    ends by itself."""
    cfg = cell.config
    for link in (cfg.get("link") or {}, *(cfg.get("links") or {}).values()):
        for d in (link.get("a_to_b") or {}, link.get("b_to_a") or {}):
            if d.get("outage") or d.get("profile"):
                return None
    if (cfg.get("traffic") or {}).get("duration") is not None:
        return None
    shared = _without_seeds({k: v for k, v in cfg.items() if k not in PER_TRANSFER})
    return hashlib.sha256(json.dumps(shared, sort_keys=True, default=str).encode()).hexdigest()[:16]


def plan_batches(cells: list[Cell], batch: bool = True) -> list[list[Cell]]:
    """The cells to run, grouped into batches that share a testbed (one
    cell each without batching), longest first. A batch runs repetition by
    repetition (every size of the first, then of the second, ...), so a slow
    spell of the machine or the background traffic does not fall on one
    size alone; a group longer than BATCH_S is cut into several batches."""
    groups: dict[str, list[Cell]] = {}
    for i, c in enumerate(cells):
        key = batch_key(c) if batch else None
        groups.setdefault(key or f"single-{i}", []).append(c)
    order = {c.hash: i for i, c in enumerate(cells)}
    out: list[list[Cell]] = []
    for group in groups.values():
        group.sort(key=lambda c: (c.repetition, order[c.hash]))
        chunk: list[Cell] = []
        length = 0.0
        for c in group:
            # After the first, a cell costs its transfer, not a testbed build and the traffic's head start.
            extra = max(1.0, c.estimate_s - SETUP_S - float(c.config.get("main_delay_s") or 0))
            if chunk and length + extra > BATCH_S:
                out.append(chunk)
                chunk, length = [], 0.0
            chunk.append(c)
            length += extra if len(chunk) > 1 else c.estimate_s
        if chunk:
            out.append(chunk)
    out.sort(key=lambda b: -sum(c.estimate_s for c in b))
    return out


def batch_estimate(batch: list[Cell]) -> float:
    return batch[0].estimate_s + sum(max(1.0, c.estimate_s - SETUP_S - float(c.config.get("main_delay_s") or 0))
                                     for c in batch[1:])


def spawn_batch(cells: list[Cell], out: str, backend: str) -> tuple[subprocess.Popen, str]:
    """Several cells in one child process on one testbed (runner.run_batch).
    Each cell keeps its own directory, written as it finishes (cell.exit
    last); the testbed's own files go to OUT/batches/ID."""
    ident = hashlib.sha256("".join(c.hash for c in cells).encode()).hexdigest()[:16]
    batch_dir = os.path.join(out, "batches", ident)
    for c in cells:
        if running_child(os.path.join(out, "cells", c.hash)):
            raise SatbedError(f"cell {c.hash} is still running (never delete a live cell's directory)")
    if running_child(batch_dir):
        raise SatbedError(f"batch {ident} is still running")
    for d in [batch_dir, *(os.path.join(out, "cells", c.hash) for c in cells)]:
        if os.path.isdir(d):
            shutil.rmtree(d)    # leftovers of an interrupted attempt
    os.makedirs(os.path.dirname(batch_dir), exist_ok=True)
    paths.private_dir(batch_dir)
    for i, c in enumerate(cells):
        cell_dir = os.path.join(out, "cells", c.hash)
        os.makedirs(os.path.dirname(cell_dir), exist_ok=True)
        paths.private_dir(cell_dir)
        with open(os.path.join(cell_dir, "cell.json"), "w", encoding="utf-8") as f:
            json.dump({"params": c.params, "repetition": c.repetition, "config": c.config, "hash": c.hash,
                       "backend": backend, "batch": {"dir": batch_dir, "index": i, "cells": len(cells)}},
                      f, indent=2, sort_keys=True, default=str)
    with open(os.path.join(batch_dir, BATCH_FILE), "w", encoding="utf-8") as f:
        json.dump({"cells": [c.hash for c in cells], "backend": backend}, f, indent=2)
    child = _spawn_child(["--run-batch", batch_dir], os.path.join(batch_dir, "matrix.log"))
    # Who runs the cells, so a matrix resumed after this one was killed adopts them.
    who = {"pid": child.pid, "start": records.start_time(child.pid)}
    for d in [batch_dir, *(os.path.join(out, "cells", c.hash) for c in cells)]:
        with open(os.path.join(d, CHILD_FILE), "w", encoding="utf-8") as f:
            json.dump(who, f)
    return child, batch_dir


def run_batch_child(batch_dir: str) -> int:
    """The child side of a batch: runner.run_batch over its cells, each
    cell's analysis beside the next transfer (one worker thread at the
    lowest priority: a transfer mostly waits on the satellite's round trips,
    and a short cell's analysis took as long as its transfer), each cell's
    exit status as its analysis ends."""
    from satbed.execution import runner

    def terminate(signum, frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGINT, terminate)
    rc = 0
    analyst = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="analysis",
                                                    initializer=_lowest_priority)
    try:
        with open(os.path.join(batch_dir, BATCH_FILE), encoding="utf-8") as f:
            doc = json.load(f)
        out = os.path.dirname(os.path.dirname(batch_dir))
        cell_dirs = [os.path.join(out, "cells", h) for h in doc["cells"]]
        cfgs = []
        for d in cell_dirs:
            with open(os.path.join(d, "cell.json"), encoding="utf-8") as f:
                cfgs.append(config_from_dict(json.load(f)["config"]))
        wanted = [c.analyze and c.captures != "none" for c in cfgs]
        for c in cfgs:
            c.analyze = False

        def finish(i: int, result: dict) -> None:
            code = 2 if result.get("error") else 0
            if not code and wanted[i]:
                result = runner.analyze(cell_dirs[i], result, graphs=cfgs[i].graphs)
                _mark_analyzed(cell_dirs[i])
            if not code and result.get("integrity", "ok") not in ("ok", "incomplete"):
                code = 3
            if code == 2:
                print(f"satbed: cell {doc['cells'][i]}: {result.get('error')}", file=sys.stderr, flush=True)
            write_exit(cell_dirs[i], code)

        transfers = runner.run_batch(cfgs, cell_dirs, batch_dir, backend=doc.get("backend", "mininet"))
        pending = []
        try:
            for i, result in transfers:
                pending.append(analyst.submit(finish, i, result))
        finally:
            transfers.close()       # tears the testbed down
        for p in pending:
            p.result()
    except SatbedError as e:
        rc = error_line(e)
    finally:
        # Interrupted: the analyses not begun are dropped (their cells have
        # no exit status and run again on resume); the one under way ends.
        analyst.shutdown(wait=True, cancel_futures=True)
    write_exit(batch_dir, rc)
    return rc


def _lowest_priority() -> None:
    """The calling thread (and what it starts: tcptrace) at nice 19; on
    Linux a thread's nice value is its own."""
    os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


def run_cell_child(cell_dir: str) -> int:
    """The child side: one runner.run into the cell directory. SIGTERM
    unwinds like Ctrl-C so the runner's teardown removes the testbed."""
    def terminate(signum, frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGINT, terminate)
    rc = _run_cell(cell_dir)
    # Written last: a cell without it was killed before it finished.
    write_exit(cell_dir, rc)
    return rc


def _run_cell(cell_dir: str) -> int:
    from satbed.execution import runner
    with open(os.path.join(cell_dir, "cell.json"), encoding="utf-8") as f:
        doc = json.load(f)
    try:
        cfg = config_from_dict(doc["config"])
        analyze = cfg.analyze and cfg.captures != "none"
        cfg.analyze = False
        _, result = runner.run(cfg, cell_dir, run_dir=cell_dir, backend=doc.get("backend", "mininet"))
        if analyze:
            # tcptrace (and any graphs) take longer than a small transfer; at the lowest
            # priority they only use CPU the other cells' transfers leave idle.
            os.nice(19)
            result = runner.analyze(cell_dir, result, graphs=cfg.graphs)
            _mark_analyzed(cell_dir)
    except SatbedError as e:
        return error_line(e)
    return 0 if result.get("integrity", "ok") in ("ok", "incomplete") else 3


def _mark_analyzed(cell_dir: str) -> None:
    """config.json records what ran: the analysis did, after the runner."""
    from satbed.execution.runner import write_json
    path = os.path.join(cell_dir, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return
    doc.update(analyze=True, analysis_niced=True)
    write_json(path, doc)


def collect(child: Child, cell_dir: str, status_override: str | None = None, rc: int | None = None) -> CellRow:
    """The row of child's current cell; rc: the cell's own exit status (a
    batch's cells record theirs), else the child process's."""
    finished = time.time()
    if rc is None:
        rc = child.proc.returncode
    # result.json with the cell's analysis.json laid over it.
    metrics = run_metrics(cell_dir)
    error = metrics.get("error")
    if status_override:
        # The runner only saw a SIGTERM; say why it came.
        status = status_override
        error = f"timed out after {child.cell.timeout_s:.0f}s" if status == "timeout" else status
    elif rc == 0 and not error:
        status = "limited" if metrics.get("time_limited") else "ok"
    elif rc is not None and (rc < 0 or rc >= 128):
        # Killed (SIGKILL, SIGTERM from outside): not a result; a resumed matrix redoes it.
        status, error = "interrupted", error or f"cell process killed (exit {rc})"
    else:
        status = "failed"
        if not error and rc == 3:
            error = f"integrity {metrics.get('integrity')}"
        error = error or _log_tail(cell_dir) or f"exit {rc}"
    return CellRow(hash=child.cell.hash, experiment="", params=child.cell.params, config=child.cell.config,
                   repetition=child.cell.repetition, status=status, error=error,
                   goodput_bps=metrics.get("goodput_bps"), metrics=metrics, started=child.started,
                   finished=finished, seconds=finished - child.started, estimate=child.cell.estimate_s)


def _log_tail(cell_dir: str) -> str:
    """The last line its child logged: the cell's own, or its batch's."""
    log = os.path.join(cell_dir, "matrix.log")
    if not os.path.exists(log):
        try:
            with open(os.path.join(cell_dir, "cell.json"), encoding="utf-8") as f:
                log = os.path.join(str((json.load(f).get("batch") or {}).get("dir") or cell_dir), "matrix.log")
        except (OSError, ValueError, AttributeError):
            pass
    try:
        with open(log, encoding="utf-8", errors="replace") as f:
            lines = [ln.strip() for ln in f if ln.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def _signal(child: Child, sig: int, group: bool = False) -> None:
    try:
        if group:
            os.killpg(child.proc.pid, sig)
        else:
            child.proc.send_signal(sig)
    except (ProcessLookupError, PermissionError):
        pass


def clean_leftovers() -> list[str]:
    """What SIGKILLed children left: their testbeds' records name dead owners."""
    from satbed.backends.testbed import clean
    try:
        return clean()
    except SatbedError as e:
        return [f"clean failed: {e}"]


def run_matrix(exp: Experiment, out: str, jobs: int | None = None, backend: str = "mininet",
               retry: bool = False, stream=sys.stderr, batch: bool = True) -> dict:
    """Run every cell not already done; returns counts. Raises KeyboardInterrupt
    after stopping all children when interrupted."""
    from satbed.core.proc import require_root
    require_root()
    if jobs is not None and jobs < 1:
        raise SatbedError(f"--jobs must be at least 1, got {jobs}")
    if backend == "ansible":
        # One set of machines: two cells at once would share its bridges, emulator and PEPs.
        if jobs not in (None, 1):
            raise SatbedError(f"--backend ansible runs one cell at a time on its machines: --jobs 1, not {jobs}")
        jobs = 1
    out = paths.results_dir(out)    # absolute: cells run from the repository root
    os.makedirs(os.path.join(out, "cells"), exist_ok=True)
    # One matrix per results directory: two would run the same cells twice.
    lock = open(os.path.join(out, ".lock"), "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise SatbedError(f"another `satbed matrix` is running with --out {out}") from None
    try:
        return _run_locked(exp, out, jobs, backend, retry, stream, batch)
    finally:
        lock.close()


def _run_locked(exp: Experiment, out: str, jobs: int | None, backend: str, retry: bool, stream,
                batch: bool = True) -> dict:
    host = host_info()
    with Store(os.path.join(out, "results.sqlite")) as store:
        todo, skipped, adopted = [], 0, []
        for cell in exp.cells:
            row = store.get(cell.hash)
            if row and (row.status in MEASURED or (row.status in DONE and not retry)):
                skipped += 1
            elif live := running_child(os.path.join(out, "cells", cell.hash)):
                adopted.append((cell, live))
            else:
                todo.append(cell)
        admit = Admission.for_host(jobs, host)
        meter = CpuMeter()
        # Cells sharing a testbed run as one batch; the longest batches start first,
        # so the long ones do not end the run alone.
        pending = plan_batches(todo, batch)
        parallel = admit.parallel(todo)
        run_id = store.begin_run(exp.name, os.path.abspath(exp.file), jobs or 0, len(exp.cells), skipped, host,
                                 reference=exp.reference)
        batched = sum(len(b) for b in pending if len(b) > 1)
        stream.write(f"satbed matrix: {exp.name}: {len(exp.cells)} cells, {skipped} already done, "
                     f"{len(todo)} to run ({admit.describe()}"
                     + (f"; {batched} of them in {sum(len(b) > 1 for b in pending)} batches sharing a testbed"
                        if batched else "") + f") into {out}\n")
        stream.flush()
        progress = Progress(len(todo) + len(adopted), parallel, stream)
        running: dict[str, Child] = {}
        for ch in _adopt(adopted, out):
            stream.write(f"satbed matrix: cell {ch.cell.hash} is still running from a killed matrix "
                         f"(pid {ch.proc.pid}): waiting for it\n")
            running[ch.cell.hash] = ch
        counts = {"ok": 0, "limited": 0, "failed": 0, "timeout": 0, "skipped": skipped}
        outcome = "interrupted"
        last_spawn = -SPAWN_GAP_S

        def record(ch: Child, cell_dir: str, override: str | None = None, rc: int | None = None) -> None:
            row = collect(ch, cell_dir, override, rc)
            row.experiment = exp.name
            store.put(row)
            counts[row.status] = counts.get(row.status, 0) + 1
            note = human_bps(row.goodput_bps) if row.goodput_bps else (
                f"rtt {row.metrics['rtt_ms_avg']:.1f} ms" if "rtt_ms_avg" in row.metrics else "")
            if row.status == "limited":
                note += (f" ({row.metrics.get('bytes', 0) / 1e6:.1f} of "
                         f"{row.metrics.get('bytes_expected', 0) / 1e6:.0f} MB in the time limit)")
            elif row.status != "ok":
                note = f"{note} {row.error or ''}".strip()
            progress.finished(ch.cell, row.status, row.seconds or 0.0, note[:160])

        def collect_finished(ch: Child) -> None:
            """A batch's cells that wrote their exit status, in order."""
            while ch.batch:
                cell_dir = os.path.join(out, "cells", ch.cell.hash)
                if not os.path.exists(os.path.join(cell_dir, EXIT_FILE)):
                    return
                record(ch, cell_dir, rc=read_exit(cell_dir))
                ch.next_cell()

        try:
            while pending or running:
                meter.sample()
                pick = admit.pick([b[0] for b in pending], [c.cell for c in running.values()], meter.busy_cores())
                if pick is not None and time.monotonic() - last_spawn >= SPAWN_GAP_S:
                    last_spawn = time.monotonic()
                    cells = pending.pop(pick)
                    now = time.monotonic()
                    if len(cells) == 1:
                        proc = spawn(cells[0], os.path.join(out, "cells", cells[0].hash), backend)
                        ch = Child(cells[0], proc, time.time(), now, now + cells[0].timeout_s)
                    else:
                        proc, _ = spawn_batch(cells, out, backend)
                        ch = Child(cells[0], proc, time.time(), now, now + cells[0].timeout_s,
                                   batch=list(cells), out=out)
                    running[cells[0].hash] = ch
                for h, ch in list(running.items()):
                    collect_finished(ch)
                    now = time.monotonic()
                    if ch.proc.poll() is None:
                        if ch.terminated_at is None and now > ch.deadline:
                            ch.terminated_at, ch.reason = now, "timeout"
                            _signal(ch, signal.SIGTERM)
                        elif ch.terminated_at is not None and now > ch.terminated_at + TERM_GRACE_S:
                            _signal(ch, signal.SIGKILL, group=True)
                            ch.proc.wait()
                        else:
                            continue
                    if ch.proc.returncode is None:
                        continue
                    if ch.reason:
                        # The group may hold stragglers (a capture, a server) of a killed cell.
                        _signal(ch, signal.SIGKILL, group=True)
                        clean_leftovers()
                    collect_finished(ch)
                    if not ch.out:
                        record(ch, os.path.join(out, "cells", h), ch.reason or None)
                    elif ch.batch:
                        # The batch ended before this cell wrote its status: it timed out, or
                        # the child died. The cells after it run again as a batch of their own.
                        record(ch, os.path.join(out, "cells", ch.cell.hash), ch.reason or None)
                        ch.next_cell()
                        if ch.batch:
                            pending.insert(0, list(ch.batch))
                    del running[h]
                progress.draw([(c.cell, c.mono) for c in running.values()], [c for b in pending for c in b])
                time.sleep(0.2)
            outcome = "complete"
        except BaseException:
            # Ctrl-C or SIGTERM: stop children in order so each tears its testbed down.
            old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
            try:
                progress.close()
                stream.write(f"satbed matrix: stopping {len(running)} running cell(s)...\n")
                stream.flush()
                stop_children(list(running.values()))
                for h, ch in running.items():
                    collect_finished(ch)
                    if not ch.out:
                        record(ch, os.path.join(out, "cells", h), "interrupted")
                    elif ch.batch:
                        # Only the cell under way is interrupted; the batch's later cells never started.
                        record(ch, os.path.join(out, "cells", ch.cell.hash), "interrupted")
                clean_leftovers()
            finally:
                store.end_run(run_id, outcome)
                for s, handler in old.items():
                    signal.signal(s, handler)
            raise
        progress.close()
        store.end_run(run_id, outcome)
        stream.write(f"satbed matrix: {exp.name} complete in {fmt_s(time.monotonic() - progress.started)}; "
                     f"`satbed report {out}` writes {os.path.join(out, 'report.html')}\n")
    return counts


def _adopt(adopted: list[tuple[Cell, tuple[int, int]]], out: str) -> list[Child]:
    """Children a killed matrix left running, one per process: a batch's
    cells are collected from it in its order as they finish."""
    by_pid: dict[tuple[int, int], list[tuple[int, Cell, str]]] = {}
    for cell, live in adopted:
        cell_dir = os.path.join(out, "cells", cell.hash)
        try:
            with open(os.path.join(cell_dir, "cell.json"), encoding="utf-8") as f:
                b = json.load(f).get("batch") or {}
        except (OSError, ValueError):
            b = {}
        by_pid.setdefault(live, []).append((int(b.get("index", 0)), cell, str(b.get("dir") or "")))
    children = []
    for (pid, start), members in by_pid.items():
        members.sort(key=lambda m: m[0])
        first, batch_dir = members[0][1], members[0][2]
        now = time.monotonic()
        if batch_dir:
            children.append(Child(first, Orphan(pid, start, batch_dir), time.time(), now, now + first.timeout_s,
                                  batch=[m[1] for m in members], out=out))
        else:
            children.append(Child(first, Orphan(pid, start, os.path.join(out, "cells", first.hash)), time.time(),
                                  now, now + first.timeout_s))
    return children


def rows_of(exp: Experiment, out: str) -> list[CellRow]:
    """The stored rows of this experiment's cells (a results directory may hold others)."""
    path = os.path.join(os.path.abspath(out), "results.sqlite")
    if not os.path.exists(path):
        return []
    with Store(path) as store:
        found = {r.hash: r for r in store.cells()}
    return [found[c.hash] for c in exp.cells if c.hash in found]


def stop_children(children: list[Child]) -> None:
    for ch in children:
        if ch.proc.poll() is None:
            _signal(ch, signal.SIGTERM)
    deadline = time.monotonic() + TERM_GRACE_S
    for ch in children:
        try:
            ch.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal(ch, signal.SIGKILL, group=True)
            ch.proc.wait()


def fidelity(exp: Experiment, out: str, jobs: int | None = None, rounds: int = 3, backend: str = "mininet",
             stream=sys.stderr) -> dict:
    """Parallel fidelity: the first cell's goodput alone vs with other cells of
    the file running throughout (restarted as they finish, and the reference
    started once they are under way), so it meets their setup, transfer,
    teardown and analysis as a cell in a real matrix does. The background is
    what the matrix would run beside it: --jobs - 1 cells, or by default as
    many as the admission's CPU budget takes. Prints and returns the numbers."""
    from satbed.core.proc import require_root
    require_root()
    if not exp.cells:
        raise SatbedError(f"{exp.file}: no cells")
    base = exp.cells[0]
    if base.params["client"] == "ping":
        raise SatbedError("fidelity needs a transfer client (its first cell is ping)")
    admit = Admission.for_host(jobs)
    root = os.path.join(os.path.abspath(out), "fidelity", time.strftime("%Y%m%d-%H%M%S"))
    others = exp.cells[1:] or [base]
    started = 0

    def start(cell: Cell, name: str) -> Child:
        d = os.path.join(root, name)
        now = time.monotonic()
        return Child(cell, spawn(cell, d, backend), time.time(), now, now + cell.timeout_s)

    def measure(tag: str, with_others: bool) -> tuple[float | None, list[int]]:
        """The reference's goodput, and how many cells ran beside it (sampled)."""
        nonlocal started
        bg: list[Child] = []
        beside: list[int] = []
        try:
            def refill() -> None:
                nonlocal started
                bg[:] = [c for c in bg if c.proc.poll() is None]
                while with_others:
                    nxt = others[started % len(others)]
                    if admit.pick([nxt], [base] + [c.cell for c in bg]) is None:
                        break
                    bg.append(start(nxt, f"{tag}-bg{started}"))
                    started += 1
            refill()
            # Let the background reach its transfers before the reference starts.
            t_end = time.monotonic() + (20 if with_others else 0)
            while time.monotonic() < t_end:
                refill()
                time.sleep(0.5)
            ref = start(base, f"{tag}-ref")
            while ref.proc.poll() is None:
                if time.monotonic() > ref.deadline:
                    stop_children([ref])
                    break
                refill()
                beside.append(len(bg))
                time.sleep(0.5)
            row = collect(ref, os.path.join(root, f"{tag}-ref"))
        finally:
            stop_children(bg)
            if bg:
                clean_leftovers()
        if row.status == "ok" and row.goodput_bps:
            return row.goodput_bps, beside
        stream.write(f"  {tag}: {row.status} {row.error or 'no goodput'}\n")
        return None, beside

    alone: list[float] = []
    together: list[float] = []
    beside_all: list[int] = []
    for r in range(rounds):
        a, _ = measure(f"r{r}-alone", False)
        t, beside = measure(f"r{r}-parallel", True)
        beside_all += beside
        alone += [a] if a else []
        together += [t] if t else []
        n = f"{statistics.fmean(beside):.1f}" if beside else "?"
        stream.write(f"round {r + 1}/{rounds}: alone {human_bps(a) if a else 'failed'}, with {n} other "
                     f"cells {human_bps(t) if t else 'failed'}\n")
        stream.flush()
    if not alone or not together:
        raise SatbedError(f"fidelity: no successful reference cells (see {root})")
    a, t = statistics.fmean(alone), statistics.fmean(together)
    worst = min(together)
    n = statistics.fmean(beside_all) if beside_all else 0.0
    doc = {"cell": base.label(), "background": [c.label() for c in others], "admission": admit.describe(),
           "jobs": jobs, "cells_beside_mean": round(n, 2), "cells_beside_max": max(beside_all, default=0),
           "rounds": rounds, "alone_bps": alone, "parallel_bps": together, "alone_mean_bps": a,
           "parallel_mean_bps": t, "mean_diff_pct": 100 * (t - a) / a, "worst_diff_pct": 100 * (worst - a) / a,
           "dir": root}
    print(f"fidelity: {base.label()} with {n:.1f} other cells running ({admit.describe()}): "
          f"alone {human_bps(a)}, with others {human_bps(t)} ({doc['mean_diff_pct']:+.2f}%), "
          f"worst {human_bps(worst)} ({doc['worst_diff_pct']:+.2f}%)")
    with open(os.path.join(root, "fidelity.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
    return doc


# Clients without measurements borrow the transfer behaviour of a similar one.
SIMILAR = {"sftp": "scp", "rsync": "scp", "nuttcp-tcp": "ftp", "wget": "ftp", "iperf3": "ftp"}


def client_limit(params: dict, rate_bps: float | None) -> float:
    """How long a transfer may run: the time limit, else the clients' own
    stall limit (ClientContext.transfer_timeout)."""
    from satbed.backends.clients.base import stall_limit
    stall = stall_limit(params["size"], params["rtt"], rate_bps)
    return min(stall, params["time_limit"]) if params.get("time_limit") else stall


def wall_estimate(exp: Experiment, store_paths: list[str], jobs: int | None = None) -> dict:
    """Estimate a matrix's wall time from measured cells (typically a smaller
    size): per (client, PEP, BER) the measured transfer seconds per byte,
    interpolated linearly in RTT (window- and loss-limited TCP both take time
    proportional to RTT), scaled to each cell's size and capped at the
    clients' stall limit; a stalled measurement counts as its limit (a lower
    bound). Plus the measured per-cell overhead (setup, handshakes, teardown,
    analysis), fitted as a + b x size. Cells run longest first under the admission."""
    rows: list[CellRow] = []
    for p in store_paths:
        if not os.path.isfile(p):
            raise SatbedError(f"no results database {p}")
        with Store(p) as s:
            rows += [r for r in s.cells() if r.seconds and r.params.get("client") != "ping"
                     and r.status in ("ok", "limited", "failed", "timeout")]
    admit = Admission.for_host(jobs)
    points: dict[tuple, dict[float, list[float]]] = {}
    overheads: list[tuple[float, float]] = []
    for r in rows:
        p = r.params
        rate = r.config.get("link", {}).get("a_to_b", {}).get("rate_bps")
        if r.status == "ok":
            if not r.metrics.get("seconds"):
                continue
            per_byte = r.metrics["seconds"] / p["size"]
            overheads.append((p["size"], r.seconds - r.metrics["seconds"]))
        else:
            per_byte = client_limit(p, rate) / p["size"]
        points.setdefault((p["client"], p["pep"], p["ber"]), {}).setdefault(p["rtt"], []).append(per_byte)
    a, b = _fit(overheads)

    def per_byte(cell: Cell) -> float | None:
        p = cell.params
        for client in (p["client"], SIMILAR.get(p["client"])):
            curve = points.get((client, p["pep"], p["ber"]))
            if curve:
                return _interpolate({k: sum(v) / len(v) for k, v in curve.items()}, p["rtt"])
        return None

    times: list[tuple[float, Cell]] = []
    stalled = modelled = 0
    for c in exp.cells:
        rate = c.config["link"]["a_to_b"]["rate_bps"]
        limit = client_limit(c.params, rate)
        pb = per_byte(c)
        if pb is None:
            modelled += 1
            transfer = c.estimate_s - SETUP_S
        else:
            transfer = pb * c.params["size"]
        if transfer >= limit:
            stalled += 1
            transfer = limit
        times.append((a + b * c.params["size"] + transfer, c))
    times.sort(key=lambda tc: -tc[0])
    wall = admit.simulate([c for _, c in times], [t for t, _ in times])
    return {"cells": len(exp.cells), "admission": admit.describe(), "cell_seconds": round(sum(t for t, _ in times)),
            "wall_seconds": round(wall), "wall": fmt_s(wall), "measured_cells": len(rows),
            "cells_expected_to_stall": stalled, "cells_without_measurement": modelled,
            "overhead_s": {"base": round(a, 1), "per_mb": round(b * (1 << 20), 3)}}


def _fit(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares a + b x; flat when x does not vary."""
    if not pairs:
        return 3 * SETUP_S, 0.0
    xs, ys = [x for x, _ in pairs], [y for _, y in pairs]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return my, 0.0
    b = max(0.0, sum((x - mx) * (y - my) for x, y in pairs) / var)
    return my - b * mx, b


def _interpolate(curve: dict[float, float], x: float) -> float:
    ks = sorted(curve)
    if x <= ks[0]:
        return curve[ks[0]]
    if x >= ks[-1]:
        return curve[ks[-1]]
    for lo, hi in zip(ks, ks[1:]):
        if lo <= x <= hi:
            return curve[lo] + (curve[hi] - curve[lo]) * (x - lo) / (hi - lo)
    return curve[ks[-1]]


def _main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--run-cell":
        return run_cell_child(argv[1])
    if len(argv) == 2 and argv[0] == "--run-batch":
        return run_batch_child(argv[1])
    print("usage: python3 -m satbed.execution.matrix --run-cell DIR (internal; use `satbed matrix`)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
