"""iperf3 baseline: memory to memory, the requested number of bytes, server
on the aircraft, client on the ground (-R when the aircraft sends). No file:
iperf3's --file is not a file transfer (upstream says so; here a receiving
server stops short and partial sends corrupt the stream), so there is no
integrity check, only iperf3's byte count."""

from __future__ import annotations

import json

from satbed.backends.clients.base import ClientContext
from satbed.backends.clients.transfer import Run, TransferClient, ip
from satbed.core.errors import SatbedError

PORT = 5201


class Iperf3(TransferClient):
    name = "iperf3"
    tools = ("iperf3",)

    def transfer(self, ctx: ClientContext, t: Run) -> dict:
        server, client = ctx.aircraft, ctx.ground
        t.server(server, "server", [self.tool("iperf3"), "--server", "--bind", ip(server), "--port", str(PORT)],
                 PORT)
        connect_ms = t.connect_ms(client, ip(server), PORT)
        args = [self.tool("iperf3"), "--client", ip(server), "--port", str(PORT),
                "--bytes", str(ctx.size_bytes), "--json"]
        if ctx.direction == "download":
            args.append("--reverse")
        seconds, out = t.client(client, args)
        return {"client": self.name, "direction": ctx.direction, "tcp_connect_ms": connect_ms, **summary(out)}


def summary(out: str) -> dict:
    """Bytes, time and goodput at the receiver, retransmissions at the sender."""
    try:
        end = json.loads(out[out.index("{"):]).get("end", {})
        received = end["sum_received"]
    except (ValueError, KeyError):
        raise SatbedError("iperf3: no JSON summary in its output (see logs/iperf3.txt)") from None
    result = {"bytes": int(received["bytes"]), "seconds": round(received["seconds"], 3),
              "goodput_bps": round(received["bits_per_second"])}
    # iperf3 ends the test when the sender has written its bytes, so the
    # receiver may count less than was sent (what was in flight).
    if "bytes" in end.get("sum_sent", {}):
        result["bytes_sent"] = int(end["sum_sent"]["bytes"])
    if "retransmits" in end.get("sum_sent", {}):
        result["retransmits"] = end["sum_sent"]["retransmits"]
    return result
