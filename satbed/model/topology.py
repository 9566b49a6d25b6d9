"""Topologies as data: a YAML file names hosts, routers, transparent nodes
and the links between their ports.

- host: one port (eth0), an address, optionally a gateway and a TCP profile.
- router: several ports, an address on each, IP forwarding; static routes
  are computed from the links unless the file gives them; each port may
  have a drop-tail queue (packets or bytes) behind an optional rate.
- transparent node (pep, emulator, bridge): two ports, no address, forwards
  frames. Port roles come from port names, never from their order: an
  emulator's ports are `a` and `b` (a_to_b is what enters at a), a PEP's
  are `lan` and `wan`.

Everything that has a meaning (segments, subnets, routes, a PEP's side, the
path between two hosts) is resolved here once, from the declared data; this
module only parses and validates, satbed.backends.net realizes a spec."""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
from collections import deque

from satbed.core import yamlfile
from satbed.core.errors import SatbedError
from satbed.core.proc import REPO_ROOT
from satbed.core.units import parse_rate, parse_size
from satbed.model.topology_spec import Endpoint, HostSpec, LinkSpec, Queue, Route, RouterSpec, Segment, TopologySpec, TransparentSpec

TOPOLOGY_DIR = os.path.join(REPO_ROOT, "topologies")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]{0,15}$")
_SHORT = re.compile(r"^[a-z][a-z0-9]{0,2}$")
_PORT = re.compile(r"^[a-z][a-z0-9]{0,4}$")
TRANSPARENT_KINDS = ("pep", "emulator", "bridge")
# Port roles by name: what each port of a transparent node is for.
ROLE_PORTS = {"emulator": ("a", "b"), "pep": ("lan", "wan")}
SIDES = ("a", "b")
HOST_PORT = "eth0"


def find(name_or_path: str) -> str:
    """Resolve a topology name (globalhawk) or a path to its YAML file."""
    if os.path.sep in name_or_path or name_or_path.endswith((".yaml", ".yml")):
        path = os.path.abspath(name_or_path)
    else:
        path = os.path.join(TOPOLOGY_DIR, name_or_path + ".yaml")
    if not os.path.isfile(path):
        known = sorted(f[:-5] for f in os.listdir(TOPOLOGY_DIR) if f.endswith(".yaml"))
        raise SatbedError(f"unknown topology {name_or_path!r} (known: {', '.join(known)})")
    return path


def load(name_or_path: str, overrides: dict | None = None) -> TopologySpec:
    """A topology file (or a scenario's inline topology), with dotted-path
    overrides (routers.r1.interfaces.wan.queue: 20) applied before parsing."""
    path = find(name_or_path)
    doc = yamlfile.load(path, "topology")
    if isinstance(doc, dict) and isinstance(doc.get("topology"), dict):
        doc = doc["topology"]       # a scenario file with its topology inline
    if overrides:
        if not isinstance(doc, dict):
            raise SatbedError(f"topology {path}: top level must be a mapping")
        for key, value in overrides.items():
            doc = yamlfile.set_path(doc, key, value, f"topology.{key}")
    return parse(doc, source=path)


