"""A testbed built for one configuration (Session), the transfers it runs
(Transfer), and the plan resolved from the topology: what one run and a
matrix batch (satbed/execution/runner.py) share. Every run directory's
result.json is written by write_result, once, as its run ends."""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from satbed.backends import ansible as ansible_backend
from satbed.backends import clients, counters, cwnd, docker as docker_backend, emulation, pepnodes, traffic, watch
from satbed.backends import records
from satbed.backends.captures import Captures
from satbed.backends.net import NAMESPACES, Backend
from satbed.backends.clients.base import ClientContext
from satbed.backends.clients.payload import PayloadCache
from satbed.backends.testbed import Testbed
from satbed.core import paths, signals
from satbed.core.errors import SatbedError
from satbed.core.files import write_json
from satbed.core.settings import Settings
from satbed.model import segments, topology, topology_spec, workload
from satbed.model.config import PepPlacement, RESULT_FORMAT, RunConfig
from satbed.model.link import LinkConfig
from satbed.results import environment


def write_result(run_dir: str, result: dict) -> None:
    """RUN/result.json: what the run measured, written once, as it ends
    (analysis writes its own files beside it)."""
    write_json(os.path.join(run_dir, "result.json"), result)


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


def plan(cfg: RunConfig, spec: topology_spec.TopologySpec) -> Plan:
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
        faced = segments.facing_emulator(spec, n)
        if faced:
            pep_links[n] = faced
    for host in cfg.profiles:
        if host not in spec.hosts:
            raise bad(f"TCP profile for {host!r}, which is no host (hosts: {', '.join(spec.hosts)})")
    profiles = {h: cfg.profiles.get(h, spec.hosts[h].profile) for h in spec.hosts}
    return Plan(a, b, links, placements, {n: spec.transparent[n].side for n in pep_nodes}, pep_links,
                spec.emulators_on_path(a, b), profiles)


def config_document(cfg: RunConfig, spec: topology_spec.TopologySpec, the_plan: Plan) -> dict:
    """config.json: the configuration as given, the topology as parsed and the
    plan resolved from it (analysis reads the main flow's hosts from it)."""
    return {**cfg.to_dict(), "format": RESULT_FORMAT, "topology_spec": spec.to_dict(),
            "plan": the_plan.to_dict()}

@dataclass
class Transfer:
    """What one transfer on a session starts and stops: its captures, the
    router counters and the cwnd trace, all in its own run directory."""
    run_dir: str
    caps: Captures | None = None
    sampler: counters.CounterSampler | None = None
    cwnd_sampler: cwnd.CwndSampler | None = None
    started: float = 0.0                # time.time() as its captures start


