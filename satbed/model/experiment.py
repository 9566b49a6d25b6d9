"""Experiment files: a declarative file (experiments/*.yaml, or a scenario
with a `matrix:` section) expands into cells, each a RunConfig with an
identity. `satbed matrix` runs them (satbed/execution/matrix.py).

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
`fixed:`, for studies whose configurations are not a cross product.
`clients:` limits a variant to those clients: several entries may share a
name for disjoint clients (the Global Hawk study's hosts are NcFTP's for
FTP, the 2.6.18 host for the rest). A variant sets no axis unless it says
so: `replaces: [pep, pep_options]` gives its cells the variant's PEP whatever
the pep axis says (the axis collapses to one cell for it; a study's own PEP is
a condition of its own). Each cell records its variant's name in the
`variant` parameter.

Parameters (in `fixed` as one value, in `axes` as a list) are those of
satbed/model/params.py: client, pep, pep_options, rtt (ms), ber, size,
direction, rate, ceil, queue (packets), emulator (auto|userspace|tc|bridge),
captures, topology, analyze, graphs, time_limit (seconds), seed, and link (a
mapping of per-direction emulator fields applied to both directions, e.g.
{cburst_bytes: 0, queue_bytes: 262144}).

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
cell rather than reusing a stale result. The PEPs' options in it are the
effective ones (peps.effective_options: pepd's defaults on a lossy link).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from collections.abc import Collection
from dataclasses import dataclass, field

from satbed.core import yamlfile
from satbed.core.errors import SatbedError
from satbed.core.proc import REPO_ROOT
from satbed.model import params as P
from satbed.model import peps, scenario, schemas, segments, topology
from satbed.model.config import PepPlacement, RunConfig
from satbed.model.link import LinkConfig

BACKENDS = ("mininet", "docker", "ansible")
MAX_CELLS = 10_000          # about a week of 100 MB cells on 2 cores


@dataclass
class Cell:
    params: dict                 # every parameter, normalised
    repetition: int
    config: dict                 # RunConfig.to_dict() plus the testbed backend: what the hash covers
    hash: str
    # Filled in by execution (satbed/execution/estimate.py), for scheduling:
    estimate_s: float = 0.0      # expected wall time, for scheduling and the ETA
    timeout_s: float = 0.0
    cost: float = 0.0            # cores it keeps busy, for admission
    warmup_s: float = 0.0        # from its start until that cost shows in the measured load

    def label(self) -> str:
        p = self.params
        paths = "".join(f" {k}={v}" for k, v in sorted(p.items()) if "." in k)
        variant = f" [{p['variant']}]" if p.get("variant") else ""
        opts = f" {p['pep_options']}" if p.get("pep_options") else ""
        loss = f" loss={p['loss']:g}" if p.get("loss") else ""
        return (f"{p['client']}/{p['pep']}{opts}{variant} rtt={p['rtt']:g} ber={p['ber']:g}{loss} "
                f"size={human_size(p['size'])}{paths} #{self.repetition}")

    def run_config(self) -> RunConfig:
        return RunConfig.from_dict(self.config)


@dataclass
class Experiment:
    name: str
    file: str
    description: str
    cells: list[Cell] = field(default_factory=list)
    reference: dict | None = None   # parameter: value of the row the summary compares every row with
    timeout: float | None = None    # the file's per-cell limit (None: from each cell's size and rate)


@dataclass
class Variant:
    name: str
    settings: dict               # parameter or scenario path -> normalised value
    clients: list[str] | None    # the clients it applies to (None: all)


def human_size(n: int) -> str:
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def load(path: str, clients: Collection[str], backend: str = "mininet",
         repetitions: int | None = None, variants: Collection[str] = ()) -> Experiment:
    """Read and validate an experiment file; every error is one line naming
    the file. clients: the client names there are (the backends' adapters);
    variants: run only these of the file's variants (all when empty)."""
    doc = yamlfile.load(path, "experiment file")
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
        return _build(doc, path, backend, clients, tuple(variants))
    except SatbedError as e:
        raise SatbedError(f"{path}: {e}") from None


def _build(doc, path: str, backend: str, clients: Collection[str], only: tuple[str, ...] = ()) -> Experiment:
    schemas.validate(doc, "experiment")
    if backend not in BACKENDS:
        raise SatbedError(f"unknown testbed backend {backend!r} (known: {', '.join(BACKENDS)})")
    name = str(doc.get("name") or os.path.splitext(os.path.basename(path))[0])
    reps = doc.get("repetitions", 1)
    # JSON Schema's integer takes 2.0; range() does not.
    if isinstance(reps, float):
        raise SatbedError(f"repetitions: a whole number, got {reps!r}")
    timeout = doc.get("timeout")
    if timeout is not None and not (isinstance(timeout, (int, float)) and 0 < timeout < math.inf):
        raise SatbedError(f"timeout: a positive, finite number of seconds, got {timeout!r}")
    fixed = doc.get("fixed") or {}
    axes = doc.get("axes") or {}
    base = P.resolve([("fixed", fixed)], clients)
    axis_values: list[tuple[str, list]] = []
    for k, vs in axes.items():
        if k in fixed:
            raise SatbedError(f"axes.{k}: also given in fixed:")
        values = [P.normalise(f"axes.{k}", k, v, clients) for v in vs]
        if len({json.dumps(v, sort_keys=True) for v in values}) != len(values):
            raise SatbedError(f"axes.{k}: repeated value")
        axis_values.append((k, values))
    variants = _variants(doc.get("variants"), {k for k, _ in axis_values}, clients)
    if only:
        names = sorted({v.name for v in variants})
        unknown = [n for n in only if n not in names]
        if unknown:
            raise SatbedError(f"--variant {unknown[0]}: not a variant of this file "
                              f"(variants: {', '.join(names) or 'none'})")
        variants = [v for v in variants if v.name in only]
    total = reps * math.prod(len(values) for _, values in axis_values) * max(1, len(variants))
    if total > MAX_CELLS:
        raise SatbedError(f"{total} cells: more than {MAX_CELLS} (split the experiment)")
    combos = [dict(base)]
    for k, values in axis_values:
        combos = [{**c, k: v} for c in combos for v in values]
    given = set(fixed) | {k for k, _ in axis_values}
    if variants:
        for v in variants:
            _scenario_parameters_given(base.get("scenario"), v.settings.get("scenario"), given | set(v.settings),
                                       [{**c, **v.settings} for c in combos], clients)
        combos = [{**c, **v.settings, "variant": v.name} for c in combos for v in variants
                  if v.clients is None or {**c, **v.settings}["client"] in v.clients]
    else:
        _scenario_parameters_given(base.get("scenario"), None, given, combos, clients)
    # A pep_options axis beside pep: [none, pepd] (the Global Hawk matrix's
    # pepd wan=rate rows) runs the no-PEP cells once, not once per option
    # (the hash dedupes them below).
    combos = [without_options_for_no_pep(c) for c in combos]
    exp = Experiment(name, path, str(doc.get("description") or ""),
                     reference=_reference(doc.get("reference"), combos, clients, filtered=bool(only)),
                     timeout=timeout)
    seen: set[str] = set()
    for params in combos:
        for rep in range(reps):
            cell = make_cell(params, rep, clients, backend)
            if cell.hash not in seen:
                seen.add(cell.hash)
                exp.cells.append(cell)
    return exp


def without_options_for_no_pep(params: dict) -> dict:
    """A PEP's options without a PEP mean nothing: a cell without one has none."""
    return {**params, "pep_options": ""} if params.get("pep") == "none" and params.get("pep_options") else params


def _reference(doc: dict | None, combos: list[dict], clients: Collection[str],
               filtered: bool = False) -> dict | None:
    """The summary's reference row (parameter: value): it must name
    parameters the experiment has and match at least one cell."""
    if not doc:
        return None
    ref = {}
    for k, v in doc.items():
        if k not in P.PARAMS:
            raise SatbedError(f"reference.{k}: not a parameter (known: {', '.join(sorted(P.PARAMS))})")
        ref[k] = P.normalise(f"reference.{k}", k, v, clients)
    if not any(all(c.get(k) == v for k, v in ref.items()) for c in combos):
        if filtered:
            return None     # --variant left out the reference row: no percentages to give
        raise SatbedError(f"reference: no cell has {', '.join(f'{k}={v}' for k, v in ref.items())}")
    return ref


def _scenario_parameters_given(fixed_scenario: str | None, variant_scenario: str | None, given: set[str],
                               combos: list[dict], clients: Collection[str]) -> None:
    """An experiment file takes a scenario's topology, links, PEPs, profiles
    and workload, but its parameters (topology, link rate and delay, PEP,
    client, size...) from fixed:, axes: and variants:. Where the scenario
    sets one of them to another value than the cells would run with, and the
    file does not name it, the file is refused: a silently different network
    is worse than one line asking for the value."""
    path = variant_scenario or fixed_scenario
    if not path:
        return
    own = scenario.load(path).params
    for k, v in own.items():
        if k == "scenario" or k in given or k not in P.PARAMS:
            continue
        want = P.normalise(f"{path}: {k}", k, v, clients)
        for c in combos:
            if c.get(k) != want:
                raise SatbedError(f"scenario {path} sets {k}: {v!r}, but these cells would run with "
                                  f"{c.get(k)!r}: an experiment file takes its parameters from fixed:, axes: "
                                  f"and variants:, not from the scenario; write {k}: in fixed:")


def _variants(doc, axes: set[str], known_clients: Collection[str]) -> list[Variant]:
    # The shape (a list of {name, set, clients}) is the schema's.
    out: list[Variant] = []
    for i, v in enumerate(doc or []):
        where = f"variants.{i}"
        settings = v.get("set") or {}
        replaces = set(v.get("replaces") or ())
        for k in sorted(replaces):
            if k not in axes or k not in settings:
                raise SatbedError(f"{where}.replaces.{k}: names no axis that this variant's set: gives")
        for k in settings:
            if k in axes and k not in replaces:
                raise SatbedError(f"{where}.set.{k}: also an axis (list it under replaces: to give this "
                                  f"variant's cells its own value)")
            if k == "variant":
                raise SatbedError(f"{where}.set.variant: the variant's name is its name:")
        clients = v.get("clients")
        if clients is not None:
            clients = [P.normalise(f"{where}.clients", "client", c, known_clients) for c in clients]
        out.append(Variant(str(v["name"]), P.resolve([(f"{where}.set", settings)], known_clients, base={}),
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


def run_config(params: dict, repetition: int, clients: Collection[str]) -> RunConfig:
    """The RunConfig of a cell (or of `satbed run`): the parameters, the
    scenario they name with its paths set, and the PEPs' effective options;
    raises SatbedError for a bad combination."""
    seed = params["seed"] + repetition
    extra = {"queue_packets": params["queue"]} if params["queue"] else {}
    ber, loss = params["ber"], params["loss"]
    if params["ber_unit"] == "packet":
        # The figure read per packet: per-packet loss, combined with any loss given.
        ber, loss = 0.0, (1 - (1 - loss) * (1 - ber)) if loss else ber
    link = LinkConfig.symmetric(rate=params["rate"], rtt_ms=params["rtt"], ber=ber, loss=loss,
                                ceil=params["ceil"], backend=params["emulator"], seed=seed, **extra)
    if params["link"]:
        link = dataclasses.replace(link, a_to_b=dataclasses.replace(link.a_to_b, **params["link"]),
                                   b_to_a=dataclasses.replace(link.b_to_a, **params["link"]))
    extra = {}
    paths = {k: v for k, v in params.items() if "." in k}
    if params.get("scenario"):
        doc = scenario.read(params["scenario"])
        scen_paths, topo_paths = scenario.split_overrides(paths)
        doc = scenario.with_paths(doc, scen_paths, link)
        extra = scenario.extras(doc, params["scenario"], seed)
        if topo_paths:
            extra["topology_overrides"] = topo_paths
    elif paths:
        raise SatbedError(f"{next(iter(paths))}: dotted paths need a scenario file")
    cfg = RunConfig(client=params["client"], pep=params["pep"], pep_options=params["pep_options"], link=link,
                    size_bytes=params["size"], direction=params["direction"], topology=params["topology"],
                    captures=params["captures"], seed=seed, analyze=params["analyze"],
                    graphs=params["graphs"], time_limit_s=params["time_limit"], **extra)
    cfg.validate(clients)
    return with_effective_options(cfg)


def with_effective_options(cfg: RunConfig) -> RunConfig:
    """cfg with each PEP node's options as it will run them
    (peps.effective_options, from the BER of the link its WAN port sends
    into), so config.json and the cell's identity say what ran. A node
    left to the default PEP keeps it unless its link's options differ from
    the others': then it gets a placement of its own."""
    names = {cfg.pep, *(p.name for p in cfg.peps.values())}
    bers = [d.ber for link in (cfg.link, *cfg.links.values()) for d in (link.a_to_b, link.b_to_a)]
    if not any(n in peps.BER_DEFAULTS for n in names) or not any(b > 0 for b in bers):
        return cfg
    spec = topology.load(cfg.topology, cfg.topology_overrides)
    placed = dict(cfg.peps)
    defaulted: dict[str, str] = {}
    for node in (t.name for t in spec.of_kind("pep")):
        given = cfg.peps.get(node, PepPlacement(cfg.pep, cfg.pep_options))
        link = cfg.links.get(segments.facing_emulator(spec, node), cfg.link)
        out = link.a_to_b if spec.transparent[node].side == "a" else link.b_to_a
        options = peps.effective_options(given.name, given.options, out.ber)
        if node in cfg.peps:
            placed[node] = PepPlacement(given.name, options)
        else:
            defaulted[node] = options
    pep_options = cfg.pep_options
    if len(set(defaulted.values())) == 1:
        pep_options = next(iter(defaulted.values()))
    else:
        placed.update({n: PepPlacement(cfg.pep, o) for n, o in defaulted.items()})
    return dataclasses.replace(cfg, pep_options=pep_options, peps=placed)


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


def make_cell(params: dict, repetition: int, clients: Collection[str], backend: str = "mininet") -> Cell:
    try:
        cfg = run_config(params, repetition, clients)
    except SatbedError as e:
        raise SatbedError(f"cell {params['client']}/{params['pep']} rtt={params['rtt']:g} "
                          f"ber={params['ber']:g}: {e}") from None
    config = {**cfg.to_dict(), "testbed_backend": backend}
    return Cell(dict(params), repetition, config, cell_digest(config))