def parse(doc: object, source: str = "<data>") -> TopologySpec:
    def bad(msg: str) -> SatbedError:
        return SatbedError(f"topology {source}: {msg}")

    if not isinstance(doc, dict):
        raise bad("top level must be a mapping")
    unknown = set(doc) - {"name", "description", "subnet", "mtu", "hosts", "routers", "transparent", "links"}
    if unknown:
        raise bad(f"unknown key(s): {', '.join(sorted(unknown))}")
    subnet = None
    if doc.get("subnet") is not None:
        try:
            subnet = ipaddress.IPv4Network(str(doc["subnet"]))
        except ValueError as e:
            raise bad(f"bad subnet: {e}") from None
    mtu = doc.get("mtu", 1500)
    if not isinstance(mtu, int) or not 576 <= mtu <= 9000:
        raise bad(f"mtu must be an integer in 576..9000, got {mtu!r}")

    shorts: set[str] = set()
    names: set[str] = set()

    def node_common(name: object, body: object, what: str, allowed: set[str]) -> tuple[dict, str]:
        if not isinstance(name, str) or not _NAME.match(name):
            raise bad(f"node name {name!r} must be a letter then up to 15 letters/digits")
        if name in names:
            raise bad(f"node {name} defined twice")
        names.add(name)
        if not isinstance(body, dict):
            raise bad(f"{what} {name}: must be a mapping")
        extra = set(body) - allowed - {"short"}
        if extra:
            raise bad(f"{what} {name}: unknown key(s): {', '.join(sorted(extra))}")
        short = body.get("short")
        if short is None:
            # Device names are prefix-short+port (15 bytes at most): a short
            # default, the next candidate when two names begin alike.
            candidates = [c for c in (name[:2].lower(), (name[0] + name[-1]).lower(), name[:3].lower())
                          if _SHORT.match(c)]
            short = next((c for c in candidates if c not in shorts), candidates[0] if candidates else name)
        if not isinstance(short, str) or not _SHORT.match(short):
            raise bad(f"node {name}: short name {short!r} must be 1-3 lowercase letters/digits")
        if short in shorts:
            raise bad(f"node {name}: short name {short!r} used twice")
        shorts.add(short)
        return body, short

    def address(text: object, where: str) -> ipaddress.IPv4Interface:
        if text is None:
            raise bad(f"{where}: missing ip")
        try:
            ip = ipaddress.IPv4Interface(str(text))
        except ValueError as e:
            raise bad(f"{where}: bad ip: {e}") from None
        if "/" not in str(text):
            raise bad(f"{where}: give the prefix length too, e.g. {ip.ip}/24")
        return ip

    for section in ("hosts", "routers", "transparent"):
        if not isinstance(doc.get(section) or {}, dict):
            raise bad(f"{section}: must be a mapping of name: node")
    if not isinstance(doc.get("links") or [], list):
        raise bad("links: must be a list of [node.port, node.port] pairs")
    hosts: dict[str, HostSpec] = {}
    gateways_given: dict[str, ipaddress.IPv4Address] = {}
    for name, body in (doc.get("hosts") or {}).items():
        body, short = node_common(name, body, "host", {"ip", "role", "tcp_cc", "gateway", "profile"})
        ip = address(body.get("ip"), f"host {name}")
        if subnet is not None and ip.ip not in subnet:
            raise bad(f"host {name}: {ip.ip} is outside {subnet}")
        if ip.network.prefixlen < 31 and ip.ip in (ip.network.network_address, ip.network.broadcast_address):
            which = "network" if ip.ip == ip.network.network_address else "broadcast"
            raise bad(f"host {name}: {ip.ip} is the {which} address of {ip.network}")
        if body.get("gateway") is not None:
            try:
                gw = ipaddress.IPv4Address(str(body["gateway"]))
            except ValueError as e:
                raise bad(f"host {name}: bad gateway: {e}") from None
            if gw not in ip.network:
                raise bad(f"host {name}: gateway {gw} is outside its subnet {ip.network}")
            gateways_given[name] = gw
        hosts[name] = HostSpec(name, short, ip, str(body.get("role", "")), str(body.get("tcp_cc", "")),
                               None, str(body.get("profile", "") or ""))
    if len(hosts) < 2:
        raise bad("needs at least two hosts")

    routers_raw: dict[str, tuple[str, dict, dict, object]] = {}
    for name, body in (doc.get("routers") or {}).items():
        body, short = node_common(name, body, "router", {"interfaces", "routes"})
        ifaces = body.get("interfaces")
        if not isinstance(ifaces, dict) or not ifaces:
            raise bad(f"router {name}: interfaces must map port names to {{ip: ..., queue: ...}}")
        addrs: dict[str, ipaddress.IPv4Interface] = {}
        queues: dict[str, Queue] = {}
        for port, ib in ifaces.items():
            where = f"router {name} port {port}"
            if not isinstance(port, str) or not _PORT.match(port):
                raise bad(f"{where}: port names are 1-5 lowercase letters/digits")
            if isinstance(ib, str):
                ib = {"ip": ib}
            if not isinstance(ib, dict):
                raise bad(f"{where}: must be an address or a mapping with ip:")
            extra = set(ib) - {"ip", "queue", "rate"}
            if extra:
                raise bad(f"{where}: unknown key(s): {', '.join(sorted(extra))} (known: ip, queue, rate)")
            addrs[port] = address(ib.get("ip"), where)
            if "queue" in ib or "rate" in ib:
                queues[port] = _queue(ib.get("queue"), ib.get("rate"), where, bad)
        nets = [a.network for a in addrs.values()]
        if len(set(nets)) != len(nets):
            raise bad(f"router {name}: two ports in one subnet")
        routers_raw[name] = (short, addrs, queues, body.get("routes"))

    transparent: dict[str, TransparentSpec] = {}
    for name, body in (doc.get("transparent") or {}).items():
        body, short = node_common(name, body, "transparent node", {"kind", "ports", "side", "ip"})
        kind = body.get("kind", "bridge")
        if kind not in TRANSPARENT_KINDS:
            raise bad(f"transparent node {name}: kind must be one of {', '.join(TRANSPARENT_KINDS)}")
        ports = body.get("ports", list(ROLE_PORTS.get(kind, ())))
        if (not isinstance(ports, list) or len(ports) != 2
                or not all(isinstance(p, str) and _PORT.match(p) for p in ports) or ports[0] == ports[1]):
            raise bad(f"transparent node {name}: ports must be two distinct short names")
        if kind in ROLE_PORTS and set(ports) != set(ROLE_PORTS[kind]):
            want = " and ".join(ROLE_PORTS[kind])
            raise bad(f"{kind} {name}: ports must be named {want} (their names say which is which)")
        side = body.get("side", "")
        if "side" in body and (kind != "pep" or side not in SIDES):   # side: 0 is no side, not a missing one
            raise bad(f"transparent node {name}: side is for PEPs and must be a or b")
        if "ip" in body and kind != "pep":
            raise bad(f"transparent node {name}: only a pep node may have an ip")
        node_ip = address(body["ip"], f"pep {name}") if "ip" in body else None
        transparent[name] = TransparentSpec(name, short, kind, tuple(sorted(ports)) if kind in ROLE_PORTS
                                            else tuple(ports), str(side), node_ip)

    def ports_of(node: str) -> tuple[str, ...] | None:
        if node in hosts:
            return (HOST_PORT,)
        if node in routers_raw:
            return tuple(routers_raw[node][1])
        if node in transparent:
            return transparent[node].ports
        return None

    links: list[LinkSpec] = []
    used: set[Endpoint] = set()

    def endpoint(text: object) -> Endpoint:
        if not isinstance(text, str) or text.count(".") != 1:
            raise bad(f"link endpoint {text!r} must look like node.port")
        node, port = text.split(".")
        ports = ports_of(node)
        if ports is None:
            raise bad(f"link names unknown node {node!r}")
        if port not in ports:
            if node in hosts:
                raise bad(f"host {node} has one port, eth0 (got {port!r})")
            raise bad(f"node {node} has no port {port!r} (ports: {', '.join(ports)})")
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
        if Endpoint(h, HOST_PORT) not in used:
            raise bad(f"host {h} is not linked (no link names {h}.{HOST_PORT})")
    for node in [*routers_raw, *transparent]:
        for p in ports_of(node) or ():
            if Endpoint(node, p) not in used:
                raise bad(f"port {node}.{p} is not linked")

    addr_of: dict[Endpoint, ipaddress.IPv4Interface] = {Endpoint(h.name, HOST_PORT): h.ip for h in hosts.values()}
    for rname, (_, addrs, _, _) in routers_raw.items():
        addr_of.update({Endpoint(rname, p): a for p, a in addrs.items()})
    seen_ips: dict[ipaddress.IPv4Address, Endpoint] = {}
    for ep, a in addr_of.items():
        if a.ip in seen_ips:
            raise bad(f"address {a.ip} given to both {seen_ips[a.ip]} and {ep}")
        seen_ips[a.ip] = ep
    segments = _segments(links, transparent, addr_of, bad)
    for t in transparent.values():
        if t.ip is None:
            continue
        if t.ip.ip in seen_ips:
            raise bad(f"pep {t.name}: address {t.ip.ip} is already {seen_ips[t.ip.ip]}'s")
        seen_ips[t.ip.ip] = Endpoint(t.name, "ip")
        seg = next((g for g in segments if t.name in g.transparent), None)
        if seg is not None and seg.subnet is not None and t.ip.network != seg.subnet:
            raise bad(f"pep {t.name}: {t.ip} is not on its segment's subnet {seg.subnet}")
    router_ifaces_on: dict[ipaddress.IPv4Network, list[Endpoint]] = {}
    for seg in segments:
        if seg.subnet is not None:
            router_ifaces_on[seg.subnet] = [m for m in seg.members if m.node in routers_raw]
    for name, h in list(hosts.items()):
        routers_here = router_ifaces_on.get(h.ip.network, [])
        gw = gateways_given.get(name)
        if gw is None and len(routers_here) == 1:
            gw = addr_of[routers_here[0]].ip
        elif gw is None and len(routers_here) > 1:
            raise bad(f"host {name}: {len(routers_here)} routers on {h.ip.network}; say which is its gateway:")
        elif gw is not None and all(addr_of[r].ip != gw for r in routers_here):
            raise bad(f"host {name}: gateway {gw} is no router port on its segment")
        hosts[name] = HostSpec(h.name, h.short, h.ip, h.role, h.tcp_cc, gw, h.profile)

    routers = {name: RouterSpec(name, short, addrs, queues,
                                _routes(name, given, routers_raw, segments, addr_of, bad), given is not None)
               for name, (short, addrs, queues, given) in routers_raw.items()}

    spec = TopologySpec(str(doc.get("name", "unnamed")), mtu, subnet, hosts, transparent, tuple(links),
                        str(doc.get("description", "")), source, routers, segments)
    for t in list(transparent.values()):
        if t.kind == "pep" and not t.side:
            _, side = facing_emulator_port(spec, t.name)
            if not side:
                raise bad(f"pep {t.name}: its wan port faces no emulator; give side: a or b")
            transparent[t.name] = dataclasses.replace(t, side=side)
    return spec


