"""One run: build the testbed, start the link, the PEPs and the captures, run
the client, tear everything down, and leave a self-describing directory:

  RUN/config.json  RUN/environment.json  RUN/result.json
  RUN/captures/*.pcap  RUN/emulator/  RUN/pep/  RUN/logs/  RUN/analysis/  RUN/report.html

A batch (run_batch, for a matrix) runs many transfers on one testbed
(Session): each gets such a directory of its own, with its own captures,
and its window of what the shared emulator, PEPs and background traffic
recorded; the testbed's own files go to the batch's directory.
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
from dataclasses import dataclass
from typing import Iterator

from satbed.backends import clients, counters, cwnd, emulation, pepnodes, traffic, watch

from satbed.model import peps
from satbed.model import workload

from satbed.core import paths

from satbed.model import topology

from satbed.model import topology_spec

from satbed.model import segments

from satbed.results import environment
from satbed.results.metrics import run_metrics
from satbed.backends import ansible as ansible_backend
from satbed.backends import docker as docker_backend
from satbed.backends.captures import Captures
from satbed.backends.clients.base import ClientContext
from satbed.model.link import LinkConfig
from satbed.core.errors import SatbedError
from satbed.backends.clients.transfer import keep_files_wanted
from satbed.core.files import write_json
from satbed.backends.testbed import Testbed, remove_run_files
from satbed.model.config import PepPlacement, RESULT_FORMAT, RunConfig
from satbed.core.settings import Settings
from satbed.backends.net import Backend, NAMESPACES


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


def run(cfg: RunConfig, out: str, run_dir: str | None = None,
        backend: str = "mininet") -> tuple[str, dict]:
    """Run one experiment; returns (run directory, result). Raises SatbedError
    after writing the result when the run fails."""
    cfg.validate(clients.REGISTRY)
    for name in {cfg.pep, *(p.name for p in cfg.peps.values())}:
        peps.check_backend(name, backend)
    # Every tool gets absolute paths: sshd changes to /, vsftpd reads its
    # anon_root as given, and a matrix cell runs from the repository root.
    out = paths.results_dir(out)
    # The payload and the received copy sit in the run directory side by side.
    paths.require_space(out, 2 * cfg.size_bytes, f"a {cfg.size_bytes} byte transfer")
    session = Session(cfg, backend)
    if run_dir is None:
        run_dir = os.path.join(out, f"{time.strftime('%Y%m%d-%H%M%S')}-{cfg.slug()}-{session.tb.prefix}")
    run_dir = session.open(run_dir)
    result: dict = {"format": RESULT_FORMAT, "client": cfg.client, "pep": cfg.pep, "direction": cfg.direction,
                    "started": time.time(), "testbed_prefix": session.tb.prefix}
    transfer: Transfer | None = None
    failure: BaseException | None = None
    try:
        session.build()
        # The counters and captures cover the background traffic's start too.
        transfer = session.begin(cfg, run_dir, result)
        session.start_traffic()
        session.transfer(cfg, transfer, result)
    except BaseException as e:  # recorded, then re-raised after teardown
        failure = e
    finally:
        # A second Ctrl-C must not cut the teardown short: it is noted, and
        # the run ends as interrupted once everything is removed.
        with shielded() as late:
            if session.background is not None:
                result["traffic"] = _safely(session.background.stop, result)
            if transfer is not None:
                session.end(transfer, result)
            session.stop(result)
            result["finished"] = time.time()
            if failure is None and late:
                failure = KeyboardInterrupt()
            if failure is not None:
                result["error"] = _describe(failure)
            write_json(os.path.join(run_dir, "environment.json"), session.env)
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

    def __init__(self, cfg: RunConfig, backend: str = "mininet"):
        self.cfg, self.backend = cfg, backend
        self.spec = topology.load(cfg.topology, cfg.topology_overrides)
        self.plan = plan(cfg, self.spec)
        self.client = clients.get(cfg.client)
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
        write_json(os.path.join(self.dir, "config.json"), config_document(self.cfg, self.spec, self.plan))
        self.env = environment.collect()
        return self.dir

    def bound_backend(self) -> Backend:
        """The testbed backend bound to this run: its PEP images and run
        directory (Docker) or its machines (Ansible)."""
        if self.backend == "docker":
            pep_images = {n: p.name for n, p in self.plan.peps.items()}
            return docker_backend.DockerBackend.for_run(self.dir, self.cfg.pep, pep_images)
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
                            rtt_ms=the_plan.path_rtt_ms(), seed=cfg.seed, time_limit_s=cfg.time_limit_s)
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
            result["counters"] = _safely(t.sampler.stop, result)
            t.sampler = None
        if t.cwnd_sampler is not None:
            result["cwnd_trace"] = _safely(t.cwnd_sampler.stop, result)
            t.cwnd_sampler = None
        if t.caps is not None:
            result["captures"] = _safely(t.caps.stop, result)
            t.caps = None

    def down(self) -> str:
        """Why the testbed can carry no more transfers ('' while it can)."""
        return watch.problems(self.pep_list, list(self.emus.values()))

    def stop(self, result: dict) -> None:
        """Tear the testbed down; the PEPs' and emulators' final figures go into result."""
        if self.pep_list:
            nodes = {p.node.name: {**(_safely(p.stop, result) or {}), "pep": p.name, "side": p.role}
                     for p in self.pep_list}
            result["pep"] = {"name": self.cfg.pep if len({p.name for p in self.pep_list}) == 1 else "mixed",
                             "nodes": nodes,
                             "connections_split": sum(n.get("connections_split", 0) for n in nodes.values()
                                                      if isinstance(n.get("connections_split", 0), int))}
        if self.emus:
            stopped = {name: _safely(emu.stop, result) for name, emu in self.emus.items()}
            # After a partial build the primary emulator may be one that never started.
            primary = self.plan.primary if self.plan.primary in self.emus else next(iter(self.emus))
            result["emulator"] = stopped[primary]
            if len(self.emus) > 1:
                result["emulators"] = stopped
            self.env["emulator"] = {"backend": self.emus[primary].backend}
            if getattr(self.emus[primary], "spin_us", None) is not None:
                self.env["emulator"]["spin_us"] = self.emus[primary].spin_us
        _safely(self.tb.stop, result)


# Cumulative counters of satemu's time series (emulator/bridge/timeseries.go);
# a transfer's slice restarts them from zero at its start.
EMU_COUNTERS = ("frames_in", "bytes_in", "frames_out", "bytes_out", "drop_queue", "drop_ber",
                "drop_gilbert_elliott", "drop_outage", "tx_errors", "rx_kernel_drops")


def run_batch(cfgs: list[RunConfig], run_dirs: list[str], session_dir: str,
              backend: str = "mininet") -> Iterator[tuple[int, dict]]:
    """Transfers of one configuration on one testbed (a matrix batch): the
    testbed, its PEPs and the background traffic are built once from the
    first configuration and stay up; each transfer gets its own run
    directory, as self-describing as a single run's (config.json,
    environment.json, result.json, its own captures and router counters,
    and its window of the emulator's series, the PEPs' buffer trace and the
    background flows). Yields (index, result) as each is written.

    A failed transfer fails its own cell; a testbed that fails (at build, or
    a PEP or emulator found dead) fails every remaining cell with the
    reason. Ctrl-C/SIGTERM tears down and re-raises; the cells not yielded
    were not run."""
    first = cfgs[0]
    first.validate(clients.REGISTRY)
    for name in {first.pep, *(p.name for p in first.peps.values())}:
        peps.check_backend(name, backend)
    paths.require_space(session_dir, 2 * max(c.size_bytes for c in cfgs), "the batch's largest transfer")
    session = Session(first, backend)
    session.open(session_dir)
    testbed_result: dict = {"format": RESULT_FORMAT, "started": time.time(), "testbed_prefix": session.tb.prefix,
                            "cells": [os.path.basename(d) for d in run_dirs]}
    broken = ""         # why the testbed can take no more transfers
    index = 0
    try:
        try:
            session.build()
            session.start_traffic()
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:
            broken = f"testbed failed: {_describe(e)}"
        for index, (cfg, run_dir) in enumerate(zip(cfgs, run_dirs)):
            if broken:
                result = _batch_result(cfg, session, index, len(cfgs))
                result["error"] = broken
                result["finished"] = time.time()
                os.makedirs(run_dir, exist_ok=True)
                write_json(os.path.join(run_dir, "result.json"), result)
                yield index, result
                continue
            result, failure = _batch_transfer(session, cfg, run_dir, index, len(cfgs))
            if isinstance(failure, (KeyboardInterrupt, SystemExit)):
                raise failure
            if isinstance(failure, watch.PathDown) or session.down():
                broken = f"testbed failed during cell {index + 1}: {session.down() or _describe(failure)}"
            yield index, result
        index = len(cfgs)
    finally:
        with shielded():
            if session.background is not None:
                testbed_result["traffic"] = _safely(session.background.stop, testbed_result)
            session.stop(testbed_result)
            testbed_result["finished"] = time.time()
            if broken:
                testbed_result["error"] = broken
            testbed_result["transfers_run"] = index
            write_json(os.path.join(session.dir, "environment.json"), session.env)
            write_json(os.path.join(session.dir, "result.json"), testbed_result)


def _batch_result(cfg: RunConfig, session: Session, index: int, count: int) -> dict:
    return {"format": RESULT_FORMAT, "client": cfg.client, "pep": cfg.pep, "direction": cfg.direction,
            "started": time.time(), "testbed_prefix": session.tb.prefix,
            "batch": {"index": index, "cells": count, "testbed_dir": session.dir,
                      "testbed_seed": session.cfg.seed}}


def _batch_transfer(session: Session, cfg: RunConfig, run_dir: str, index: int,
                    count: int) -> tuple[dict, BaseException | None]:
    """One transfer of a batch into run_dir; returns its result and what failed."""
    run_dir = paths.private_dir(os.path.abspath(run_dir))
    os.makedirs(os.path.join(run_dir, "logs"), exist_ok=True)
    result = _batch_result(cfg, session, index, count)
    failure: BaseException | None = None
    t: Transfer | None = None
    before = {}
    try:
        cfg.validate(clients.REGISTRY)
        doc = config_document(cfg, session.spec, session.plan)
        # What this cell shared: the testbed was built (and its emulator and
        # background traffic seeded) from the batch's first configuration.
        doc["batch"] = result["batch"]
        write_json(os.path.join(run_dir, "config.json"), doc)
        session.tb.record.run_dir = run_dir     # a killed batch's payloads go with `satbed clean`
        session.tb.record.save()
        _forget_tcp_metrics(session)
        before = _batch_counters(session)
        t = session.begin(cfg, run_dir, result)
        session.transfer(cfg, t, result)
    except BaseException as e:
        failure = e
    finally:
        with shielded() as late:
            if t is not None:
                session.end(t, result)
            t0, t1 = (t.started if t else time.time()), time.time()
            _safely(lambda: _batch_slices(session, run_dir, before, t0, t1, result), result)
            result["finished"] = t1
            if failure is None and late:
                failure = KeyboardInterrupt()
            if failure is not None:
                result["error"] = _describe(failure)
            write_json(os.path.join(run_dir, "environment.json"), {**session.env, "batch": result["batch"]})
            write_json(os.path.join(run_dir, "result.json"), result)
            if not keep_files_wanted():
                remove_run_files(run_dir)
    return result, failure


def _forget_tcp_metrics(session: Session) -> None:
    """A fresh testbed has no cached ssthresh or RTT: the main flow's hosts
    and the PEP nodes forget what the previous transfer left, so each
    transfer starts as a single run's does."""
    nodes = [session.tb.nodes[n] for n in (session.plan.a, session.plan.b, *session.plan.peps)]
    for node in nodes:
        node.run(["ip", "tcp_metrics", "flush", "all"], check=False)


