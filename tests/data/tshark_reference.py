#!/usr/bin/python3
"""Per-capture reference figures from tshark alone (no satbed code), for the
cross-check test: tests/analysis/test_tshark_crosscheck.py.

    tests/data/tshark_reference.py CAPTURE...   # prints {name: figures} as JSON

A CAPTURE may be xz-compressed (the stored fixtures under tests/data/xcheck/
are: headers only, see tests/data/xcheck/README.md); its name is
"<directory>/<vantage>" there, the file name otherwise.

A capture without TCP (Saratoga) gets its biggest UDP flow instead: datagrams,
payload bytes (udp.length - 8), first/last packet and rate_bps over that span.

For each capture's main TCP connection (the stream with the most payload) and its
data direction (the side that sent more payload):

    unique_bytes     highest data sequence + length minus the first data sequence
    elapsed_s        first to last packet of the stream, both directions
    throughput_bps   8 * unique_bytes / elapsed_s (tcptrace's definition of throughput)
    rexmt_pkts       data-direction segments tshark flags as a retransmission (plain,
                     fast or spurious) or out of order
    rtt_*            tcp.analysis.ack_rtt of the receiver's ACKs (ms)
    sack_blocks      sum of tcp.options.sack.count over the receiver's packets
    acks_with_sack   receiver packets carrying a SACK option
    first_syn        time of the stream's first SYN (without ACK)
    last_ack         time of the receiver's first ACK covering all it ever acknowledged
    acked_bytes      that ACK's relative number minus the first data sequence
"""

from __future__ import annotations

import json
import lzma
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

TSHARK = "/usr/bin/tshark"
FIELDS = ["frame.time_epoch", "tcp.stream", "ip.src", "tcp.srcport", "tcp.len",
          "tcp.seq", "tcp.analysis.ack_rtt", "tcp.options.sack.count", "tcp.ack",
          "tcp.flags.syn", "tcp.flags.ack"]


def _tshark(capture: Path, display_filter: str, fields: list[str]) -> list[list[str]]:
    args = [TSHARK, "-n", "-r", str(capture), "-Y", display_filter, "-T", "fields",
            "-E", "separator=\t", "-E", "occurrence=f"]
    for f in fields:
        args += ["-e", f]
    res = subprocess.run(args, capture_output=True, text=True, timeout=300, check=True)
    return [line.split("\t") for line in res.stdout.splitlines()]


def reference(capture: Path) -> dict[str, Any]:
    """Figures of one capture (.pcap, or .pcap.xz decompressed to a temporary file)."""
    if capture.suffix == ".xz":
        with tempfile.NamedTemporaryFile(suffix=".pcap") as tmp:
            tmp.write(lzma.decompress(capture.read_bytes()))
            tmp.flush()
            return _reference(Path(tmp.name))
    return _reference(capture)


def name_of(capture: Path) -> str:
    if capture.suffix == ".xz":
        return f"{capture.parent.name}/{capture.name.split('.')[0]}"
    return capture.name


def _udp_reference(capture: Path) -> dict[str, Any]:
    """The biggest UDP flow (one direction) of a capture without TCP."""
    rows = _tshark(capture, "udp", ["frame.time_epoch", "ip.src", "udp.srcport", "ip.dst",
                                    "udp.dstport", "udp.length"])
    flows: dict[tuple[str, ...], list[float]] = {}
    for t, src, sport, dst, dport, length in rows:
        f = flows.setdefault((src, sport, dst, dport), [0, 0, float(t), float(t)])
        f[0] += 1
        f[1] += int(length) - 8
        f[2] = min(f[2], float(t))
        f[3] = max(f[3], float(t))
    key = max(flows, key=lambda k: flows[k][1])
    n, nbytes, first, last = flows[key]
    return {"udp_flow": f"{key[0]}:{key[1]} -> {key[2]}:{key[3]}", "datagrams": int(n),
            "payload_bytes": int(nbytes), "first_packet": first, "last_packet": last,
            "rate_bps": 8 * nbytes / (last - first) if last > first else None}


def _reference(capture: Path) -> dict[str, Any]:
    if not _tshark(capture, "tcp", ["frame.number"]):
        return _udp_reference(capture)
    rows = _tshark(capture, "tcp", FIELDS)
    payload: dict[str, int] = {}
    for r in rows:
        payload[r[1]] = payload.get(r[1], 0) + int(r[4] or 0)
    stream = max(payload, key=lambda k: (payload[k], -int(k)))
    mine = [r for r in rows if r[1] == stream]
    by_side: dict[tuple[str, str], int] = {}
    for r in mine:
        by_side[(r[2], r[3])] = by_side.get((r[2], r[3]), 0) + int(r[4] or 0)
    sender = max(by_side, key=lambda k: by_side[k])
    data = [r for r in mine if (r[2], r[3]) == sender and int(r[4] or 0) > 0]
    acks = [r for r in mine if (r[2], r[3]) != sender]
    first_seq = min(int(r[5]) for r in data)
    # seq + len, not tcp.nxtseq: a FIN riding on the last segment adds one to nxtseq.
    unique = max(int(r[5]) + int(r[4]) for r in data) - first_seq
    times = [float(r[0]) for r in mine]
    elapsed = max(times) - min(times)
    rtts = [float(r[6]) * 1000 for r in acks if r[6]]
    sacks = [int(r[7]) for r in acks if r[7]]
    # The spoofing views' anchors: the first SYN, and the first ACK covering
    # everything the receiver ever acknowledged of the data (all of it when the
    # transfer completed).
    syns = [float(r[0]) for r in mine if _flag(r[9]) and not _flag(r[10])]
    data_acks = [r for r in acks if _flag(r[10]) and not _flag(r[9])]
    end = min(max(int(r[5]) + int(r[4]) for r in data), max(int(r[8]) for r in data_acks))
    last_ack = next(float(r[0]) for r in data_acks if int(r[8]) >= end)
    # Every flag tshark puts on a data segment below the highest sequence seen:
    # which one it picks is a timing heuristic (next to the sender most loss
    # repairs come out "out of order"); together they are the retransmissions
    # passing this capture point.
    rexmt = _tshark(capture, f"tcp.stream == {stream} && ip.src == {sender[0]} && "
                             f"tcp.srcport == {sender[1]} && tcp.len > 0 && "
                             "(tcp.analysis.retransmission || tcp.analysis.fast_retransmission || "
                             "tcp.analysis.spurious_retransmission || tcp.analysis.out_of_order)",
                    ["frame.number"])
    return {
        "sender": f"{sender[0]}:{sender[1]}",
        "unique_bytes": unique,
        "elapsed_s": elapsed,
        "throughput_bps": 8 * unique / elapsed if elapsed > 0 else None,
        "rexmt_pkts": len(rexmt),
        "rtt_samples": len(rtts),
        "rtt_min_ms": min(rtts) if rtts else None,
        "rtt_avg_ms": sum(rtts) / len(rtts) if rtts else None,
        "rtt_max_ms": max(rtts) if rtts else None,
        "sack_blocks": sum(sacks),
        "acks_with_sack": len(sacks),
        "first_syn": min(syns) if syns else None,
        "last_ack": last_ack,
        "acked_bytes": end - first_seq,
    }


def _flag(v: str) -> bool:
    """tshark prints booleans as 1/0, or True/False in newer versions."""
    return v.strip() in ("1", "True")


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: tshark_reference.py CAPTURE...", file=sys.stderr)
        return 2
    out = {name_of(Path(a)): reference(Path(a)) for a in argv}
    json.dump(out, sys.stdout, indent=2, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
