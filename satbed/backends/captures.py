"""tcpdump at each vantage point: per interface (never `-i any`), headers only
by default, started before the transfer so the SYNs are kept, stopped with
SIGINT so the file ends cleanly.

tcpdump runs in buffered mode, not --immediate-mode: the kernel hands it a
block of packets at a time instead of waking it per packet. Per-packet
wake-ups of four captures were the largest avoidable CPU cost of a cell on a
virtual machine (each one an inter-processor interrupt), which is what limits
how many cells run side by side. The price: a block that is not full reaches
tcpdump only when the kernel's block timer retires it (libpcap sets it to
tcpdump's 1 s read timeout; a block opened between two timer ticks waits for
the second), so stop() waits FLUSH_S before SIGINT or the last packets are
lost.

On a slow path (at most IMMEDIATE_MAX_BPS, a T1-class satellite link: a few
hundred packets a second per capture) the wake-ups cost little and the
blocks' flush a lot: a sweep of thousands of short transfers waited 2.2 s
after each. There tcpdump runs in --immediate-mode (libpcap then hands over
each packet as it arrives), and stop() only waits IMMEDIATE_FLUSH_S for the
last packets to be read before SIGINT."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass

from satbed.core.errors import SatbedError
from satbed.backends.net import Intf

SNAPLEN = {"headers": 128, "full": 0}
MODES = ("headers", "full", "none")
# Longest a captured packet waits in an unretired kernel block: two ticks of
# the 1 s block timer, plus margin.
FLUSH_S = 2.2
IMMEDIATE_MAX_BPS = 2_000_000
# A woken tcpdump reads the last packets within a scheduling delay (p99 55 ms
# on the loaded VM this was measured on).
IMMEDIATE_FLUSH_S = 0.3


@dataclass
class Capture:
    vantage: str
    intf: Intf
    path: str
    proc: subprocess.Popen | None = None


class Captures:
    def __init__(self, vantages: dict[str, Intf], run_dir: str, mode: str = "headers",
                 rate_bps: int | None = None):
        if mode not in MODES:
            raise SatbedError(f"unknown capture mode {mode!r} (known: {', '.join(MODES)})")
        self.mode = mode
        self.immediate = rate_bps is not None and 0 < rate_bps <= IMMEDIATE_MAX_BPS
        self.dir = os.path.join(run_dir, "captures")
        self.items = [Capture(v, i, os.path.join(self.dir, f"{v}.pcap")) for v, i in vantages.items()]

    def start(self) -> None:
        if self.mode == "none":
            return
        os.makedirs(self.dir, exist_ok=True)
        for c in self.items:
            c.proc = self._tcpdump(c)
        # tcpdump says "listening on" once its socket is open; wait for it so
        # the first SYN is not missed.
        for c in self.items:
            line = b""
            deadline = time.monotonic() + 10
            while b"listening on" not in line:
                if c.proc.poll() is not None or time.monotonic() > deadline:
                    raise SatbedError(f"tcpdump on {c.intf.name} did not start: {line.decode(errors='replace').strip()}")
                line = c.proc.stderr.readline()

    def _tcpdump(self, c: Capture) -> subprocess.Popen:
        args = ["tcpdump", "-i", c.intf.name, "-s", str(SNAPLEN[self.mode]), "-n",
                *(["--immediate-mode"] if self.immediate else [])]
        if not c.intf.node.sandbox.local:
            # A machine of the physical test bed writes to the shared results directory itself.
            return c.intf.node.popen([*args, "-w", c.path], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # The file is opened here and tcpdump writes it through its stdout: a
        # container node (the emulator's) needs no view of the run directory.
        with open(c.path, "wb") as out:
            return c.intf.node.popen([*args, "-w", "-"], stdout=out, stderr=subprocess.PIPE)

    def stop(self) -> dict:
        summary = {}
        if any(c.proc for c in self.items):
            time.sleep(IMMEDIATE_FLUSH_S if self.immediate else FLUSH_S)
        for c in self.items:
            if c.proc is None:
                continue
            if c.proc.poll() is None:
                c.proc.send_signal(signal.SIGINT)
            try:
                _, err = c.proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                c.proc.kill()
                _, err = c.proc.communicate()
            stats = [ln for ln in err.decode(errors="replace").splitlines() if "packets" in ln]
            summary[c.vantage] = {"interface": c.intf.name, "node": c.intf.node.name,
                                  "file": os.path.relpath(c.path, os.path.dirname(self.dir)),
                                  "snaplen": SNAPLEN[self.mode], "immediate": self.immediate, "tcpdump": stats}
            c.proc = None
        return summary
