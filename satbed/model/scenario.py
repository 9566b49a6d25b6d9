"""Scenario files (scenarios/*.yaml): a test as data, Flent-like. One file
holds the network (a topology by name, path or inline), each emulated
link's settings per direction, which PEP runs on which PEP node, each
host's TCP profile, the workload (the main flow between two named hosts
plus background traffic), and the sweep `satbed matrix` runs.

    name: spoofing
    topology: spoofing
    link: {rate: 1544kbit, rtt: 500}          # emulators not named under links:
    links:
      inet: {rate: 10mbit, delay: 25, queue: 40}
      sat:  {rate: 1544kbit, delay: 250, b_to_a: {ber: 1e-6}}
    peps: {h2: {name: pepd, options: ""}}     # PEP nodes not named run `pep` (default none)
    profiles: {h1: reno-sack-1500, h5: reno-sack-1500}
    workload:
      main: {client: ftp, between: [h1, h5], direction: download, size: 1M, start_after: 5}
      traffic: {duration: 60, groups: [{server: h3, client: h4, arrival: poisson, rate: 2, sizes: exp:200K}]}
    matrix:
      repetitions: 3
      axes: {size: [10K, 100K, 1M], pep: [none, pepd]}

`satbed run --scenario NAME` runs it once (the matrix block ignored);
`satbed matrix scenarios/NAME.yaml` runs its sweep. Both build each run's
configuration through experiment.run_config, so one run and one cell of the
same parameters are the same configuration."""

from __future__ import annotations

import dataclasses
import os


from satbed.core import yamlfile
from satbed.core.errors import SatbedError
from satbed.core.proc import REPO_ROOT
from satbed.model import peps, profiles, workload
from satbed.model.config import PepPlacement
from satbed.model.link import LinkConfig
from satbed.core.units import parse_ber, parse_delay_ms, parse_loss, parse_rate, parse_size

SCENARIO_DIR = os.path.join(REPO_ROOT, "scenarios")
TOP_KEYS = ("name", "description", "topology", "link", "links", "peps", "pep", "pep_options", "profiles",
            "workload", "captures", "seed", "analyze", "graphs", "matrix")
MAIN_KEYS = ("client", "between", "direction", "size", "time_limit", "start_after", "cwnd_trace", "rcvbuf")
LINK_PARAMS = ("rate", "ceil", "rtt", "ber", "loss", "queue", "emulator")      # the `link:` block: matrix parameters
# A named link's keys -> emulation.Direction fields, per direction.
DIRECTION_KEYS = {"rate": "rate_bps", "ceil": "ceil_bps", "burst": "burst_bytes", "cburst": "cburst_bytes",
                  "delay": "delay_ms", "ber": "ber", "loss": "loss", "queue": "queue_packets", "queue_bytes": "queue_bytes",
                  "gilbert_elliott": "gilbert_elliott", "outage": "outage", "profile": "profile"}


def find(name_or_path: str) -> str:
    if os.sep in name_or_path or name_or_path.endswith((".yaml", ".yml")):
        path = os.path.abspath(name_or_path)
    else:
        path = os.path.join(SCENARIO_DIR, name_or_path + ".yaml")
    if not os.path.isfile(path):
        known = sorted(f[:-5] for f in os.listdir(SCENARIO_DIR) if f.endswith(".yaml")) \
            if os.path.isdir(SCENARIO_DIR) else []
        raise SatbedError(f"unknown scenario {name_or_path!r} (known: {', '.join(known)})")
    return path


def read(path: str) -> dict:
    doc = yamlfile.load(path, "scenario")
    if not isinstance(doc, dict):
        raise SatbedError(f"{path}: a scenario is a mapping (topology:, workload:, ...)")
    return doc


def is_scenario(doc: object) -> bool:
    """An experiment file with fixed:/axes: is the older, chain-only shape."""
    return isinstance(doc, dict) and ("topology" in doc or "workload" in doc) and "fixed" not in doc


@dataclasses.dataclass
class Scenario:
    name: str
    path: str
    description: str
    params: dict            # run parameters (params.PARAMS keys) the scenario fixes
    matrix: dict            # repetitions, timeout, axes
    doc: dict               # the file, for extras()