def _batch_counters(session: Session) -> dict:
    """The shared daemons' counters as a transfer starts: each PEP's stats,
    each satemu's (with its clock)."""
    out: dict = {"pep": {p.node.name: p.stats() for p in session.pep_list}, "emulator": {}}
    for name, emu in session.emus.items():
        if isinstance(emu, emulation.Satemu):
            out["emulator"][name] = emu.request({"op": "stats"}).get("stats") or {}
    return out


# satemu's cumulative counters, per direction: a transfer's share is their
# difference. Everything else (queue and link values in force, high-water
# marks, lateness quantiles) cannot be differenced and stays as at the
# transfer's end.
SATEMU_COUNTERS = frozenset({"frames_in", "bytes_in", "frames_out", "bytes_out", "drops", "tx_errors",
                             "in_flight_overflow", "rx_truncated", "rx_kernel_drops"})


def _delta(end, start):
    """end - start for every number of a nested document of counters."""
    if isinstance(end, dict):
        start = start if isinstance(start, dict) else {}
        return {k: _delta(v, start.get(k)) for k, v in end.items()}
    numeric = isinstance(end, (int, float)) and not isinstance(end, bool)
    return end - start if numeric and isinstance(start, (int, float)) and not isinstance(start, bool) else end


def satemu_share(now: dict, was: dict) -> dict:
    """A transfer's share of a shared satemu's stats, in the shape of an
    unbatched run's emulator.json `totals`: counters differenced, the rest
    as at the end (the lateness quantiles then cover the batch so far)."""
    dirs = {}
    for name, d in (now.get("directions") or {}).items():
        before = ((was.get("directions") or {}).get(name)) or {}
        dirs[name] = {k: _delta(v, before.get(k)) if k in SATEMU_COUNTERS else v for k, v in d.items()}
    return {"t_s": now.get("t_s"), "since_t_s": was.get("t_s"), "directions": dirs,
            "scope": "counters: this transfer; queue, link values, high-water marks and lateness: the batch so far"}


