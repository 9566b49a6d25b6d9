"""Topologies as data: a YAML file names hosts, transparent nodes and links.

This module only parses and validates; satbed.net realizes a spec."""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass, field


from satbed import yamlfile
from satbed.errors import SatbedError
from satbed.proc import REPO_ROOT

TOPOLOGY_DIR = os.path.join(REPO_ROOT, "topologies")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]{0,15}$")
_SHORT = re.compile(r"^[a-z][a-z0-9]{0,2}$")
_PORT = re.compile(r"^[a-z][a-z0-9]{0,4}$")
TRANSPARENT_KINDS = ("pep", "emulator", "bridge")


@dataclass(frozen=True)
class HostSpec:
    name: str
    short: str
    ip: ipaddress.IPv4Interface
    role: str = ""
    tcp_cc: str = ""


@dataclass(frozen=True)
class TransparentSpec:
    """A node that forwards frames between its ports and has no IP address."""
    name: str
    short: str
    kind: str
    ports: tuple[str, ...]


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
class TopologySpec:
    name: str
    mtu: int
    subnet: ipaddress.IPv4Network
    hosts: dict[str, HostSpec]
    transparent: dict[str, TransparentSpec]
    links: tuple[LinkSpec, ...]
    description: str = ""
    source: str = field(default="", compare=False)

    def node_names(self) -> list[str]:
        return [*self.hosts, *self.transparent]

    def of_kind(self, kind: str) -> list[TransparentSpec]:
        return [t for t in self.transparent.values() if t.kind == kind]

    def to_dict(self) -> dict:
        return {
            "name": self.name, "description": self.description, "mtu": self.mtu,
            "subnet": str(self.subnet), "source": self.source,
            "hosts": {h.name: {"short": h.short, "ip": str(h.ip), "role": h.role, "tcp_cc": h.tcp_cc}
                      for h in self.hosts.values()},
            "transparent": {t.name: {"short": t.short, "kind": t.kind, "ports": list(t.ports)}
                            for t in self.transparent.values()},
            "links": [[str(link.a), str(link.b)] for link in self.links],
        }


def find(name_or_path: str) -> str:
    """Resolve a topology name (globalhawk) or a path to its YAML file."""
    if os.path.sep in name_or_path or name_or_path.endswith((".yaml", ".yml")):
        path = name_or_path
    else:
        path = os.path.join(TOPOLOGY_DIR, name_or_path + ".yaml")
    if not os.path.isfile(path):
        known = sorted(f[:-5] for f in os.listdir(TOPOLOGY_DIR) if f.endswith(".yaml"))
        raise SatbedError(f"unknown topology {name_or_path!r} (known: {', '.join(known)})")
    return path


def load(name_or_path: str) -> TopologySpec:
    path = find(name_or_path)
    doc = yamlfile.load(path, "topology")
    return parse(doc, source=path)