def load(name_or_path: str) -> Scenario:
    path = find(name_or_path)
    try:
        return parse(read(path), path)
    except SatbedError as e:
        msg = str(e)
        raise SatbedError(msg if msg.startswith(path) else f"{path}: {msg}") from None


def parse(doc: dict, path: str) -> Scenario:
    unknown = sorted(set(doc) - set(TOP_KEYS))
    if unknown:
        raise SatbedError(f"unknown key(s) {', '.join(unknown)} (known: {', '.join(TOP_KEYS)})")
    params: dict = {"scenario": path}
    topo = doc.get("topology", "globalhawk")
    if isinstance(topo, dict):
        params["topology"] = path          # inline: the runner reads it from this file
    elif isinstance(topo, str):
        params["topology"] = topo if os.sep not in topo else os.path.join(os.path.dirname(path), topo)
    else:
        raise SatbedError("topology: a name, a path or an inline topology mapping")
    link = doc.get("link") or {}
    if not isinstance(link, dict):
        raise SatbedError("link: a mapping of " + ", ".join(LINK_PARAMS))
    for k, v in link.items():
        if k not in LINK_PARAMS:
            raise SatbedError(f"link: unknown key {k!r} (known: {', '.join(LINK_PARAMS)}; "
                              f"per-emulator settings go under links:)")
        params[k] = v
    for k in ("pep", "pep_options", "captures", "seed", "analyze", "graphs"):
        if k in doc:
            params[k] = doc[k]
    workload_doc = doc.get("workload") or {}
    if not isinstance(workload_doc, dict) or set(workload_doc) - {"main", "traffic"}:
        raise SatbedError("workload: a mapping with main: and traffic:")
    main = workload_doc.get("main") or {}
    if not isinstance(main, dict):
        raise SatbedError("workload.main: a mapping of " + ", ".join(MAIN_KEYS))
    for k, v in main.items():
        if k not in MAIN_KEYS:
            raise SatbedError(f"workload.main: unknown key {k!r} (known: {', '.join(MAIN_KEYS)})")
        if k not in ("between", "start_after", "cwnd_trace", "rcvbuf"):
            params[k] = v
    m = doc.get("matrix") or {}
    if not isinstance(m, dict) or set(m) - {"repetitions", "timeout", "axes", "variants", "reference"}:
        raise SatbedError("matrix: a mapping with repetitions:, timeout:, axes:, variants: and reference:")
    sc = Scenario(str(doc.get("name") or os.path.splitext(os.path.basename(path))[0]), path,
                  str(doc.get("description") or ""), params, m, doc)
    extras(sc.doc, path, seed=1)       # validate now: every error before any testbed
    return sc


# Where a dotted path may point: what a sweep (matrix axes) or `satbed run --set`
# changes beyond the matrix parameters. workload.main.between: which end opens
# the connection (the client tool runs on the first host); workload.main.rcvbuf:
# the receive buffer the client tool asks for.
PATH_ROOTS = ("links", "peps", "profiles", "workload.traffic", "workload.main.between", "workload.main.rcvbuf",
              "topology")


def check_path(path: str) -> str:
    if not any(path == r or path.startswith(r + ".") for r in PATH_ROOTS) or ".." in path or path.endswith("."):
        raise SatbedError(f"{path!r}: a dotted path into the scenario starts with "
                          f"{', '.join(r + '.' for r in PATH_ROOTS)} (e.g. links.sat.ber, "
                          f"workload.traffic.groups.0.concurrent, topology.routers.r1.interfaces.wan.queue)")
    return path


def split_overrides(overrides: dict) -> tuple[dict, dict]:
    """(scenario paths, topology paths without their `topology.` prefix)."""
    scen = {k: v for k, v in overrides.items() if not k.startswith("topology.")}
    topo = {k[len("topology."):]: v for k, v in overrides.items() if k.startswith("topology.")}
    return scen, topo