def _batch_slices(session: Session, run_dir: str, before: dict, t0: float, t1: float, result: dict) -> None:
    """A transfer's share of what the shared daemons recorded: the PEPs'
    counters and buffer trace, the emulator's counters and time series, the
    background flows that overlapped it."""
    if session.pep_list:
        nodes = {}
        for p in session.pep_list:
            now = p.stats()
            was = (before.get("pep") or {}).get(p.node.name) or {}
            split = now.get("connections_split")
            if isinstance(split, int) and isinstance(was.get("connections_split"), int):
                split -= was["connections_split"]
            nodes[p.node.name] = {**now, "pep": p.name, "side": p.role, "connections_split": split}
            _slice_jsonl(os.path.join(p.state_dir, "buffer.jsonl"),
                         os.path.join(run_dir, "pep", p.node.name, "buffer.jsonl"), t0, t1, ("t",))
        result["pep"] = {"name": session.cfg.pep if len({p.name for p in session.pep_list}) == 1 else "mixed",
                         "nodes": nodes, "batch": True,
                         "connections_split": sum(n["connections_split"] for n in nodes.values()
                                                  if isinstance(n.get("connections_split"), int))}
    stopped = {}
    for name, emu in session.emus.items():
        entry: dict = {"backend": emu.backend, "config": emu.cfg.to_dict(), "batch": True}
        if isinstance(emu, emulation.Satemu):
            was = (before.get("emulator") or {}).get(name) or {}
            now = emu.request({"op": "stats"}).get("stats") or {}
            io = (emu.request({"op": "get"}).get("config") or {}).get("io")
            entry["stats"] = {"totals": satemu_share(now, was), "io": io}     # as in emulator.json
            rel = os.path.relpath(emu.stats_dir, session.dir)
            dst = os.path.join(run_dir, rel, "emulator_timeseries.csv")
            _slice_timeseries(os.path.join(emu.stats_dir, "emulator_timeseries.csv"), dst,
                              float(was.get("t_s") or 0), float(now.get("t_s") or 0))
            entry["timeseries"] = os.path.relpath(dst, run_dir)
        stopped[name] = entry
    if stopped:
        primary = session.plan.primary or next(iter(stopped))
        result["emulator"] = stopped[primary]
        if len(stopped) > 1:
            result["emulators"] = stopped
    bg = session.background
    if bg is not None:
        for path in sorted(os.listdir(bg.dir)) if os.path.isdir(bg.dir) else []:
            if path.endswith(".jsonl"):
                _slice_jsonl(os.path.join(bg.dir, path), os.path.join(run_dir, workload.TRAFFIC_DIR, path),
                             t0, t1, ("start", "end"), overlap=True)
        result["traffic"] = {"dir": workload.TRAFFIC_DIR, "spec": bg.spec.to_dict(), "started": bg.started_at,
                             "window": [t0, t1], "batch": True,
                             # Flows still running at the transfer's end are recorded only as they end.
                             "summary": traffic.summary(run_dir)}


