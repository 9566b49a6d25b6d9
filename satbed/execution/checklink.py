"""`satbed check-link`: measure the live satellite link against its
configuration, the way the study checked its bed with nuttcp UDP.

- udp_goodput_bps: nuttcp UDP goodput, offered above the rate so the shaper
  is the bottleneck; steady state only (the first seconds carry the start-up
  burst and the propagation delay).
- udp_wire_bps: the same in the bytes the shaper counts, as HTB does: the whole
  frame without FCS, i.e. UDP payload + 8 (UDP) + 20 (IPv4) + 14 (Ethernet).
- RTT with a UDP echo probe (ping prints whole milliseconds past 100 ms) idle,
  and under load (UDP one way at 90% of the rate, so the
  queue stays short and what is left is the emulator's own timing error).
- PER per frame size (64, 576, 1514 bytes) with a numbered UDP probe, beside
  the formula 1-(1-BER)^(8*bytes) and its 95% interval."""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import subprocess
import time

from satbed.backends import emulation

from satbed.model import topology
from satbed.model.link import LinkConfig
from satbed.core.errors import SatbedError
from satbed.backends.net import Host
from satbed.backends.probe import HEADERS
from satbed.core.proc import REPO_ROOT
from satbed.backends.testbed import Testbed
from satbed.model.link import Direction

NUTTCP_PAYLOAD = 1472          # a full 1500-byte IP packet
FRAME_SIZES = (64, 576, 1514)
PROBE = ["/usr/bin/python3", os.path.join(REPO_ROOT, "satbed", "backends", "probe.py")]