def topology_doc(path: str) -> dict | None:
    """The inline topology of a scenario file, if it has one."""
    doc = read(path)
    return doc.get("topology") if is_scenario(doc) and isinstance(doc.get("topology"), dict) else None


def link_config(doc: object, where: str, seed: int, default_backend: str = "auto", base_dir: str = "."):
    """A named link: the matrix-style keys for both directions, then
    a_to_b:/b_to_a: overrides. delay: is one way; rtt: is split evenly. A
    relative profile: is a file beside the scenario (base_dir), whatever
    directory satbed runs from."""
    if not isinstance(doc, dict):
        raise SatbedError(f"{where}: a mapping of link settings")
    allowed = set(DIRECTION_KEYS) | {"rtt", "emulator", "a_to_b", "b_to_a"}
    bad = sorted(set(doc) - allowed)
    if bad:
        raise SatbedError(f"{where}: unknown key(s) {', '.join(bad)} (known: {', '.join(sorted(allowed))})")
    if "rtt" in doc and "delay" in doc:
        raise SatbedError(f"{where}: give rtt: or delay: (one way), not both")

    def fields(d: dict, w: str) -> dict:
        out = {}
        for k, v in d.items():
            if k in ("rtt", "emulator", "a_to_b", "b_to_a"):
                continue
            if k not in DIRECTION_KEYS:
                raise SatbedError(f"{w}: unknown key {k!r}")
            if k in ("rate", "ceil"):
                v = parse_rate(v)
            elif k in ("burst", "cburst", "queue_bytes"):
                # 0 is a value of its own: the burst tc computes, no byte limit.
                v = 0 if v == 0 and not isinstance(v, bool) else parse_size(v)
            elif k == "delay":
                v = parse_delay_ms(v, f"{w} delay")
            elif k == "ber":
                v = parse_ber(v)
            elif k == "loss":
                v = parse_loss(v)
            elif k == "queue" and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise SatbedError(f"{w}: queue must be a positive number of packets")
            elif k == "profile" and isinstance(v, str):
                v = os.path.normpath(os.path.join(os.path.abspath(base_dir), v))
            out[DIRECTION_KEYS[k]] = v
        return out

    try:
        base = LinkConfig.symmetric(rate=doc.get("rate"), rtt_ms=doc.get("rtt", 0),
                                    ceil=doc.get("ceil"), backend=str(doc.get("emulator", default_backend)),
                                    seed=seed)
        common = fields(doc, where)
        if "rate_bps" in common and "ceil_bps" not in common:
            common["ceil_bps"] = common["rate_bps"]
        a = dataclasses.replace(base.a_to_b, **common)
        b = dataclasses.replace(base.b_to_a, **common)
        for key in ("a_to_b", "b_to_a"):
            if key in doc:
                if not isinstance(doc[key], dict):
                    raise SatbedError(f"{where}.{key}: a mapping of link settings")
                over = fields(doc[key], f"{where}.{key}")
                if key == "a_to_b":
                    a = dataclasses.replace(a, **over)
                else:
                    b = dataclasses.replace(b, **over)
        cfg = LinkConfig(a, b, seed, base.backend)
        cfg.validate()
    except SatbedError as e:
        raise SatbedError(e if str(e).startswith(where) else f"{where}: {e}") from None
    return cfg


def link_doc(link: LinkConfig) -> dict:
    """A link as a `links:` entry says it: what `--set links.NODE.KEY=...`
    starts from when the file gives NODE's link through `link:` (the emulators
    links: does not name), so the change keeps the rest of that link."""
    inverse = {field: key for key, field in DIRECTION_KEYS.items()}

    def keys(d) -> dict:
        return {inverse[f]: v for f, v in dataclasses.asdict(d).items() if v is not None and f in inverse}

    a, b = keys(link.a_to_b), keys(link.b_to_a)
    doc: dict = {**a, "emulator": link.backend}
    over = {k: v for k, v in b.items() if a.get(k) != v}
    if over:
        doc["b_to_a"] = over
    return doc