class Session:
    """A testbed built for one configuration with its links, PEPs and
    background traffic up, on which transfers run one after another, each
    into its own run directory with its own captures. `run` is a session of
    one transfer whose run directory is also the session's; a matrix batch
    (run_batch) runs many short transfers on one, so a sweep does not pay a
    testbed build per transfer."""

    def __init__(self, cfg: RunConfig, backend: str = "mininet", payloads: PayloadCache | None = None):
        self.cfg, self.backend, self.payloads = cfg, backend, payloads
        self.spec = topology.load(cfg.topology, cfg.topology_overrides)
        self.plan = plan(cfg, self.spec)
        self.client = clients.get(cfg.client)
        if cfg.client_rcvbuf and cfg.direction not in self.client.rcvbuf_directions:
            raise SatbedError(f"workload.main.rcvbuf: {cfg.client} cannot ask for a receive buffer "
                              f"in a {cfg.direction}")
        self.tb = Testbed(self.spec, backend=backend)
        self.dir = ""
        self.env: dict = {}
        self.emus: dict[str, emulation.Emulator] = {}
        self.pep_list: list[pepnodes.Pep] = []
        self.background: traffic.Traffic | None = None
        self.proof: dict = {}

    def open(self, session_dir: str) -> str:
        """Create the session's directory (the testbed's own files: emulator,
        PEPs, background traffic, logs) and record the configuration there."""
        self.dir = paths.private_dir(os.path.abspath(session_dir))
        os.makedirs(os.path.join(self.dir, "logs"), exist_ok=True)
        self.tb.record.run_dir = self.dir     # `satbed clean` removes a killed run's payloads and keys
        records.mark_run_dir(self.dir, self.tb.prefix)     # ...where this says satbed made the directory
        write_json(os.path.join(self.dir, "config.json"), config_document(self.cfg, self.spec, self.plan))
        self.env = environment.collect()
        return self.dir

    def bound_backend(self) -> Backend:
        """The testbed backend bound to this run: its PEP images and run
        directory (Docker) or its machines (Ansible)."""
        if self.backend == "docker":
            pep_images = {n: p.name for n, p in self.plan.peps.items()}
            return docker_backend.DockerBackend.for_run(
                self.dir, self.cfg.pep, pep_images, link_files=emulation.profile_files(self.plan.links.values()))
        if self.backend == "ansible":
            return ansible_backend.AnsibleBackend.for_run(Settings.from_environ().inventory, self.spec, self.dir)
        return NAMESPACES

    def build(self) -> None:
        """The testbed, its emulators and PEPs, and the proof that the PEPs split."""
        cfg, the_plan, tb = self.cfg, self.plan, self.tb
        if not the_plan.links and (cfg.link.rtt_ms or cfg.link.a_to_b.ber):
            raise SatbedError(f"topology {self.spec.name} has no emulator node for --rtt/--ber")
        # The emulator backend decides whether its node gets a kernel bridge.
        backend = self.bound_backend()
        tb.start(bridge_kinds=("pep", "bridge"), profiles=the_plan.profiles, backend=backend)
        env = self.env
        env["testbed"] = backend.describe(tb)
        if tb.tcp_profiles:
            env["tcp_profiles"] = tb.tcp_profiles
        if tb.queue_commands:
            env["router_queues"] = tb.queue_commands
        several = len(the_plan.links) > 1
        for name, link in the_plan.links.items():
            emu = emulation.make(tb.nodes[name], link, self.dir, captured=cfg.captures != "none",
                                 stats_dir=os.path.join(self.dir, "emulator", name) if several else "")
            self.emus[name] = emu
            emu.start()
        for name, placement in the_plan.peps.items():
            link = the_plan.links.get(the_plan.pep_links.get(name, ""), cfg.link)
            pep = pepnodes.Pep(placement.name, tb.nodes[name], the_plan.sides[name], link, self.dir, placement.options)
            self.pep_list.append(pep)
            env.setdefault("peps", {})[name] = pepnodes.describe(placement.name)
            pep.start()
        # start returned for each PEP; now prove they split (pep/CONTRACT.md).
        self.proof = pepnodes.prove_split(self.pep_list, tb.host(the_plan.a), tb.host(the_plan.b),
                                      the_plan.path_rtt_ms())

    def start_traffic(self) -> None:
        """The background traffic, and the main flow's head start over it."""
        if self.cfg.traffic:
            self.background = traffic.Traffic(workload.TrafficSpec.from_dict(self.cfg.traffic), self.tb.hosts,
                                              self.dir)
            self.background.start()
        if self.cfg.main_delay_s:
            time.sleep(self.cfg.main_delay_s)

    def begin(self, cfg: RunConfig, run_dir: str, result: dict) -> Transfer:
        """A transfer's captures and router counters, into its run directory."""
        t = Transfer(run_dir, started=time.time())
        if self.proof:
            result["split_proof"] = self.proof
        try:
            t.caps = Captures(vantage_points(self.tb, self.plan), run_dir, cfg.captures,
                              rate_bps=self.plan.path_rate_bps())
            t.caps.start()
            router_ports = [i for r in self.tb.routers.values() for i in r.intfs.values()]
            if router_ports:
                t.sampler = counters.CounterSampler(router_ports, run_dir)
                t.sampler.start()
        except BaseException:
            self.end(t, result)
            raise
        return t

    def transfer(self, cfg: RunConfig, t: Transfer, result: dict) -> None:
        """The main flow: the client's transfer, guarded against a dead PEP or emulator."""
        the_plan, tb = self.plan, self.tb
        ground, aircraft = tb.host(the_plan.a), tb.host(the_plan.b)
        ctx = ClientContext(ground=ground, aircraft=aircraft, direction=cfg.direction,
                            size_bytes=cfg.size_bytes, run_dir=t.run_dir, rate_bps=the_plan.path_rate_bps(),
                            rtt_ms=the_plan.path_rtt_ms(), seed=cfg.seed, time_limit_s=cfg.time_limit_s,
                            rcvbuf=cfg.client_rcvbuf, payloads=self.payloads)
        if cfg.cwnd_interval_s:
            sender, receiver = (ground, aircraft) if cfg.direction == "upload" else (aircraft, ground)
            t.cwnd_sampler = cwnd.CwndSampler(sender, str(receiver.ip.ip), t.run_dir, cfg.cwnd_interval_s)
            t.cwnd_sampler.start()
        # Outages and profiles count from here: the main flow's start.
        clocks = {name: emu.start_clock() for name, emu in self.emus.items()}
        if any(v is not None for v in clocks.values()):
            result["schedule_clock_started_s"] = clocks
            # Wall time of the schedules' start, to place outages on the
            # captures' and PEPs' time axes (analysis/outage.py).
            result["schedule_clock_wall_s"] = time.time()
        # The machine's load when the measurement starts (1, 5, 15 min): figures from a loaded box say so.
        result["loadavg"] = [round(x, 2) for x in os.getloadavg()]
        cpu_before = environment.CpuTimes.read()
        # A dead PEP or emulator is named, not the client it stranded.
        with watch.guarded(self.pep_list, list(self.emus.values())):
            result.update(self.client.run(ctx))
        cpu_after = environment.CpuTimes.read()
        if cpu_before and cpu_after:
            # The whole machine's CPU during the measurement, steal included:
            # a virtual machine's stolen time shows as emulator lateness.
            result["host_cpu"] = cpu_after.since(cpu_before)
        if "offloads" not in self.env:     # an ethtool per interface: once per testbed, not per transfer
            self.env["offloads"] = tb.offload_state()
        self.env["tcp_congestion_control"] = tb.tcp_cc

    def end(self, t: Transfer, result: dict) -> None:
        """Stop a transfer's samplers and captures (safe after a partial begin)."""
        if t.sampler is not None:
            result["counters"] = safely(t.sampler.stop, result)
            t.sampler = None
        if t.cwnd_sampler is not None:
            result["cwnd_trace"] = safely(t.cwnd_sampler.stop, result)
            t.cwnd_sampler = None
        if t.caps is not None:
            result["captures"] = safely(t.caps.stop, result)
            t.caps = None

    def down(self) -> str:
        """Why the testbed can carry no more transfers ('' while it can)."""
        return watch.problems(self.pep_list, list(self.emus.values()))

    def stop(self, result: dict) -> None:
        """Tear the testbed down; the PEPs' and emulators' final figures go into result."""
        if self.pep_list:
            nodes = {p.node.name: {**(safely(p.stop, result) or {}), "pep": p.name, "side": p.role}
                     for p in self.pep_list}
            result["pep"] = {"name": self.cfg.pep if len({p.name for p in self.pep_list}) == 1 else "mixed",
                             "nodes": nodes,
                             "connections_split": sum(n.get("connections_split", 0) for n in nodes.values()
                                                      if isinstance(n.get("connections_split", 0), int))}
        if self.emus:
            stopped = {name: safely(emu.stop, result) for name, emu in self.emus.items()}
            # After a partial build the primary emulator may be one that never started.
            primary = self.plan.primary if self.plan.primary in self.emus else next(iter(self.emus))
            result["emulator"] = stopped[primary]
            if len(self.emus) > 1:
                result["emulators"] = stopped
            self.env["emulator"] = {"backend": self.emus[primary].backend}
            if getattr(self.emus[primary], "spin_us", None) is not None:
                self.env["emulator"]["spin_us"] = self.emus[primary].spin_us
        safely(self.tb.stop, result)


@contextmanager
def shielded() -> Iterator[list[int]]:
    """SIGINT and SIGTERM held off for a block (the teardown): they are
    recorded in the yielded list instead of raised."""
    caught: list[int] = []

    def note(signum, frame):
        if not caught:
            print("satbed: tearing the testbed down; please wait", file=sys.stderr, flush=True)
        caught.append(signum)

    with signals.handled(note, signal.SIGINT, signal.SIGTERM):
        yield caught


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

def safely(fn, result: dict):
    try:
        return fn()
    except Exception as e:
        result.setdefault("teardown_errors", []).append(describe(e))
        return {"error": describe(e)}


def describe(e: BaseException) -> str:
    if isinstance(e, SatbedError):
        return str(e)
    if isinstance(e, KeyboardInterrupt):
        return "interrupted"
    if isinstance(e, SystemExit):
        return f"terminated ({e.code})"
    return f"{type(e).__name__}: {e} at {traceback.extract_tb(e.__traceback__)[-1].filename.rsplit('/', 1)[-1]}:" \
           f"{traceback.extract_tb(e.__traceback__)[-1].lineno}" if e.__traceback__ else f"{type(e).__name__}: {e}"
