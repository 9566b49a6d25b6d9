"""ICMP echo from Client A to Client B: the testbed's first sanity check."""

from __future__ import annotations

import re

from satbed.backends.clients.base import Client, ClientContext
from satbed.core.errors import SatbedError

_SUMMARY = re.compile(r"rtt min/avg/max/mdev = ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms")
_LOSS = re.compile(r"(\d+) packets transmitted, (\d+) received")
_TTL = re.compile(r"ttl=(\d+)")
# A reply as ping -D prints it: [epoch of arrival] ... icmp_seq=N ... time=RTT ms
_ECHO = re.compile(r"^\[(\d+(?:\.\d+)?)\] .*\bicmp_seq=(\d+) .*\btime=(\d+(?:\.\d+)?) ms", re.M)

# Every echo that came back, one a row, in the run directory: its sequence
# number, when it was sent (epoch seconds, the clock result.json's times
# use) and its RTT. A lost echo has no row.
ECHOES_FILE = "ping_echoes.csv"
ECHOES_HEADER = ("seq", "sent_epoch_s", "rtt_ms")


class Ping(Client):
    name = "ping"
    tools = ("ping",)
    tcp = False
    count = 10

    def run(self, ctx: ClientContext) -> dict:
        wait = max(2, int(2 * ctx.rtt_ms / 1000) + 2)
        # One echo first, so ARP resolution (itself a round trip over the
        # satellite) is not counted in the figures.
        ctx.ground.run(["ping", "-n", "-c", "1", "-W", str(wait), str(ctx.aircraft.ip.ip)],
                       timeout=wait + 10, check=False)
        # With a time limit, one echo a second for that long: the path's RTT
        # and losses over a whole scenario run (-D stamps each reply).
        # -w bounds the whole probe, so a loaded host's late echoes cannot
        # stretch it past the run's time limit.
        count, interval, deadline = self.count, 0.2, []
        if ctx.time_limit_s:
            count, interval = max(1, int(ctx.time_limit_s)), 1.0
            deadline = ["-w", str(count + wait)]
        cp = ctx.ground.run(["ping", "-n", "-D", "-c", str(count), "-i", str(interval), "-W", str(wait),
                             *deadline, str(ctx.aircraft.ip.ip)],
                            timeout=count * interval + wait + 20, check=False)
        with open(ctx.path("logs", "ping.txt"), "w", encoding="utf-8") as f:
            f.write(cp.stdout + cp.stderr)
        result = parse(cp.stdout)
        rows = echoes(cp.stdout)
        with open(ctx.path(ECHOES_FILE), "w", encoding="utf-8") as f:
            f.write(",".join(ECHOES_HEADER) + "\n" +
                    "".join(f"{seq},{sent:.6f},{rtt:g}\n" for seq, sent, rtt in rows))
        result["echoes_file"] = ECHOES_FILE
        return result


def parse(out: str) -> dict:
    counts = _LOSS.search(out)
    if not counts:
        raise SatbedError("ping printed no statistics")
    sent, received = int(counts.group(1)), int(counts.group(2))
    result = {"client": "ping", "sent": sent, "received": received,
              "loss": (sent - received) / sent if sent else 1.0}
    summary = _SUMMARY.search(out)
    if summary:
        mn, avg, mx, mdev = (float(x) for x in summary.groups())
        result.update(rtt_ms_min=mn, rtt_ms_avg=avg, rtt_ms_max=mx, rtt_ms_mdev=mdev)
    ttls = sorted({int(t) for t in _TTL.findall(out)})
    result["ttl"] = ttls
    return result


def echoes(out: str) -> list[tuple[int, float, float]]:
    """(icmp_seq, send time in epoch seconds, RTT ms) of each reply ping -D
    printed: -D stamps a reply's arrival, so it was sent RTT earlier."""
    rows = []
    for m in _ECHO.finditer(out):
        rtt = float(m.group(3))
        rows.append((int(m.group(2)), float(m.group(1)) - rtt / 1000, rtt))
    return rows
