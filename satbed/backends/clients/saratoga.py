"""Saratoga, the rate-based UDP file transfer, with our Go implementation
(bin/saratoga): the server on the aircraft, get (download) or put (upload)
on the ground, both at the link rate."""

from __future__ import annotations

import json

from satbed.backends.clients.base import ClientContext
from satbed.backends.clients.transfer import Run, TransferClient, ip
from satbed.core.errors import SatbedError
from satbed.backends.net import Node

PORT = 7542
UNSHAPED_BPS = 100_000_000  # the plain bridge has no rate to match


class Saratoga(TransferClient):
    name = "saratoga"
    tools = ("saratoga", "ping")
    tcp = False

    def transfer(self, ctx: ClientContext, t: Run) -> dict:
        server, client = ctx.aircraft, ctx.ground
        rate = ctx.rate_bps or UNSHAPED_BPS
        root = t.mkdir("aircraft")
        # Inactivity bound: a few RTTs, never below saratoga's own default.
        idle = f"{max(30, int(10 * ctx.rtt_ms / 1000))}s"
        saratoga = self.tool("saratoga")
        t.server(server, "server", [saratoga, "serve", "-root", root, "-listen", f"{ip(server)}:{PORT}",
                                    "-rate", str(rate), "-timeout", idle], PORT, proto="udp")
        common = ["-server", f"{ip(server)}:{PORT}", "-rate", str(rate), "-timeout", idle]
        if ctx.direction == "upload":
            payload = t.payload(t.path("ground", "payload.bin"))
            received = t.expect(t.path("aircraft", "upload.bin"))
            args = [saratoga, "put", *common, "-file", payload.path, "-name", "upload.bin"]
        else:
            payload = t.payload(t.path("aircraft", "payload.bin"))
            received = t.expect(t.path("ground", "payload.bin"))
            args = [saratoga, "get", *common, "-file", "payload.bin", "-out", received]
        warm_neighbours(t, client, self.tool("ping"), ip(server))
        seconds, out = t.client(client, args)
        return t.verify(payload, received, seconds, rate_bps=rate, saratoga=summary(out))


def warm_neighbours(t: Run, node: Node, ping: str, server_ip: str) -> None:
    """One untimed ping before the transfer, so that the first REQUEST does
    not wait for address resolution across the link (the TCP clients get
    the same from their untimed connect probe). A lost ping only means the
    transfer pays for resolution itself."""
    try:
        t.client(node, [ping, "-c", "1", "-W", "5", server_ip], timeout=15)
    except SatbedError:
        pass


def summary(out: str) -> dict:
    """The one JSON line saratoga prints on success."""
    for line in reversed(out.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return {}
