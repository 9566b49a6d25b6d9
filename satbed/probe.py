"""A UDP probe for the live link: sends numbered datagrams of one frame size
at a paced rate, and counts which arrive. Run inside nodes as
`python3 -m satbed.probe send|recv ...`; prints one JSON line."""

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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="satbed.probe")
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
    a = p.parse_args(argv)
    if a.mode == "send":
        out = send(a.dst, a.port, a.frame, a.count, a.rate)
    else:
        out = recv(a.bind, a.port, a.idle, a.total)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
