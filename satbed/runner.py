"""One run: build the testbed, start the link, the PEPs and the captures, run
the client, tear everything down, and leave a self-describing directory:

  RUN/config.json  RUN/environment.json  RUN/result.json
  RUN/captures/*.pcap  RUN/emulator/  RUN/pep/  RUN/logs/  RUN/analysis/  RUN/report.html
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import traceback
from dataclasses import dataclass, field

from satbed import clients, emulation, environment, peps, topology
from satbed import docker as docker_backend
from satbed.captures import Captures
from satbed.clients.base import ClientContext
from satbed.emulation import LinkConfig
from satbed.errors import SatbedError
from satbed.testbed import Testbed

DIRECTIONS = ("download", "upload")


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

    def validate(self) -> None:
        topology.find(self.topology)
        clients.get(self.client)
        peps.check(self.pep)
        if self.direction not in DIRECTIONS:
            raise SatbedError(f"unknown direction {self.direction!r} (known: {', '.join(DIRECTIONS)})")
        if self.time_limit_s is not None and not self.time_limit_s > 0:
            raise SatbedError(f"time limit must be a positive number of seconds, got {self.time_limit_s!r}")
        self.link.validate()

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def slug(self) -> str:
        return (f"{self.client}-{peps.slug(self.pep)}-rtt{self.link.rtt_ms:g}-ber{self.link.a_to_b.ber:g}"
                f"-{self.direction}")


def write_json(path: str, doc: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2, sort_keys=True, default=str)
        f.write("\n")
    os.replace(tmp, path)


def run(cfg: RunConfig, out: str, run_dir: str | None = None,
        backend: str = "mininet") -> tuple[str, dict]:
    """Run one experiment; returns (run directory, result). Raises SatbedError
    after writing the result when the run fails."""
    cfg.validate()
    peps.check_backend(cfg.pep, backend)
    spec = topology.load(cfg.topology)
    client = clients.get(cfg.client)
    tb = Testbed(spec, backend=backend)
    if run_dir is None:
        run_dir = os.path.join(out, f"{time.strftime('%Y%m%d-%H%M%S')}-{cfg.slug()}-{tb.prefix}")
    os.makedirs(os.path.join(run_dir, "logs"), exist_ok=True)
    write_json(os.path.join(run_dir, "config.json"), {**cfg.to_dict(), "topology_spec": spec.to_dict()})

    result: dict = {"client": cfg.client, "pep": cfg.pep, "direction": cfg.direction,
                    "started": time.time(), "testbed_prefix": tb.prefix}
    env = environment.collect()
    emu = None
    pep_list: list[peps.Pep] = []
    caps = None
    failure: BaseException | None = None
    try:
        # The emulator backend decides whether its node gets a kernel bridge.
        with docker_backend.for_run(backend, tb.record, run_dir, cfg.pep):
            tb.start(bridge_kinds=("pep", "bridge"))
        env["testbed"] = docker_backend.describe_testbed(tb)
        if tb.transparent("emulator"):
            emu = emulation.make(tb.transparent("emulator")[0], cfg.link, run_dir,
                                 captured=cfg.captures != "none")
            emu.start()
        elif cfg.link.rtt_ms or cfg.link.a_to_b.ber:
            raise SatbedError(f"topology {spec.name} has no emulator node for --rtt/--ber")
        for i, node in enumerate(tb.transparent("pep")):
            pep = peps.Pep(cfg.pep, node, "ab"[i % 2], cfg.link, run_dir, cfg.pep_options)
            pep_list.append(pep)
            pep.start()
        hosts = list(tb.hosts.values())
        ground, aircraft = hosts[0], hosts[-1]
        caps = Captures(vantage_points(tb), run_dir, cfg.captures)
        caps.start()
        ctx = ClientContext(ground=ground, aircraft=aircraft, direction=cfg.direction,
                            size_bytes=cfg.size_bytes, run_dir=run_dir, rate_bps=cfg.link.rate_bps,
                            rtt_ms=cfg.link.rtt_ms, seed=cfg.seed, time_limit_s=cfg.time_limit_s)
        result.update(client.run(ctx))
        env["offloads"] = tb.offload_state()
        env["tcp_congestion_control"] = tb.tcp_cc
    except BaseException as e:  # recorded, then re-raised after teardown
        failure = e
    finally:
        if caps is not None:
            result["captures"] = _safely(caps.stop, result)
        if pep_list:
            result["pep"] = {"name": cfg.pep, "nodes": {p.node.name: _safely(p.stop, result) for p in pep_list}}
            result["pep"]["connections_split"] = sum(
                n.get("connections_split", 0) for n in result["pep"]["nodes"].values() if isinstance(n, dict))
        if emu is not None:
            result["emulator"] = _safely(emu.stop, result)
            env["emulator"] = {"backend": emu.backend}
            if getattr(emu, "spin_us", None) is not None:
                env["emulator"]["spin_us"] = emu.spin_us
        _safely(tb.stop, result)
        result["finished"] = time.time()
        if failure is not None:
            result["error"] = _describe(failure)
        write_json(os.path.join(run_dir, "environment.json"), env)
        write_json(os.path.join(run_dir, "result.json"), result)
    if failure is not None:
        if isinstance(failure, SatbedError):
            raise SatbedError(f"{failure} (run directory: {run_dir})") from None
        raise failure
    if cfg.analyze and cfg.captures != "none":
        result = analyze(run_dir, result, graphs=cfg.graphs)
    return run_dir, result


def vantage_points(tb: Testbed) -> dict:
    """lan_a: Client A's port; wan_a, wan_b: the Emulator's ground-side and
    aircraft-side ports (the sender's side of the satellite shows its whole
    RTT, whichever way the data flows); lan_b: Client B's port."""
    hosts = list(tb.hosts.values())
    points = {"lan_a": hosts[0].eth0}
    emus = tb.transparent("emulator")
    if emus:
        a, b = emus[0].ports
        points["wan_a"], points["wan_b"] = emus[0].port(a), emus[0].port(b)
    points["lan_b"] = hosts[-1].eth0
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