def _slice_jsonl(src: str, dst: str, t0: float, t1: float, keys: tuple[str, ...], overlap: bool = False) -> None:
    """The records of a JSON-lines file inside [t0, t1] (by keys[0]), or with
    overlap, whose [keys[0], keys[1]] span meets it."""
    if not os.path.exists(src):
        return
    kept = []
    with open(src, encoding="utf-8") as f:
        for line in f:
            try:
                rec = json.loads(line)
                a = float(rec[keys[0]])
                b = float(rec[keys[1]]) if overlap else a
            except (ValueError, KeyError, TypeError):
                continue
            if a <= t1 and b >= t0:
                kept.append(line if line.endswith("\n") else line + "\n")
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(dst, "w", encoding="utf-8") as f:
        f.writelines(kept)


def _slice_timeseries(src: str, dst: str, t0: float, t1: float) -> None:
    """satemu's rows in (t0, t1], time and counters restarted at the last row
    before it, so the slice reads as a series of its own."""
    import csv
    if not os.path.exists(src):
        return
    with open(src, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
        header = list(rows[0].keys()) if rows else []
    base: dict[str, dict] = {}
    kept = []
    for row in rows:
        try:
            t = float(row["t_s"])
        except (KeyError, ValueError):
            continue
        if t <= t0:
            base[row.get("direction", "")] = row
        elif t <= t1:
            kept.append(row)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(dst, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=header)
        w.writeheader()
        for row in kept:
            b = base.get(row.get("direction", ""))
            out = dict(row)
            t_base = float(b["t_s"]) if b else t0
            out["t_s"] = f"{float(row['t_s']) - t_base:.3f}"
            for k in EMU_COUNTERS:
                if b and k in out and out[k] and b.get(k):
                    out[k] = str(int(float(out[k]) - float(b[k])))
            w.writerow(out)


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
    """tcptrace metrics into analysis.json (returned laid over result.json) and, with graphs, the graphs and
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
    return run_metrics(run_dir)


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