def with_paths(doc: dict, paths: dict, link: LinkConfig) -> dict:
    """The scenario document with --set (or matrix axis) paths applied. A path
    into links.NODE where links: does not name NODE changes the link `link:`
    gives NODE, not a link of defaults; an unknown NODE is refused by the
    configuration's cross-references (RunConfig.check_references)."""
    for k, v in paths.items():
        parts = k.split(".")
        if parts[0] == "links" and len(parts) >= 3:
            links = doc.get("links") if isinstance(doc.get("links"), dict) else {}
            if parts[1] not in links:
                named = link_doc(link)
                if parts[2] == "rtt":
                    named.pop("delay", None)        # the file's rtt, as delay: gives way to the new rtt
                elif parts[2] == "delay":
                    named.pop("rtt", None)
                doc = {**doc, "links": {**links, parts[1]: named}}
        doc = yamlfile.set_path(doc, k, v)
    return doc


def extras(doc: dict, path: str, seed: int) -> dict:
    """The RunConfig fields beyond the matrix parameters: per-emulator links,
    PEP placement, host profiles, the main flow's hosts, background traffic."""
    out: dict = {"scenario": path}
    links = doc.get("links") or {}
    if not isinstance(links, dict):
        raise SatbedError("links: a mapping of emulator node -> link settings")
    backend = str((doc.get("link") or {}).get("emulator", "auto"))
    out["links"] = {str(n): link_config(v, f"links.{n}", seed, backend, os.path.dirname(path))
                    for n, v in links.items()}
    peps_doc = doc.get("peps") or {}
    if not isinstance(peps_doc, dict):
        raise SatbedError("peps: a mapping of PEP node -> {name:, options:}")
    placements = {}
    for node, p in peps_doc.items():
        if isinstance(p, str):
            p = {"name": p}
        if not isinstance(p, dict) or set(p) - {"name", "options"} or "name" not in p:
            raise SatbedError(f"peps.{node}: {{name: PEP, options: 'k=v ...'}} or a PEP name")
        peps.check(str(p["name"]))
        placements[str(node)] = PepPlacement(str(p["name"]), str(p.get("options", "")))
    out["peps"] = placements
    host_profiles = doc.get("profiles") or {}
    if not isinstance(host_profiles, dict):
        raise SatbedError("profiles: a mapping of host -> TCP profile name")
    for host, name in host_profiles.items():
        profiles.load(str(name))
    out["profiles"] = {str(h): str(n) for h, n in host_profiles.items()}
    workload_doc = doc.get("workload") or {}
    main = workload_doc.get("main") or {}
    between = main.get("between")
    if between is not None:
        if not isinstance(between, list) or len(between) != 2 or not all(isinstance(h, str) for h in between):
            raise SatbedError("workload.main.between: [near host, far host] (the client tool runs on the first)")
        out["endpoints"] = list(between)
    start_after = main.get("start_after", 0)
    if isinstance(start_after, bool) or not isinstance(start_after, (int, float)) or start_after < 0:
        raise SatbedError(f"workload.main.start_after: seconds, got {start_after!r}")
    out["main_delay_s"] = float(start_after)
    cwnd = main.get("cwnd_trace", 0)
    if isinstance(cwnd, bool) or not isinstance(cwnd, (int, float)) or not (cwnd == 0 or 0.01 <= cwnd <= 10):
        raise SatbedError(f"workload.main.cwnd_trace: the sender's ss sampling period in seconds "
                          f"(0.01..10, 0 = off), got {cwnd!r}")
    if cwnd:
        out["cwnd_interval_s"] = float(cwnd)
    rcvbuf = main.get("rcvbuf", 0)
    if isinstance(rcvbuf, bool) or not isinstance(rcvbuf, int) or rcvbuf < 0:
        raise SatbedError(f"workload.main.rcvbuf: the bytes of receive buffer the client tool asks for "
                          f"(SO_RCVBUF; 0 = its own choice), got {rcvbuf!r}")
    if rcvbuf:
        out["client_rcvbuf"] = rcvbuf
    if workload_doc.get("traffic"):
        out["traffic"] = workload.TrafficSpec.from_dict(workload_doc["traffic"], "workload.traffic").to_dict()
    return out
