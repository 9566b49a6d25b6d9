"""QUIC and HTTP/3 file transfers with our Go program (bin/satquic, on
quic-go): the server on the aircraft, get (download) or put (upload) on the
ground, as the Saratoga adapter. `quic` carries the file on one QUIC stream,
`http3` as an HTTP/3 GET or PUT. Both ends write a qlog per connection into
RUN/qlog/ and the client its TLS secrets into RUN/tls-keys.log
(SSLKEYLOGFILE format: `tshark -o tls.keylog_file:RUN/tls-keys.log`
decrypts a full capture). QUIC is UDP: a split PEP passes it untouched."""

from __future__ import annotations

import glob
import json
import math
import os
from dataclasses import dataclass

from satbed.backends.clients.base import ClientContext
from satbed.backends.clients.saratoga import summary, warm_neighbours
from satbed.backends.clients.transfer import Run, TransferClient, ip
from satbed.core.errors import SatbedError
from satbed.core.proc import run

PORT = 4433
QLOG_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Plan:
    """The two commands of one transfer and the files they write."""
    server: list[str]
    client: list[str]
    qlog_dir: str
    keylog: str


def idle_timeout(rtt_ms: float) -> str:
    """How long either end waits for a silent peer (the handshake too):
    several RTTs, never below satquic's own default."""
    return f"{max(30, int(10 * rtt_ms / 1000))}s"


def plan(satquic: str, mode: str, direction: str, server_ip: str, rtt_ms: float, run_dir: str,
         root: str, payload: str, received: str) -> Plan:
    """The server's and the client's argument lists. download: the client
    gets root's copy of the payload into `received`; upload: it puts
    `payload` into root under `received`'s name."""
    qlog_dir = os.path.join(run_dir, "qlog")
    keylog = os.path.join(run_dir, "tls-keys.log")
    common = ["-mode", mode, "-timeout", idle_timeout(rtt_ms), "-qlog-dir", qlog_dir]
    server = [satquic, "serve", "-root", root, "-listen", f"{server_ip}:{PORT}", *common]
    target = ["-server", f"{server_ip}:{PORT}", *common, "-keylog", keylog]
    if direction == "upload":
        client = [satquic, "put", *target, "-file", payload, "-name", os.path.basename(received)]
    else:
        client = [satquic, "get", *target, "-file", os.path.basename(payload), "-out", received]
    return Plan(server, client, qlog_dir, keylog)


def qlog_summaries(out: str) -> dict[str, dict]:
    """`satquic qlog`'s lines by vantage point (client, server); a second
    connection from one side (there should be none) keeps the one that
    moved more payload."""
    found: dict[str, dict] = {}
    for line in out.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            s = json.loads(line)
        except ValueError:
            continue
        if not isinstance(s, dict) or s.get("vantage") not in ("client", "server"):
            continue
        moved = _num(s.get("stream_bytes_received")) + _num(s.get("stream_bytes_sent"))
        old = found.get(s["vantage"])
        if old is None or moved > _num(old.get("stream_bytes_received")) + _num(old.get("stream_bytes_sent")):
            found[s["vantage"]] = s
    return found


def qlog_metrics(direction: str, summaries: dict[str, dict]) -> dict:
    """The figures taken from the qlogs: the handshake from the client's,
    the first byte and goodput from the receiver's, the congestion window
    and RTT from the sender's (quic-go logs its own cwnd and RTT samples).
    Times are ms from the start of that end's connection; -1 in a summary
    (an event that never came) is left out."""
    client = summaries.get("client", {})
    receiver = summaries.get("client" if direction == "download" else "server", {})
    sender = summaries.get("server" if direction == "download" else "client", {})
    picks = {
        "qlog_handshake_ms": (client, "handshake_ms"),
        "qlog_first_byte_ms": (receiver, "first_byte_ms"),
        "qlog_last_byte_ms": (receiver, "last_byte_ms"),
        "qlog_goodput_bps": (receiver, "goodput_bps"),
        "qlog_goodput_after_first_byte_bps": (receiver, "goodput_after_first_byte_bps"),
        "qlog_max_cwnd_bytes": (sender, "max_cwnd_bytes"),
        "qlog_min_rtt_ms": (sender, "min_rtt_ms"),
        "qlog_mean_rtt_ms": (sender, "mean_rtt_ms"),
        "qlog_max_rtt_ms": (sender, "max_rtt_ms"),
        "qlog_packets_lost": (sender, "packets_lost"),
    }
    metrics: dict = {}
    for key, (summary_of, field) in picks.items():
        value = summary_of.get(field)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
            metrics[key] = round(value, 3) if isinstance(value, float) else value
    return metrics


def _num(v: object) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0


class QuicTransfer(TransferClient):
    """One file over quic-go; the subclasses pick the mode."""
    mode = ""
    tools = ("satquic", "ping")
    tcp = False

    def transfer(self, ctx: ClientContext, t: Run) -> dict:
        server, client = ctx.aircraft, ctx.ground
        root = t.mkdir("aircraft")
        if ctx.direction == "upload":
            payload = t.payload(t.path("ground", "payload.bin"))
            received = t.expect(t.path("aircraft", "upload.bin"))
        else:
            payload = t.payload(t.path("aircraft", "payload.bin"))
            received = t.expect(t.path("ground", "payload.bin"))
        p = plan(self.tool("satquic"), self.mode, ctx.direction, ip(server), ctx.rtt_ms, ctx.run_dir, root,
                 payload.path, received)
        os.makedirs(p.qlog_dir, exist_ok=True)
        t.server(server, "server", p.server, PORT, proto="udp")
        warm_neighbours(t, client, self.tool("ping"), ip(server))
        seconds, out = t.client(client, p.client)
        tool = summary(out)
        # The server writes its qlog out as its connection closes or it
        # stops: stopped here, before its qlog is read.
        t.stop_servers()
        extra: dict = {"keylog": os.path.relpath(p.keylog, ctx.run_dir)}
        if isinstance(tool.get("congestion_control"), str):
            extra["congestion_control"] = tool["congestion_control"]
        if isinstance(tool.get("handshake_s"), (int, float)):
            extra["handshake_ms"] = round(tool["handshake_s"] * 1000, 3)
        if isinstance(tool.get("goodput_bps"), (int, float)):
            extra["tool_goodput_bps"] = round(tool["goodput_bps"])
        summaries = self.read_qlogs(t, p.qlog_dir)
        return t.verify(payload, received, seconds, **extra, **qlog_metrics(ctx.direction, summaries),
                        qlog=summaries, **{self.name: tool})

    def read_qlogs(self, t: Run, qlog_dir: str) -> dict[str, dict]:
        files = sorted(glob.glob(os.path.join(glob.escape(qlog_dir), "*.sqlog")))
        if not files:
            t.note(f"no qlog in {qlog_dir}")
            return {}
        try:
            cp = run([self.tool("satquic"), "qlog", *files], timeout=QLOG_TIMEOUT_S)
        except SatbedError as e:
            # A qlog the tool cannot read costs the qlog figures, not the run.
            t.note(f"qlog summary failed: {e}")
            return {}
        t.note(cp.stdout)
        summaries = qlog_summaries(cp.stdout)
        for s in summaries.values():
            if isinstance(s.get("file"), str):
                s["file"] = os.path.relpath(s["file"], t.ctx.run_dir)
        return summaries


class Quic(QuicTransfer):
    name = "quic"
    mode = "quic"


class Http3(QuicTransfer):
    name = "http3"
    mode = "http3"
