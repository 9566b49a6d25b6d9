"""One run: build the testbed, start the link, the PEPs and the captures, run
the client, tear everything down, and leave a self-describing directory:

  RUN/config.json  RUN/environment.json  RUN/result.json
  RUN/captures/*.pcap  RUN/emulator/  RUN/pep/  RUN/logs/  RUN/analysis/  RUN/report.html
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

from satbed import clients, counters, cwnd, emulation, environment, paths, peps, topology, traffic, watch
from satbed import ansible as ansible_backend
from satbed import docker as docker_backend
from satbed.captures import Captures
from satbed.clients.base import ClientContext
from satbed.emulation import LinkConfig
from satbed.errors import SatbedError
from satbed.clients.transfer import keep_files_wanted
from satbed.files import write_json
from satbed.testbed import Testbed, remove_run_files

DIRECTIONS = ("download", "upload")
CAPTURES = ("headers", "full", "none")
# result.json and config.json carry it; 2: routers, several links, per-node PEPs, plan/, traffic, counters.
RESULT_FORMAT = 2


@dataclass
class PepPlacement:
    """Which PEP runs on one PEP node, with its options (`none`: a bridge)."""
    name: str = "none"
    options: str = ""


@dataclass
class RunConfig:
    client: str = "ping"
    pep: str = "none"
    pep_options: str = ""
    link: LinkConfig = field(default_factory=LinkConfig)
    size_bytes: int = 10 << 20
    direction: str = "download"
    topology: str = "globalhawk"
    captures: str = "headers"
    seed: int = 1
    analyze: bool = True
    graphs: bool = True                 # draw the graphs and report.html now, or on `satbed report`
    time_limit_s: float | None = None   # stop a longer transfer and measure what it delivered
    # Beyond the chain (all empty for it, so its configurations and cell hashes stay as they were):
    links: dict[str, LinkConfig] = field(default_factory=dict)      # emulator node -> its link; others get `link`
    peps: dict[str, PepPlacement] = field(default_factory=dict)     # PEP node -> its PEP; others get `pep`
    profiles: dict[str, str] = field(default_factory=dict)          # host -> TCP profile, over the topology's
    endpoints: list[str] = field(default_factory=list)              # main flow [a, b]; default roles ground, aircraft
    traffic: dict = field(default_factory=dict)                     # background traffic (satbed.traffic.TrafficSpec)
    main_delay_s: float = 0.0                                       # the main flow starts this long after the traffic
    cwnd_interval_s: float = 0.0                                    # sample the sender's cwnd (ss -ti) this often
    scenario: str = ""                                              # the scenario file it came from
    topology_overrides: dict = field(default_factory=dict)          # dotted path in the topology -> value

    NEW_FIELDS = ("links", "peps", "profiles", "endpoints", "traffic", "main_delay_s", "scenario",
                  "topology_overrides", "cwnd_interval_s")

    def validate(self) -> None:
        if self.topology_overrides:
            topology.load(self.topology, self.topology_overrides)
        else:
            topology.find(self.topology)
        clients.get(self.client)
        peps.check(self.pep)
        for node, placement in self.peps.items():
            peps.check(placement.name)
        for link in self.links.values():
            link.validate()
        if self.traffic:
            traffic.TrafficSpec.from_dict(self.traffic)
        if self.direction not in DIRECTIONS:
            raise SatbedError(f"unknown direction {self.direction!r} (known: {', '.join(DIRECTIONS)})")
        if self.captures not in CAPTURES:
            raise SatbedError(f"unknown captures {self.captures!r} (known: {', '.join(CAPTURES)})")
        if self.time_limit_s is not None and not 0 < self.time_limit_s < float("inf"):
            raise SatbedError(f"time limit must be a positive number of seconds, got {self.time_limit_s!r}")
        self.link.validate()

    def to_dict(self) -> dict:
        doc = dataclasses.asdict(self)
        for k in self.NEW_FIELDS:
            if not doc[k]:
                del doc[k]
        return doc

    @classmethod
    def from_dict(cls, doc: dict) -> "RunConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in doc.items() if k in known and k not in ("link", "links", "peps")}
        return cls(link=LinkConfig.from_dict(doc["link"]),
                   links={n: LinkConfig.from_dict(v) for n, v in (doc.get("links") or {}).items()},
                   peps={n: PepPlacement(**v) for n, v in (doc.get("peps") or {}).items()}, **kw)

    def slug(self) -> str:
        if self.scenario:
            name = os.path.splitext(os.path.basename(self.scenario))[0]
            used = sorted(({peps.slug(p.name) for p in self.peps.values()} | {peps.slug(self.pep)}) - {"none"})
            return f"{name}-{self.client}-{'+'.join(used) or 'none'}-{self.direction}"
        return (f"{self.client}-{peps.slug(self.pep)}-rtt{self.link.rtt_ms:g}-ber{self.link.a_to_b.ber:g}"
                f"-{self.direction}")


@dataclass
class Plan:
    """What a run's meaning is, resolved once from the topology and the
    configuration: the main flow's hosts, each emulator's link, each PEP
    node's PEP and side, the link the main flow's figures come from."""
    a: str                              # the main flow's near end (its client tool; ClientContext.ground)
    b: str                              # the far end (its server; ClientContext.aircraft)
    links: dict[str, LinkConfig]        # every emulator node -> its link
    peps: dict[str, PepPlacement]       # every PEP node -> its PEP
    sides: dict[str, str]               # PEP node -> a | b
    pep_links: dict[str, str]           # PEP node -> the emulator its WAN faces
    path_emulators: list[tuple[str, str]]   # (emulator, port facing a) along a -> b
    profiles: dict[str, str]            # host -> TCP profile name ("" : the kernel's as they are)

    @property
    def primary(self) -> str | None:
        """The emulator whose ports are the WAN vantage points: on the main
        path, the one with the longest delay (the satellite), first on ties."""
        if not self.path_emulators:
            return None
        return max(self.path_emulators, key=lambda e: self.links[e[0]].rtt_ms)[0]

    def path_rtt_ms(self) -> float:
        return sum(self.links[e].rtt_ms for e, _ in self.path_emulators)

    def path_rate_bps(self) -> int | None:
        rates = [self.links[e].rate_bps for e, _ in self.path_emulators if self.links[e].rate_bps]
        return min(rates) if rates else None

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "primary_emulator": self.primary,
                "path_emulators": [{"emulator": e, "port_facing_a": p} for e, p in self.path_emulators],
                "peps": {n: {**dataclasses.asdict(p), "side": self.sides[n], "link": self.pep_links.get(n)}
                         for n, p in self.peps.items()},
                "profiles": self.profiles}


def plan(cfg: RunConfig, spec: topology.TopologySpec) -> Plan:
    def bad(msg: str) -> SatbedError:
        return SatbedError(f"topology {spec.name}: {msg}")

    if cfg.endpoints:
        if len(cfg.endpoints) != 2 or cfg.endpoints[0] == cfg.endpoints[1]:
            raise bad(f"the main flow is between two different hosts, got {cfg.endpoints!r}")
        a, b = cfg.endpoints
        for h in (a, b):
            if h not in spec.hosts:
                raise bad(f"no host {h!r} for the main flow (hosts: {', '.join(spec.hosts)})")
    else:
        ground, aircraft = spec.host_with_role("ground"), spec.host_with_role("aircraft")
        if ground is None or aircraft is None:
            raise bad("name the main flow's hosts (workload main: between: [a, b]), or give one host "
                      "role: ground and one role: aircraft")
        a, b = ground.name, aircraft.name
    if not spec.path(a, b):
        raise bad(f"no path from {a} to {b}")
    emus = [t.name for t in spec.of_kind("emulator")]
    for name in cfg.links:
        if name not in emus:
            raise bad(f"link {name!r} names no emulator node (emulators: {', '.join(emus) or 'none'})")
    links = {e: cfg.links.get(e, cfg.link) for e in emus}
    pep_nodes = [t.name for t in spec.of_kind("pep")]
    for name in cfg.peps:
        if name not in pep_nodes:
            raise bad(f"PEP placement {name!r} names no pep node (pep nodes: {', '.join(pep_nodes) or 'none'})")
    placements = {n: cfg.peps.get(n, PepPlacement(cfg.pep, cfg.pep_options)) for n in pep_nodes}
    pep_links = {}
    for n in pep_nodes:
        faced = topology.facing_emulator(spec, n)
        if faced:
            pep_links[n] = faced
    for host in cfg.profiles:
        if host not in spec.hosts:
            raise bad(f"TCP profile for {host!r}, which is no host (hosts: {', '.join(spec.hosts)})")
    profiles = {h: cfg.profiles.get(h, spec.hosts[h].profile) for h in spec.hosts}
    return Plan(a, b, links, placements, {n: spec.transparent[n].side for n in pep_nodes}, pep_links,
                spec.emulators_on_path(a, b), profiles)


def config_document(cfg: RunConfig, spec: topology.TopologySpec, the_plan: Plan) -> dict:
    """config.json: the configuration as given, the topology as parsed and the
    plan resolved from it (analysis reads the main flow's hosts from it)."""
    return {**cfg.to_dict(), "format": RESULT_FORMAT, "topology_spec": spec.to_dict(),
            "plan": the_plan.to_dict()}


def run(cfg: RunConfig, out: str, run_dir: str | None = None,
        backend: str = "mininet") -> tuple[str, dict]:
    """Run one experiment; returns (run directory, result). Raises SatbedError
    after writing the result when the run fails."""
    cfg.validate()
    for name in {cfg.pep, *(p.name for p in cfg.peps.values())}:
        peps.check_backend(name, backend)
    # Every tool gets absolute paths: sshd changes to /, vsftpd reads its
    # anon_root as given, and a matrix cell runs from the repository root.
    out = paths.results_dir(out)
    # The payload and the received copy sit in the run directory side by side.
    paths.require_space(out, 2 * cfg.size_bytes, f"a {cfg.size_bytes} byte transfer")
    spec = topology.load(cfg.topology, cfg.topology_overrides)
    the_plan = plan(cfg, spec)
    client = clients.get(cfg.client)
    tb = Testbed(spec, backend=backend)
    if run_dir is None:
        run_dir = os.path.join(out, f"{time.strftime('%Y%m%d-%H%M%S')}-{cfg.slug()}-{tb.prefix}")
    run_dir = paths.private_dir(os.path.abspath(run_dir))
    os.makedirs(os.path.join(run_dir, "logs"), exist_ok=True)
    tb.record.run_dir = run_dir     # `satbed clean` removes a killed run's payloads and keys
    write_json(os.path.join(run_dir, "config.json"), config_document(cfg, spec, the_plan))

    result: dict = {"format": RESULT_FORMAT, "client": cfg.client, "pep": cfg.pep, "direction": cfg.direction,
                    "started": time.time(), "testbed_prefix": tb.prefix}
    env = environment.collect()
    emus: dict[str, emulation.Emulator] = {}
    pep_list: list[peps.Pep] = []
    caps = None
    sampler: counters.CounterSampler | None = None
    cwnd_sampler: cwnd.CwndSampler | None = None
    background: traffic.Traffic | None = None
    failure: BaseException | None = None
    try:
        if not the_plan.links and (cfg.link.rtt_ms or cfg.link.a_to_b.ber):
            raise SatbedError(f"topology {spec.name} has no emulator node for --rtt/--ber")
        # The emulator backend decides whether its node gets a kernel bridge.
        pep_images = {n: p.name for n, p in the_plan.peps.items()}
        with docker_backend.for_run(backend, tb.record, run_dir, cfg.pep, pep_images), \
                ansible_backend.for_run(backend, spec, tb.prefix, run_dir):
            tb.start(bridge_kinds=("pep", "bridge"), profiles=the_plan.profiles)
        env["testbed"] = (ansible_backend.describe(tb) if backend == "ansible"
                          else docker_backend.describe_testbed(tb))
        if tb.tcp_profiles:
            env["tcp_profiles"] = tb.tcp_profiles
        if tb.queue_commands:
            env["router_queues"] = tb.queue_commands
        several = len(the_plan.links) > 1
        for name, link in the_plan.links.items():
            node = tb.nodes[name]
            emu = emulation.make(node, link, run_dir, captured=cfg.captures != "none",
                                 stats_dir=os.path.join(run_dir, "emulator", name) if several else "")
            emus[name] = emu
            emu.start()
        for name, placement in the_plan.peps.items():
            link = the_plan.links.get(the_plan.pep_links.get(name, ""), cfg.link)
            pep = peps.Pep(placement.name, tb.nodes[name], the_plan.sides[name], link, run_dir, placement.options)
            pep_list.append(pep)
            env.setdefault("peps", {})[name] = peps.describe(placement.name)
            pep.start()
        ground, aircraft = tb.host(the_plan.a), tb.host(the_plan.b)
        # start returned for each PEP; now prove they split (pep/CONTRACT.md).
        proof = peps.prove_split(pep_list, ground, aircraft, the_plan.path_rtt_ms())
        if proof:
            result["split_proof"] = proof
        caps = Captures(vantage_points(tb, the_plan), run_dir, cfg.captures)
        caps.start()
        router_ports = [i for r in tb.routers.values() for i in r.intfs.values()]
        if router_ports:
            sampler = counters.CounterSampler(router_ports, run_dir)
            sampler.start()
        if cfg.traffic:
            background = traffic.Traffic(traffic.TrafficSpec.from_dict(cfg.traffic), tb.hosts, run_dir)
            background.start()
        if cfg.main_delay_s:
            time.sleep(cfg.main_delay_s)
        ctx = ClientContext(ground=ground, aircraft=aircraft, direction=cfg.direction,
                            size_bytes=cfg.size_bytes, run_dir=run_dir, rate_bps=the_plan.path_rate_bps(),
                            rtt_ms=the_plan.path_rtt_ms(), seed=cfg.seed, time_limit_s=cfg.time_limit_s)
        if cfg.cwnd_interval_s:
            sender, receiver = (ground, aircraft) if cfg.direction == "upload" else (aircraft, ground)
            cwnd_sampler = cwnd.CwndSampler(sender, str(receiver.ip.ip), run_dir, cfg.cwnd_interval_s)
            cwnd_sampler.start()
        # Outages and profiles count from here: the main flow's start.
        clocks = {name: emu.start_clock() for name, emu in emus.items()}
        if any(v is not None for v in clocks.values()):
            result["schedule_clock_started_s"] = clocks
            # Wall time of the schedules' start, to place outages on the
            # captures' and PEPs' time axes (analysis/outage.py).
            result["schedule_clock_wall_s"] = time.time()
        # The machine's load when the measurement starts (1, 5, 15 min): figures from a loaded box say so.
        result["loadavg"] = [round(x, 2) for x in os.getloadavg()]
        # A dead PEP or emulator is named, not the client it stranded.
        with watch.guarded(pep_list, list(emus.values())):
            result.update(client.run(ctx))
        env["offloads"] = tb.offload_state()
        env["tcp_congestion_control"] = tb.tcp_cc
    except BaseException as e:  # recorded, then re-raised after teardown
        failure = e
    finally:
        # A second Ctrl-C must not cut the teardown short: it is noted, and
        # the run ends as interrupted once everything is removed.
        with shielded() as late:
            if background is not None:
                result["traffic"] = _safely(background.stop, result)
            if sampler is not None:
                result["counters"] = _safely(sampler.stop, result)
            if cwnd_sampler is not None:
                result["cwnd_trace"] = _safely(cwnd_sampler.stop, result)
            if caps is not None:
                result["captures"] = _safely(caps.stop, result)
            if pep_list:
                nodes = {p.node.name: {**(_safely(p.stop, result) or {}), "pep": p.name, "side": p.role}
                         for p in pep_list}
                result["pep"] = {"name": cfg.pep if len({p.name for p in pep_list}) == 1 else "mixed",
                                 "nodes": nodes,
                                 "connections_split": sum(n.get("connections_split", 0) for n in nodes.values()
                                                          if isinstance(n.get("connections_split", 0), int))}
            if emus:
                stopped = {name: _safely(emu.stop, result) for name, emu in emus.items()}
                primary = the_plan.primary or next(iter(emus))
                result["emulator"] = stopped[primary]
                if several:
                    result["emulators"] = stopped
                env["emulator"] = {"backend": emus[primary].backend}
                if getattr(emus[primary], "spin_us", None) is not None:
                    env["emulator"]["spin_us"] = emus[primary].spin_us
            _safely(tb.stop, result)
            result["finished"] = time.time()
            if failure is None and late:
                failure = KeyboardInterrupt()
            if failure is not None:
                result["error"] = _describe(failure)
            write_json(os.path.join(run_dir, "environment.json"), env)
            write_json(os.path.join(run_dir, "result.json"), result)
            if not keep_files_wanted():
                remove_run_files(run_dir)
    if failure is not None:
        if isinstance(failure, SatbedError):
            raise SatbedError(f"{failure} (run directory: {run_dir})") from None
        raise failure
    if cfg.analyze and cfg.captures != "none":
        result = analyze(run_dir, result, graphs=cfg.graphs)
    return run_dir, result


@contextmanager
def shielded() -> Iterator[list[int]]:
    """SIGINT and SIGTERM held off for a block (the teardown): they are
    recorded in the yielded list instead of raised. Outside the main thread
    signals cannot be handled, and there is nothing to shield."""
    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    caught: list[int] = []

    def note(signum, frame):
        if not caught:
            print("satbed: tearing the testbed down; please wait", file=sys.stderr, flush=True)
        caught.append(signum)

    old = {s: signal.signal(s, note) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield caught
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def vantage_points(tb: Testbed, the_plan: Plan) -> dict:
    """lan_a: host a's port; wan_a, wan_b: the primary emulator's ports
    facing a and facing b (the sender's side of the satellite shows its
    whole RTT, whichever way the data flows); lan_b: host b's port."""
    points = {"lan_a": tb.host(the_plan.a).eth0}
    primary = the_plan.primary
    if primary:
        facing_a = dict(the_plan.path_emulators)[primary]
        node = tb.nodes[primary]
        points["wan_a"] = node.port(facing_a)
        points["wan_b"] = node.port("b" if facing_a == "a" else "a")
    points["lan_b"] = tb.host(the_plan.b).eth0
    return points


def analyze(run_dir: str, result: dict, graphs: bool = True) -> dict:
    """tcptrace metrics into result.json and, with graphs, the graphs and
    report.html (drawn once, by the report). Without graphs (a matrix cell:
    drawing a 100 MB transfer's graphs costs more CPU than its metrics) the
    stored tcptrace output and captures let `satbed report` draw them later."""
    try:
        from analysis import report
    except ImportError:
        return result
    try:
        report.analyze_run(run_dir, graphs=False)
        if graphs:
            report.write_report(run_dir)
    except Exception as e:  # a broken analysis must not lose the run
        result["analysis_error"] = _describe(e)
        write_json(os.path.join(run_dir, "result.json"), result)
        return result
    with open(os.path.join(run_dir, "result.json"), encoding="utf-8") as f:
        return json.load(f)


def _safely(fn, result: dict):
    try:
        return fn()
    except Exception as e:
        result.setdefault("teardown_errors", []).append(_describe(e))
        return {"error": _describe(e)}


def _describe(e: BaseException) -> str:
    if isinstance(e, SatbedError):
        return str(e)
    if isinstance(e, KeyboardInterrupt):
        return "interrupted"
    if isinstance(e, SystemExit):
        return f"terminated ({e.code})"
    return f"{type(e).__name__}: {e} at {traceback.extract_tb(e.__traceback__)[-1].filename.rsplit('/', 1)[-1]}:" \
           f"{traceback.extract_tb(e.__traceback__)[-1].lineno}" if e.__traceback__ else f"{type(e).__name__}: {e}"
