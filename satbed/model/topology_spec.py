"""A topology as data: hosts, routers, transparent nodes (pep, emulator,
bridge), the links between their ports and the segments they form, each
resolved once by the topology file's parser (model/topology.py)."""

from __future__ import annotations

import ipaddress
from collections import deque
from dataclasses import dataclass, field


@dataclass(frozen=True)
class HostSpec:
    name: str
    short: str
    ip: ipaddress.IPv4Interface
    role: str = ""
    tcp_cc: str = ""                 # wanted congestion control, falls back to cubic (the chain file's key)
    gateway: ipaddress.IPv4Address | None = None    # resolved: given, or the one router on its segment
    profile: str = ""                # a TCP profile name (profiles/tcp/NAME.yaml)


@dataclass(frozen=True)
class Queue:
    """A drop-tail queue on a router port's egress; rate_bps None: the queue
    sits behind the port's own (veth) speed and only fills in bursts."""
    packets: int = 0
    bytes: int = 0
    rate_bps: int | None = None

    def to_dict(self) -> dict:
        return {"packets": self.packets, "bytes": self.bytes, "rate_bps": self.rate_bps}


@dataclass(frozen=True)
class Route:
    to: ipaddress.IPv4Network
    via: ipaddress.IPv4Address

    def __str__(self) -> str:
        return f"{self.to} via {self.via}"


@dataclass(frozen=True)
class RouterSpec:
    name: str
    short: str
    addresses: dict[str, ipaddress.IPv4Interface]     # port -> address
    queues: dict[str, Queue]
    routes: tuple[Route, ...]                         # resolved: given, or computed from the links
    routes_given: bool = False

    @property
    def ports(self) -> tuple[str, ...]:
        return tuple(self.addresses)


@dataclass(frozen=True)
class TransparentSpec:
    """A node that forwards frames between its ports and has no IP address.
    A PEP node may name one (ip) for a PEP program that opens its upstream
    connections from its own address (PEPsal): only such an adapter puts it
    on the bridge, and the far host then sees that address."""
    name: str
    short: str
    kind: str
    ports: tuple[str, ...]
    side: str = ""                   # a PEP's side: the emulator port its WAN faces, or declared
    ip: ipaddress.IPv4Interface | None = None


@dataclass(frozen=True)
class Endpoint:
    node: str
    port: str

    def __str__(self) -> str:
        return f"{self.node}.{self.port}"


@dataclass(frozen=True)
class LinkSpec:
    a: Endpoint
    b: Endpoint


@dataclass(frozen=True)
class Segment:
    """One layer-2 broadcast domain: the addressed ports joined by links and
    transparent nodes, and the subnet they share."""
    subnet: ipaddress.IPv4Network | None
    members: tuple[Endpoint, ...]            # addressed ports (hosts' eth0, routers' ports)
    transparent: tuple[str, ...]             # transparent nodes inside it


@dataclass(frozen=True)
class TopologySpec:
    name: str
    mtu: int
    subnet: ipaddress.IPv4Network | None
    hosts: dict[str, HostSpec]
    transparent: dict[str, TransparentSpec]
    links: tuple[LinkSpec, ...]
    description: str = ""
    source: str = field(default="", compare=False)
    routers: dict[str, RouterSpec] = field(default_factory=dict)
    segments: tuple[Segment, ...] = ()

    def node_names(self) -> list[str]:
        return [*self.hosts, *self.routers, *self.transparent]

    def of_kind(self, kind: str) -> list[TransparentSpec]:
        return [t for t in self.transparent.values() if t.kind == kind]

    def host_with_role(self, role: str) -> HostSpec | None:
        found = [h for h in self.hosts.values() if h.role == role]
        return found[0] if len(found) == 1 else None

    def neighbours(self, node: str) -> list[tuple[str, str, str]]:
        """(own port, neighbour, neighbour's port) for each link of a node."""
        out = []
        for link in self.links:
            if link.a.node == node:
                out.append((link.a.port, link.b.node, link.b.port))
            if link.b.node == node:
                out.append((link.b.port, link.a.node, link.a.port))
        return out

    def path(self, src: str, dst: str) -> list[Endpoint]:
        """The ports a packet from host src to host dst leaves by, hop by hop
        (a breadth-first walk over the links; transparent nodes and routers
        are crossed, hosts end the walk). Empty if unreachable."""
        prev: dict[str, tuple[str, Endpoint] | None] = {src: None}
        queue = deque([src])
        while queue:
            node = queue.popleft()
            if node == dst:
                break
            if node != src and node in self.hosts:
                continue
            for port, other, _ in self.neighbours(node):
                if other not in prev:
                    prev[other] = (node, Endpoint(node, port))
                    queue.append(other)
        if dst not in prev:
            return []
        hops: list[Endpoint] = []
        node = dst
        while prev[node] is not None:
            node, ep = prev[node]
            hops.append(ep)
        return hops[::-1]

    def emulators_on_path(self, src: str, dst: str) -> list[tuple[str, str]]:
        """(emulator, the port the src->dst traffic enters it by), in path order."""
        out = []
        for hop in self.path(src, dst):
            t = self.transparent.get(hop.node)
            if t is not None and t.kind == "emulator":
                entry = "b" if hop.port == "a" else "a"
                out.append((t.name, entry))
        return out

    def to_dict(self) -> dict:
        return {
            "name": self.name, "description": self.description, "mtu": self.mtu,
            "subnet": str(self.subnet) if self.subnet else None, "source": self.source,
            "hosts": {h.name: {"short": h.short, "ip": str(h.ip), "role": h.role, "tcp_cc": h.tcp_cc,
                               "gateway": str(h.gateway) if h.gateway else None, "profile": h.profile}
                      for h in self.hosts.values()},
            "routers": {r.name: {"short": r.short,
                                 "interfaces": {p: {"ip": str(a), **({"queue": r.queues[p].to_dict()}
                                                                     if p in r.queues else {})}
                                                for p, a in r.addresses.items()},
                                 "routes": [{"to": str(x.to), "via": str(x.via)} for x in r.routes],
                                 "routes_given": r.routes_given}
                        for r in self.routers.values()},
            "transparent": {t.name: {"short": t.short, "kind": t.kind, "ports": list(t.ports),
                                     **({"side": t.side} if t.side else {}),
                                     **({"ip": str(t.ip)} if t.ip else {})}
                            for t in self.transparent.values()},
            "links": [[str(link.a), str(link.b)] for link in self.links],
            "segments": [{"subnet": str(s.subnet) if s.subnet else None,
                          "members": [str(m) for m in s.members], "transparent": list(s.transparent)}
                         for s in self.segments],
        }
