"""A plain TCP bulk transfer: one connection, the file and nothing else.

The ground host connects to a one-shot server on the aircraft (as an FTP
client opens a passive data connection); whichever end sends streams the
file with sendfile() and shuts its side down; the other writes it to disk
until the end of the stream. No login, no control connection, no separate
connect probe: tcp_connect_ms is the transfer's own connect(), timed by the
client. For a sweep of short transfers (the spoofing study's ns-2 FTP agent
was exactly this: SYN, N segments, FIN) the rest of an FTP session's round
trips would cost more than the transfer measured."""

from __future__ import annotations

import json
import sys

from satbed.backends.clients.base import ClientContext
from satbed.backends.clients.transfer import Run, TransferClient, ip
from satbed.core.errors import SatbedError

PORT = 7000

# Both ends run this in their node: "serve" accepts one connection, "connect"
# opens it (and prints its connect time as JSON); "send" streams the file,
# "recv" writes the stream to it. The sender waits for the peer's end of
# stream, so its exit means the receiver has everything.
_END = r"""
import json, socket, sys, time
role, how, host, port, path, timeout = sys.argv[1:7]
if role == "serve":
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, int(port)))
    ls.listen(1)
    s, _ = ls.accept()
    ls.close()
    connect_ms = None
else:
    t = time.perf_counter()
    s = socket.create_connection((host, int(port)), timeout=float(timeout))
    connect_ms = (time.perf_counter() - t) * 1000
    s.settimeout(None)
if how == "send":
    with open(path, "rb") as f:
        s.sendfile(f)
    s.shutdown(socket.SHUT_WR)
    while s.recv(65536):
        pass
else:
    with open(path, "wb") as f:
        while True:
            b = s.recv(1 << 20)
            if not b:
                break
            f.write(b)
            f.flush()
s.close()
if connect_ms is not None:
    print(json.dumps({"tcp_connect_ms": round(connect_ms, 3)}))
"""


def _end(role: str, how: str, host: str, path: str, timeout: float) -> list[str]:
    # -I -S: the standard library only, no site initialisation; it starts
    # faster on a loaded machine, and every transfer of a sweep starts two.
    return [sys.executable, "-I", "-S", "-c", _END, role, how, host, str(PORT), path, str(timeout)]


class Tcp(TransferClient):
    name = "tcp"
    tools = ()

    def transfer(self, ctx: ClientContext, t: Run) -> dict:
        server, client = ctx.aircraft, ctx.ground
        download = ctx.direction == "download"
        payload = t.payload(t.path("send", "payload.bin"))
        received = t.expect(t.path("recv", "payload.bin"))
        limit = 5 + 3 * ctx.rtt_ms / 1000
        how = ("send", "recv") if download else ("recv", "send")
        srv = t.server(server, "server", _end("serve", how[0], ip(server), payload.path if download else received,
                                              limit), PORT)
        seconds, out = t.client(client, _end("connect", how[1], ip(server), received if download else payload.path,
                                             limit))
        t.wait_exit(srv, "tcp server", 10 + 3 * ctx.rtt_ms / 1000)
        extra = {}
        for line in reversed(out.splitlines()):
            if line.startswith("{"):
                try:
                    extra = {"tcp_connect_ms": float(json.loads(line)["tcp_connect_ms"])}
                except (ValueError, KeyError, TypeError):
                    raise SatbedError(f"tcp: unreadable client summary {line!r}") from None
                break
        return t.verify(payload, received, seconds, **extra)
