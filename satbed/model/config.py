"""What one run is: the client, the PEPs and where they sit, the links, the host
profiles, the workload; validated whole before anything is built, and written to
config.json as it is."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Collection
from dataclasses import dataclass, field

from satbed.core.errors import SatbedError
from satbed.model import peps, topology, workload
from satbed.model.link import LinkConfig
from satbed.model.topology_spec import TopologySpec

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
    traffic: dict = field(default_factory=dict)                     # background traffic (satbed.model.workload.TrafficSpec)
    main_delay_s: float = 0.0                                       # the main flow starts this long after the traffic
    cwnd_interval_s: float = 0.0                                    # sample the sender's cwnd (ss -ti) this often
    scenario: str = ""                                              # the scenario file it came from
    topology_overrides: dict = field(default_factory=dict)          # dotted path in the topology -> value
    client_rcvbuf: int = 0                                          # SO_RCVBUF the client tool asks for; 0: its own

    NEW_FIELDS = ("links", "peps", "profiles", "endpoints", "traffic", "main_delay_s", "scenario",
                  "topology_overrides", "cwnd_interval_s", "client_rcvbuf")

    def validate(self, clients: Collection[str]) -> None:
        """clients: the client names this installation has (the adapters found
        by backends.clients), handed in so the model needs no backend."""
        spec = topology.load(self.topology, self.topology_overrides)
        self.check_references(spec)
        if self.client not in clients:
            raise SatbedError(f"unknown client {self.client!r} (known: {', '.join(sorted(clients))})")
        peps.check(self.pep)
        for node, placement in self.peps.items():
            peps.check(placement.name)
        for link in self.links.values():
            link.validate()
        if self.traffic:
            workload.TrafficSpec.from_dict(self.traffic)
        if self.direction not in DIRECTIONS:
            raise SatbedError(f"unknown direction {self.direction!r} (known: {', '.join(DIRECTIONS)})")
        if self.captures not in CAPTURES:
            raise SatbedError(f"unknown captures {self.captures!r} (known: {', '.join(CAPTURES)})")
        if self.time_limit_s is not None and not 0 < self.time_limit_s < float("inf"):
            raise SatbedError(f"time limit must be a positive number of seconds, got {self.time_limit_s!r}")
        self.link.validate()

    def check_references(self, spec: TopologySpec) -> None:
        """Every node the configuration names is one of the topology's, of the
        right kind: otherwise the run would fail (or quietly use a default)
        only once its testbed is up."""
        def known(kind: str, names: list[str]) -> str:
            return f"(the topology {os.path.basename(spec.source)}'s {kind}: {', '.join(sorted(names)) or 'none'})"

        emulators = [t.name for t in spec.of_kind("emulator")]
        for node in self.links:
            if node not in emulators:
                raise SatbedError(f"links.{node}: no emulator node {node!r} {known('emulators', emulators)}")
        pep_nodes = [t.name for t in spec.of_kind("pep")]
        for node in self.peps:
            if node not in pep_nodes:
                raise SatbedError(f"peps.{node}: no PEP node {node!r} {known('PEP nodes', pep_nodes)}")
        hosts = list(spec.hosts)
        for host in self.profiles:
            if host not in hosts:
                raise SatbedError(f"profiles.{host}: no host {host!r} {known('hosts', hosts)}")
        for i, host in enumerate(self.endpoints):
            if host not in hosts:
                raise SatbedError(f"workload.main.between.{i}: no host {host!r} {known('hosts', hosts)}")
        if len(self.endpoints) == 2:
            if self.endpoints[0] == self.endpoints[1]:
                raise SatbedError(f"workload.main.between: the same host twice ({self.endpoints[0]})")
            if not spec.path(*self.endpoints):
                raise SatbedError(f"workload.main.between: no path from {self.endpoints[0]} to {self.endpoints[1]}")
        for i, group in enumerate((self.traffic or {}).get("groups") or []):
            for key in ("server", "client"):
                host = group.get(key) if isinstance(group, dict) else None
                if host is not None and host not in hosts:
                    raise SatbedError(f"workload.traffic.groups.{i}.{key}: no host {host!r} {known('hosts', hosts)}")

    def to_dict(self) -> dict:
        doc = dataclasses.asdict(self)
        for k in self.NEW_FIELDS:
            if not doc[k]:
                del doc[k]
        # Each link as its own document says it (per-packet loss only where used).
        doc["link"] = self.link.to_dict()
        if "links" in doc:
            doc["links"] = {n: link.to_dict() for n, link in self.links.items()}
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