def _queue(q: object, rate: object, where: str, bad) -> Queue:
    """`queue: 20` (packets), `queue: 30000B` or `queue: 30K` (bytes), and an
    optional `rate:` that makes the port a bottleneck the queue fills behind."""
    packets = size = 0
    if isinstance(q, bool):
        raise bad(f"{where}: queue must be packets (20) or bytes (30000B)")
    if isinstance(q, int):
        packets = q
    elif isinstance(q, str) and q.strip().isascii() and q.strip().isdigit():   # '²' passes isdigit, not int
        packets = int(q)
    elif isinstance(q, str):
        try:
            size = parse_size(q)
        except SatbedError as e:
            raise bad(f"{where}: queue: {e}") from None
    elif q is not None:
        raise bad(f"{where}: queue must be packets (20) or bytes (30000B)")
    if q is not None and packets < 1 and size < 1:
        raise bad(f"{where}: queue must hold at least one packet")
    rate_bps = None
    if rate is not None:
        try:
            rate_bps = parse_rate(rate)
        except SatbedError as e:
            raise bad(f"{where}: {e}") from None
    return Queue(packets or (0 if size else 1000), size, rate_bps)


def _segments(links: list[LinkSpec], transparent: dict[str, TransparentSpec],
              addr_of: dict[Endpoint, ipaddress.IPv4Interface], bad) -> tuple[Segment, ...]:
    """Union-find over ports: a link joins its two ends, a transparent node
    its two ports. Every addressed port in one segment must share a subnet."""
    parent: dict[Endpoint, Endpoint] = {}

    def root(e: Endpoint) -> Endpoint:
        parent.setdefault(e, e)
        while parent[e] != e:
            parent[e] = parent[parent[e]]
            e = parent[e]
        return e

    def join(a: Endpoint, b: Endpoint) -> None:
        parent[root(a)] = root(b)

    for link in links:
        join(link.a, link.b)
    for t in transparent.values():
        join(Endpoint(t.name, t.ports[0]), Endpoint(t.name, t.ports[1]))
    groups: dict[Endpoint, list[Endpoint]] = {}
    for e in list(parent):
        groups.setdefault(root(e), []).append(e)
    out = []
    for members in groups.values():
        addressed = tuple(sorted((m for m in members if m in addr_of), key=str))
        nets = {addr_of[m].network for m in addressed}
        if len(nets) > 1:
            raise bad(f"{', '.join(map(str, addressed))} share a link but not a subnet "
                      f"({', '.join(sorted(map(str, nets)))}); put a router between them")
        inside = tuple(sorted({m.node for m in members if m.node in transparent}))
        out.append(Segment(nets.pop() if nets else None, addressed, inside))
    by_net = [s.subnet for s in out if s.subnet is not None]
    if len(set(by_net)) != len(by_net):
        raise bad("one subnet on two unconnected segments")
    return tuple(sorted(out, key=lambda s: str(s.subnet)))