def parse(doc: object, source: str = "<data>") -> TopologySpec:
    def bad(msg: str) -> SatbedError:
        return SatbedError(f"topology {source}: {msg}")

    if not isinstance(doc, dict):
        raise bad("top level must be a mapping")
    unknown = set(doc) - {"name", "description", "subnet", "mtu", "hosts", "transparent", "links"}
    if unknown:
        raise bad(f"unknown key(s): {', '.join(sorted(unknown))}")
    try:
        subnet = ipaddress.IPv4Network(str(doc.get("subnet", "10.99.99.0/24")))
    except ValueError as e:
        raise bad(f"bad subnet: {e}") from None
    mtu = doc.get("mtu", 1500)
    if not isinstance(mtu, int) or not 576 <= mtu <= 9000:
        raise bad(f"mtu must be an integer in 576..9000, got {mtu!r}")

    shorts: set[str] = set()

    def node_common(name: object, body: object) -> dict:
        if not isinstance(name, str) or not _NAME.match(name):
            raise bad(f"node name {name!r} must be a letter then up to 15 letters/digits")
        if not isinstance(body, dict):
            raise bad(f"node {name}: must be a mapping")
        short = body.get("short", name[:2].lower())
        if not isinstance(short, str) or not _SHORT.match(short):
            raise bad(f"node {name}: short name {short!r} must be 1-3 lowercase letters/digits")
        if short in shorts:
            raise bad(f"node {name}: short name {short!r} used twice")
        shorts.add(short)
        return body

    for section in ("hosts", "transparent"):
        if not isinstance(doc.get(section) or {}, dict):
            raise bad(f"{section}: must be a mapping of name: node")
    if not isinstance(doc.get("links") or [], list):
        raise bad("links: must be a list of [node.port, node.port] pairs")
    hosts: dict[str, HostSpec] = {}
    for name, body in (doc.get("hosts") or {}).items():
        body = node_common(name, body)
        extra = set(body) - {"short", "ip", "role", "tcp_cc"}
        if extra:
            raise bad(f"host {name}: unknown key(s): {', '.join(sorted(extra))}")
        try:
            ip = ipaddress.IPv4Interface(str(body["ip"]))
        except KeyError:
            raise bad(f"host {name}: missing ip") from None
        except ValueError as e:
            raise bad(f"host {name}: bad ip: {e}") from None
        if ip.ip not in subnet:
            raise bad(f"host {name}: {ip.ip} is outside {subnet}")
        if subnet.prefixlen < 31 and ip.ip in (subnet.network_address, subnet.broadcast_address):
            raise bad(f"host {name}: {ip.ip} is the network's {'network' if ip.ip == subnet.network_address else 'broadcast'} address")
        for other in hosts.values():
            if other.ip.ip == ip.ip:
                raise bad(f"host {name}: {ip.ip} is also {other.name}'s address")
        hosts[name] = HostSpec(name, body.get("short", name[:2].lower()), ip,
                               str(body.get("role", "")), str(body.get("tcp_cc", "")))
    if len(hosts) < 2:
        raise bad("needs at least two hosts")

    transparent: dict[str, TransparentSpec] = {}
    for name, body in (doc.get("transparent") or {}).items():
        if name in hosts:
            raise bad(f"node {name} defined twice")
        body = node_common(name, body)
        extra = set(body) - {"short", "kind", "ports"}
        if extra:
            raise bad(f"transparent node {name}: unknown key(s): {', '.join(sorted(extra))}")
        kind = body.get("kind", "bridge")
        if kind not in TRANSPARENT_KINDS:
            raise bad(f"transparent node {name}: kind must be one of {', '.join(TRANSPARENT_KINDS)}")
        ports = body.get("ports")
        if (not isinstance(ports, list) or len(ports) != 2
                or not all(isinstance(p, str) and _PORT.match(p) for p in ports) or ports[0] == ports[1]):
            raise bad(f"transparent node {name}: ports must be two distinct short names")
        transparent[name] = TransparentSpec(name, body.get("short", name[:2].lower()), kind, tuple(ports))

    links: list[LinkSpec] = []
    used: set[Endpoint] = set()

    def endpoint(text: object) -> Endpoint:
        if not isinstance(text, str) or text.count(".") != 1:
            raise bad(f"link endpoint {text!r} must look like node.port")
        node, port = text.split(".")
        if node in hosts:
            if port != "eth0":
                raise bad(f"host {node} has one port, eth0 (got {port!r})")
        elif node in transparent:
            if port not in transparent[node].ports:
                raise bad(f"node {node} has no port {port!r} (ports: {', '.join(transparent[node].ports)})")
        else:
            raise bad(f"link names unknown node {node!r}")
        ep = Endpoint(node, port)
        if ep in used:
            raise bad(f"port {text} is linked twice")
        used.add(ep)
        return ep

    for item in doc.get("links") or []:
        if not isinstance(item, list) or len(item) != 2:
            raise bad(f"link {item!r} must be a pair [node.port, node.port]")
        link = LinkSpec(endpoint(item[0]), endpoint(item[1]))
        if link.a.node == link.b.node:
            # An emulator's ports wired to each other would bypass it: ping 0.05 ms at --rtt 600.
            raise bad(f"link {link.a} - {link.b} joins a node to itself")
        links.append(link)
    for h in hosts:
        if Endpoint(h, "eth0") not in used:
            raise bad(f"host {h} is not linked (no link names {h}.eth0)")
    for t in transparent.values():
        for p in t.ports:
            if Endpoint(t.name, p) not in used:
                raise bad(f"port {t.name}.{p} is not linked")
    return TopologySpec(str(doc.get("name", "unnamed")), mtu, subnet, hosts, transparent,
                        tuple(links), str(doc.get("description", "")), source)
