"""Queries on a topology's segments (the stretches of network between routers):
which emulator a PEP faces, which segment a node is on, and the routes a
transparent node's own connections need."""

from __future__ import annotations
from satbed.model.topology_spec import Route, Segment, TopologySpec
from satbed.model.topology import facing_emulator_port

def facing_emulator(spec: TopologySpec, pep: str) -> str:
    """The emulator the PEP's wan port faces within its segment ("" if none)."""
    return facing_emulator_port(spec, pep)[0]


def segment_of(spec: TopologySpec, node: str) -> Segment | None:
    for seg in spec.segments:
        if node in seg.transparent or any(m.node == node for m in seg.members):
            return seg
    return None


def transit_routes(spec: TopologySpec, node: str) -> tuple[Route, ...]:
    """Routes for a transparent node's own connections (a PEP's upstream
    legs): every subnet beyond its segment, via the router on the segment
    that has it attached or routes it without coming back to the segment."""
    seg = segment_of(spec, node)
    if seg is None or seg.subnet is None:
        return ()
    here = {m.node: spec.routers[m.node].addresses[m.port].ip for m in seg.members if m.node in spec.routers}
    out = []
    for dest in sorted({s.subnet for s in spec.segments if s.subnet is not None and s.subnet != seg.subnet},
                       key=str):
        direct = [r for r in sorted(here) if any(a.network == dest for a in spec.routers[r].addresses.values())]
        onward = [r for r in sorted(here) for route in spec.routers[r].routes
                  if route.to == dest and route.via not in seg.subnet]
        for r in direct + onward:
            out.append(Route(dest, here[r]))
            break
    return tuple(out)