def _routes(name: str, given: object, routers_raw: dict, segments: tuple[Segment, ...],
            addr_of: dict[Endpoint, ipaddress.IPv4Interface], bad) -> tuple[Route, ...]:
    """Given routes, checked; or shortest paths over the router graph (two
    routers are neighbours when they share a segment; ties go to the
    neighbour whose name sorts first, so the result never depends on order)."""
    own = {a.network for a in routers_raw[name][1].values()}
    if given is not None:
        if not isinstance(given, list):
            raise bad(f"router {name}: routes must be a list of {{to: subnet, via: address}}")
        out = []
        for r in given:
            if not isinstance(r, dict) or set(r) != {"to", "via"}:
                raise bad(f"router {name}: each route is {{to: subnet, via: address}}, got {r!r}")
            try:
                route = Route(ipaddress.IPv4Network(str(r["to"])), ipaddress.IPv4Address(str(r["via"])))
            except ValueError as e:
                raise bad(f"router {name}: bad route {r!r}: {e}") from None
            if not any(route.via in n for n in own):
                raise bad(f"router {name}: route via {route.via} is on none of its subnets")
            out.append(route)
        return tuple(out)
    # neighbour routers: router -> [(neighbour, neighbour's address on the shared segment)]
    adjacent: dict[str, list[tuple[str, ipaddress.IPv4Address]]] = {r: [] for r in routers_raw}
    subnets_of: dict[str, set[ipaddress.IPv4Network]] = {r: set() for r in routers_raw}
    for seg in segments:
        here = [m for m in seg.members if m.node in routers_raw]
        for m in here:
            if seg.subnet is not None:
                subnets_of[m.node].add(seg.subnet)
            for other in here:
                if other.node != m.node:
                    adjacent[m.node].append((other.node, addr_of[other].ip))
    first_hop: dict[str, ipaddress.IPv4Address | None] = {name: None}
    queue = deque([name])
    while queue:
        r = queue.popleft()
        for other, ip in sorted(adjacent[r], key=lambda x: x[0]):
            if other not in first_hop:
                first_hop[other] = ip if r == name else first_hop[r]
                queue.append(other)
    routes: dict[ipaddress.IPv4Network, ipaddress.IPv4Address] = {}
    for r in first_hop:        # breadth-first order: the nearest router wins a subnet
        hop = first_hop[r]
        for net in sorted(subnets_of[r], key=str):
            if net not in own and net not in routes and hop is not None:
                routes[net] = hop
    return tuple(Route(n, v) for n, v in sorted(routes.items(), key=lambda x: str(x[0])))


def facing_emulator_port(spec: TopologySpec, pep: str) -> tuple[str, str]:
    """The emulator and its port (a or b) the PEP's wan port reaches within
    its segment, i.e. which side of the satellite link the PEP is on."""
    seen = {pep}
    frontier = [(pep, "wan")]
    while frontier:
        node, port = frontier.pop()
        for own, other, other_port in spec.neighbours(node):
            if own != port or other in seen:
                continue
            seen.add(other)
            t = spec.transparent.get(other)
            if t is None:
                continue
            if t.kind == "emulator":
                return other, other_port
            frontier.append((other, next(p for p in t.ports if p != other_port)))
    return "", ""
