"""nuttcp baselines. TCP moves the payload itself (nuttcp -s streams
stdin/stdout, which only its classic mode allows: a one-shot receiver listens,
the transmitter connects). UDP is memory to memory at the link rate, one
datagram per 1500-byte packet, and reports goodput and loss."""

from __future__ import annotations

import math

from satbed.backends.clients.base import ClientContext
from satbed.backends.clients.transfer import Run, TransferClient, ip
from satbed.core.errors import SatbedError

CONTROL_PORT = 5000
UDP_PAYLOAD = 1500 - 20 - 8     # no IP fragmentation
UNSHAPED_UDP_BPS = 100_000_000  # the plain bridge has no rate to match


def parse(out: str) -> dict[str, float]:
    """The key=value line -fparse prints (the last one wins)."""
    found: dict[str, float] = {}
    for line in out.splitlines():
        pairs = [w.split("=", 1) for w in line.split() if "=" in w]
        if any(k == "megabytes" for k, _ in pairs):
            found = {}
            for k, v in pairs:
                try:
                    found[k] = float(v)
                except ValueError:
                    pass
    return found


class NuttcpTcp(TransferClient):
    name = "nuttcp-tcp"
    tools = ("nuttcp",)

    def transfer(self, ctx: ClientContext, t: Run) -> dict:
        sender, receiver = ctx.sender, ctx.receiver
        payload = t.payload(t.path("send", "payload.bin"))
        received = t.expect(t.path("recv", "payload.bin"))
        rx = t.server(receiver, "receiver", [self.tool("nuttcp"), "-r", "-s", "--nofork", "-fparse", "-P", str(CONTROL_PORT)],
                      CONTROL_PORT, stdout=received)
        seconds, out = t.client(sender, [self.tool("nuttcp"), "-t", "-s", "-fparse", "-P", str(CONTROL_PORT),
                                         ip(receiver)], stdin=payload.path)
        t.wait_exit(rx, "nuttcp receiver", 10 + 3 * ctx.rtt_ms / 1000)
        stats = parse(out)
        extra = {"tool_goodput_bps": round(stats["rate_Mbps"] * 1e6)} if "rate_Mbps" in stats else {}
        if "retrans" in stats:
            extra["retransmits"] = int(stats["retrans"])
        # nuttcp times its own connect: the one probe a one-shot receiver allows.
        if "rtt_ms" in stats:
            extra["tcp_connect_ms"] = stats["rtt_ms"]
        return t.verify(payload, received, seconds, **extra)


class NuttcpUdp(TransferClient):
    name = "nuttcp-udp"
    tools = ("nuttcp",)
    tcp = False

    def transfer(self, ctx: ClientContext, t: Run) -> dict:
        server, client = ctx.aircraft, ctx.ground
        rate = ctx.rate_bps or UNSHAPED_UDP_BPS
        count = max(1, math.ceil(ctx.size_bytes / UDP_PAYLOAD))
        t.server(server, "server", [self.tool("nuttcp"), "-S", "--nofork", "-P", str(CONTROL_PORT)], CONTROL_PORT)
        # -r: the server transmits (download); -t: the client does (upload).
        role = "-t" if ctx.direction == "upload" else "-r"
        seconds, out = t.client(client, [self.tool("nuttcp"), role, "-u", f"-R{rate // 1000}", f"-l{UDP_PAYLOAD}",
                                         f"-n{count}", "-fparse", "-P", str(CONTROL_PORT), ip(server)])
        stats = parse(out)
        if "megabytes" not in stats:
            raise SatbedError("nuttcp-udp: nuttcp printed no statistics (see logs/nuttcp-udp.txt)")
        sent_pkts = int(stats.get("pkt", count))
        drops = int(stats.get("drop", 0))
        # Whole datagrams: more exact than the rounded megabytes field.
        got = (sent_pkts - drops) * UDP_PAYLOAD
        real = stats.get("real_seconds") or seconds
        return {"client": self.name, "direction": ctx.direction, "bytes": got, "bytes_offered": count * UDP_PAYLOAD,
                "seconds": round(real, 3), "goodput_bps": round(got * 8 / real) if real else 0,
                "offered_rate_bps": rate, "packets": sent_pkts, "packets_lost": drops,
                "loss": round(drops / sent_pkts, 6) if sent_pkts else 1.0,
                "tool_goodput_bps": round(stats.get("rate_Mbps", 0) * 1e6)}