def rtt_stats(src: Host, dst: Host, count: int, interval: float) -> dict:
    """UDP echo RTTs at microsecond resolution; one warm-up exchange first so
    ARP resolution is not counted."""
    wait = 5 + 2 * count * interval
    echo = dst.popen([*PROBE, "echo", "--total", str(wait + 30)],
                     text=True)
    try:
        if echo.stdout.readline().strip() != "ready":
            raise SatbedError("UDP echo server did not start")
        probe = [*PROBE, "rtt", str(dst.ip.ip)]
        src.run([*probe, "--count", "1", "--wait", "5"], timeout=30)
        cp = src.run([*probe, "--count", str(count), "--interval", str(interval)],
                     timeout=wait + 30)
    finally:
        echo.kill()
        echo.wait()
    rtts = sorted(json.loads(cp.stdout.strip().splitlines()[-1])["rtt_ms"])
    if not rtts:
        return {"error": "no echo replies"}
    return {"rtt_ms_avg": statistics.fmean(rtts), "rtt_ms_p50": rtts[len(rtts) // 2],
            "rtt_ms_p99": rtts[min(len(rtts) - 1, math.ceil(0.99 * len(rtts)) - 1)],
            "rtt_ms_min": rtts[0], "rtt_ms_max": rtts[-1], "replies": len(rtts), "sent": count}


def nuttcp_udp(src: Host, dst: Host, rate_bps: float, seconds: int) -> dict:
    server = dst.popen(["nuttcp", "-S", "--nofork"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        cp = src.run(["nuttcp", "-u", "-i1", f"-T{seconds}", f"-l{NUTTCP_PAYLOAD}",
                      f"-R{rate_bps / 1000:.0f}", "-fparse", str(dst.ip.ip)],
                     timeout=seconds + 60, check=False)
    finally:
        server.terminate()
        server.wait(timeout=5)
    intervals = [float(m) for m in re.findall(r"rate_Mbps=([\d.]+)", cp.stdout)]
    if len(intervals) < 3:
        raise SatbedError(f"nuttcp UDP gave no interval reports: {cp.stdout.strip()[-200:] or cp.stderr.strip()}")
    # Per-second reports; the last line is the total. Skip the start-up burst.
    per_second = intervals[:-1]
    steady = per_second[3:] if len(per_second) > 5 else per_second[1:]
    goodput = statistics.fmean(steady) * 1e6
    return {"udp_goodput_bps": goodput,
            "udp_wire_bps": goodput * (NUTTCP_PAYLOAD + HEADERS) / NUTTCP_PAYLOAD,
            "intervals_mbps": per_second, "offered_bps": rate_bps, "seconds": seconds}


def per_probe(src: Host, dst: Host, frame: int, count: int, rate_bps: float, direction: Direction) -> dict:
    receiver = dst.popen([*PROBE, "recv", "--port", "7700",
                          "--idle", "3", "--total", str(count * frame * 8 / rate_bps + 60)],
                         text=True)
    try:
        if receiver.stdout.readline().strip() != "ready":
            raise SatbedError("UDP probe receiver did not start")
        src.run([*PROBE, "send", str(dst.ip.ip), "--frame", str(frame),
                 "--count", str(count), "--rate", str(rate_bps)],
                timeout=count * frame * 8 / rate_bps + 60)
        out, _ = receiver.communicate(timeout=30)
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()
    got = json.loads(out.strip().splitlines()[-1])
    expected = direction.drop_rate(frame)
    lost = count - got["received"]
    lo, hi = binomial_acceptance(count, expected)
    return {"frame_bytes": frame, "sent": count, "received": got["received"], "per_measured": lost / count,
            "per_expected": expected, "ci95": [lo / count, hi / count], "inside_ci95": lo <= lost <= hi}


def binomial_acceptance(n: int, p: float, level: float = 0.95) -> tuple[int, int]:
    """The central range of lost-probe counts that n probes at loss
    probability p give with the level's probability (exact binomial
    quantiles): a normal approximation around p = 5e-5 calls one lost probe
    in 3,000 an outlier, which it is not."""
    if p <= 0:
        return 0, 0
    if p >= 1:
        return n, n
    tail = (1 - level) / 2
    log_p, log_q = math.log(p), math.log1p(-p)
    cdf, lo = 0.0, None
    for k in range(n + 1):
        cdf += math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * log_p
                        + (n - k) * log_q)
        if lo is None and cdf >= tail:
            lo = k
        if cdf >= 1 - tail:
            return lo if lo is not None else k, k
    return lo if lo is not None else n, n


SECONDS_RANGE = (3, 3600)          # the loaded RTT probe skips the first 2 s
PROBES_RANGE = (100, 1_000_000)


def check(link: LinkConfig, seconds: int = 10, probes: int = 3000, topo: str = "globalhawk") -> dict:
    for name, value, (low, high) in (("--seconds", seconds, SECONDS_RANGE), ("--probes", probes, PROBES_RANGE)):
        if not low <= value <= high:
            raise SatbedError(f"{name} must be within {low}..{high}, got {value}")
    link.validate()
    spec = topology.load(topo)
    tb = Testbed(spec)
    emu = None
    try:
        tb.start(bridge_kinds=("pep", "bridge"))
        node = tb.transparent("emulator")[0]
        import tempfile
        scratch = tempfile.mkdtemp(prefix="satbed-checklink-")
        emu = emulation.make(node, link, scratch)
        emu.start()
        emu.start_clock()       # outages and profiles count from the measurement
        ground, aircraft = spec.host_with_role("ground"), spec.host_with_role("aircraft")
        if ground is None or aircraft is None:
            raise SatbedError(f"topology {spec.name}: check-link needs one host role: ground and one role: aircraft")
        a, b = tb.host(ground.name), tb.host(aircraft.name)
        rate = link.rate_bps
        out: dict = {"configured": {"rate_bps": rate, "rtt_ms": link.rtt_ms, "ber": link.a_to_b.ber,
                                    **({"loss": link.a_to_b.loss} if link.a_to_b.loss else {})},
                     "emulator": emu.backend}
        idle = rtt_stats(a, b, 100, 0.05)
        out["rtt_idle"] = idle
        out.update({k: idle.get(k) for k in ("rtt_ms_avg", "rtt_ms_p99")})
        if rate:
            # Offered above ceil: the shaper, not the sender, sets the pace.
            udp = nuttcp_udp(a, b, (link.a_to_b.ceil_bps or rate) * 1.2, seconds)
            out.update(udp)
            # Frames lost to bit errors never reach the receiver: compare
            # against what the shaper sends times the share that survives.
            out["udp_wire_expected_bps"] = rate * (1 - link.a_to_b.drop_rate(NUTTCP_PAYLOAD + HEADERS))
            out["udp_wire_error"] = udp["udp_wire_bps"] / out["udp_wire_expected_bps"] - 1
            load = b.popen(["nuttcp", "-S", "--nofork"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.3)
            loader = a.popen(["nuttcp", "-u", f"-T{seconds}", f"-l{NUTTCP_PAYLOAD}", f"-R{rate * 0.9 / 1000:.0f}",
                              str(b.ip.ip)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1)
            out["rtt_loaded"] = rtt_stats(a, b, int((seconds - 2) / 0.05), 0.05)
            loader.wait(timeout=seconds + 30)
            load.terminate()
            load.wait(timeout=5)
        probe_rate = min(rate * 0.5 if rate else 20e6, 20e6)
        out["per"] = {str(f): per_probe(a, b, f, probes, probe_rate, link.a_to_b) for f in FRAME_SIZES}
        return out
    finally:
        if emu is not None:
            try:
                emu.stop()
            except SatbedError:
                pass
        tb.stop()
