"""The sender's congestion-window trace: `ss -tin` sampled inside the
sending host's namespace while the main flow runs (scenario key
workload.main.cwnd_trace: the period in seconds).

One shell loop runs in the namespace for the whole transfer (a process per
sample through `ip netns exec` would cost a mount namespace each); it
writes timestamped `ss` output to cwnd.txt, parsed on stop into
cwnd.jsonl: one object per sample of the flow to the peer that has moved
the most bytes (the main flow, not a tool's control connection)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field

from satbed.core.errors import SatbedError
from satbed.backends.net import Host

STAMP = "@@ "
FIELDS = {"cwnd": int, "ssthresh": int, "rto": float, "unacked": int, "retrans": str,
          "bytes_acked": int, "bytes_sent": int, "lost": int, "backoff": int}


@dataclass
class CwndSampler:
    host: Host               # the sender
    peer_ip: str             # the receiver's address (ss filter)
    run_dir: str
    interval_s: float = 0.1
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def raw_path(self) -> str:
        return os.path.join(self.run_dir, "cwnd.txt")

    @property
    def path(self) -> str:
        return os.path.join(self.run_dir, "cwnd.jsonl")

    def start(self) -> None:
        if not 0.01 <= self.interval_s <= 10:
            raise SatbedError(f"workload.main.cwnd_trace: a period in seconds in [0.01, 10], got {self.interval_s!r}")
        script = (f"while :; do echo \"{STAMP}$(date +%s.%N)\"; "
                  f"ss -tinH dst {shlex.quote(self.peer_ip)}; sleep {self.interval_s:g}; done")
        out = open(self.raw_path, "w")
        try:
            self.proc = self.host.popen(["sh", "-c", script], stdout=out, stderr=subprocess.DEVNULL,
                                        stdin=subprocess.DEVNULL)
        finally:
            out.close()

    def stop(self) -> dict:
        """Ends the loop and writes cwnd.jsonl; returns a summary for result.json."""
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
            if self.proc in self.host.procs:
                self.host.procs.remove(self.proc)
            self.proc = None
        with open(self.raw_path, errors="replace") as f:
            samples = parse(f.read())
        with open(self.path, "w") as f:
            for s in samples:
                f.write(json.dumps(s) + "\n")
        return {"file": os.path.basename(self.path), "samples": len(samples), "interval_s": self.interval_s,
                "max_cwnd": max((s["cwnd"] for s in samples if "cwnd" in s), default=None)}


_KV = re.compile(r"\b([a-z_]+):([0-9][0-9.,/]*)")


def parse(text: str) -> list[dict]:
    """Timestamped `ss -tinH` output -> the samples of the connection that
    acknowledged the most bytes in the whole trace (ss prints each socket
    on one line, its details indented on the next)."""
    rows: list[dict] = []
    t: float | None = None
    conn = ""
    for line in text.splitlines():
        if line.startswith(STAMP):
            try:
                t = float(line[len(STAMP):])
            except ValueError:
                t = None
            continue
        if not line.strip():
            continue
        if not line[0].isspace():
            conn = " ".join(line.split()[-2:])      # local and peer address
            continue
        if t is None:
            continue
        d: dict = {"t": t, "conn": conn}
        for k, v in _KV.findall(line):
            if k in FIELDS:
                try:
                    d[k] = FIELDS[k](v.split(",")[0]) if FIELDS[k] is not str else v
                except ValueError:
                    pass
        rows.append(d)
    if not rows:
        return []
    main = max(rows, key=lambda d: d.get("bytes_acked", 0))["conn"]
    return [d for d in rows if d["conn"] == main]
