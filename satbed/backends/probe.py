"""Probes for the live path, run inside nodes as `python3 satbed/backends/probe.py
MODE ...`; each prints one JSON line.

- send/recv/echo/rtt: UDP. Numbered datagrams of one frame size at a paced
  rate, counting which arrive; an echo for RTT samples.
- accept/connect: one TCP connection across the path, the proof that the PEPs
  split (satbed.backends.pepnodes.prove_split): the connecting side times its handshake,
  which a splitting PEP next to it answers in well under the link's RTT."""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import time

HEADERS = 14 + 20 + 8      # Ethernet + IPv4 + UDP: frame bytes = payload + HEADERS


def send(dst: str, port: int, frame: int, count: int, rate_bps: float) -> dict:
    payload = max(frame - HEADERS, 8)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    gap = (payload + HEADERS) * 8 / rate_bps
    start = time.monotonic()
    body = bytes(payload - 8)
    for seq in range(count):
        due = start + seq * gap
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        s.sendto(struct.pack("!Q", seq) + body, (dst, port))
    return {"sent": count, "frame_bytes": payload + HEADERS, "seconds": time.monotonic() - start}


def recv(bind: str, port: int, idle: float, total: float) -> dict:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.bind((bind, port))
    print("ready", flush=True)
    seen: set[int] = set()
    nbytes = 0
    first = last = None
    deadline = time.monotonic() + total
    s.settimeout(total)
    while time.monotonic() < deadline:
        try:
            data = s.recv(65536)
        except socket.timeout:
            break
        now = time.monotonic()
        first = first if first is not None else now
        last = now
        seen.add(struct.unpack("!Q", data[:8])[0])
        nbytes += len(data)
        s.settimeout(idle)
    return {"received": len(seen), "payload_bytes": nbytes,
            "seconds": (last - first) if first is not None and last is not None else 0.0}


def echo(bind: str, port: int, total: float) -> dict:
    """Return every datagram to its sender, until `total` seconds pass."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((bind, port))
    print("ready", flush=True)
    deadline = time.monotonic() + total
    n = 0
    while time.monotonic() < deadline:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data, peer = s.recvfrom(65536)
        except socket.timeout:
            break
        s.sendto(data, peer)
        n += 1
    return {"echoed": n}


def rtt(dst: str, port: int, count: int, interval: float, wait: float) -> dict:
    """RTT samples in ms at microsecond resolution (ping prints whole ms past 100 ms)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((dst, port))
    s.setblocking(False)
    rtts: dict[int, float] = {}
    start = time.monotonic()
    sent = 0
    end = start + count * interval + wait
    while time.monotonic() < end and len(rtts) < count:
        now = time.monotonic()
        if sent < count and now >= start + sent * interval:
            s.send(struct.pack("!Qd", sent, time.monotonic()))
            sent += 1
            continue
        try:
            data = s.recv(64)
        except BlockingIOError:
            time.sleep(0.0002)
            continue
        seq, t0 = struct.unpack("!Qd", data[:16])
        rtts[seq] = (time.monotonic() - t0) * 1000
    return {"sent": sent, "rtt_ms": [rtts[k] for k in sorted(rtts)]}


def accept(bind: str, port: int, total: float, count: int = 2) -> dict:
    """Take `count` TCP connections, say who they came from, close each (the
    FIN tells the connecting side that its connection got through end to end)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((bind, port))
    s.listen(4)
    print("ready", flush=True)
    deadline = time.monotonic() + total
    peers = []
    while len(peers) < count and time.monotonic() < deadline:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            c, peer = s.accept()
        except socket.timeout:
            break
        c.close()
        peers.append(peer[0])
    return {"accepted": len(peers) == count, "connections": len(peers), "peer": peers[-1] if peers else None}


def _one(dst: str, port: int, wait: float) -> dict:
    s = socket.socket()
    s.settimeout(wait)
    t0 = time.monotonic()
    try:
        s.connect((dst, port))
    except OSError as e:
        return {"connected": False, "error": str(e) or type(e).__name__}
    connect_ms = (time.monotonic() - t0) * 1000
    try:
        closed = s.recv(1) == b""
    except OSError as e:
        closed = isinstance(e, ConnectionResetError)   # a reset came back: the far side answered too
    s.close()
    return {"connected": True, "connect_ms": round(connect_ms, 3), "closed_by_peer": closed}


def connect(dst: str, port: int, wait: float) -> dict:
    """Open two TCP connections one after the other and time the second's
    handshake: the first also waits for address resolution (ARP crosses the
    whole path), which is not the handshake. Each waits (bounded) for the far
    side's close to come back through the path."""
    t0 = time.monotonic()
    first = _one(dst, port, wait)
    if not first["connected"]:
        return {**first, "seconds": round(time.monotonic() - t0, 3)}
    second = _one(dst, port, max(1.0, wait - (time.monotonic() - t0)))
    return {**second, "first_connect_ms": first["connect_ms"], "seconds": round(time.monotonic() - t0, 3)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="satbed.backends.probe")
    sub = p.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("send")
    s.add_argument("dst")
    s.add_argument("--port", type=int, default=7700)
    s.add_argument("--frame", type=int, default=1514)
    s.add_argument("--count", type=int, default=1000)
    s.add_argument("--rate", type=float, default=1e6)
    r = sub.add_parser("recv")
    r.add_argument("--bind", default="0.0.0.0")
    r.add_argument("--port", type=int, default=7700)
    r.add_argument("--idle", type=float, default=3.0, help="stop after this long without a datagram")
    r.add_argument("--total", type=float, default=120.0)
    e = sub.add_parser("echo")
    e.add_argument("--bind", default="0.0.0.0")
    e.add_argument("--port", type=int, default=7701)
    e.add_argument("--total", type=float, default=120.0)
    t = sub.add_parser("rtt")
    t.add_argument("dst")
    t.add_argument("--port", type=int, default=7701)
    t.add_argument("--count", type=int, default=100)
    t.add_argument("--interval", type=float, default=0.05)
    t.add_argument("--wait", type=float, default=5.0)
    ta = sub.add_parser("accept")
    ta.add_argument("--bind", default="0.0.0.0")
    ta.add_argument("--port", type=int, default=7702)
    ta.add_argument("--total", type=float, default=60.0)
    tc = sub.add_parser("connect")
    tc.add_argument("dst")
    tc.add_argument("--port", type=int, default=7702)
    tc.add_argument("--wait", type=float, default=30.0)
    a = p.parse_args(argv)
    if a.mode == "send":
        out = send(a.dst, a.port, a.frame, a.count, a.rate)
    elif a.mode == "recv":
        out = recv(a.bind, a.port, a.idle, a.total)
    elif a.mode == "echo":
        out = echo(a.bind, a.port, a.total)
    elif a.mode == "accept":
        out = accept(a.bind, a.port, a.total)
    elif a.mode == "connect":
        out = connect(a.dst, a.port, a.wait)
    else:
        out = rtt(a.dst, a.port, a.count, a.interval, a.wait)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
