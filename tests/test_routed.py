"""Topologies beyond the chain, on real namespaces: routers forward and
route between subnets, several emulated links each hold their own delay, a
router port's drop-tail queue drops under overload, a one-sided PEP splits."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import tempfile
import time

import pytest
import yaml

from satbed.backends import counters, emulation

from satbed.model import topology

from satbed.model import topology_spec
from satbed.model.link import LinkConfig
from satbed.core.proc import BIN_DIR
from satbed.backends.testbed import running

from satbed_testlib import needs_root

pytestmark = [needs_root, pytest.mark.skipif(not os.path.exists(os.path.join(BIN_DIR, "satemu")),
                                             reason="bin/satemu not built (make build)")]

SPOOFING = yaml.safe_load(open(topology.find("spoofing")))



def wait_listening(host, port: int, limit_s: float = 10) -> None:
    """Until something in the host's namespace listens on TCP port (not a fixed sleep)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if f":{port} " in host.run(["ss", "-Hltn"], check=False).stdout:
            return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on port {port} in {host.name} after {limit_s} s")

def spec_with(mutate=None) -> topology_spec.TopologySpec:
    doc = copy.deepcopy(SPOOFING)
    if mutate:
        mutate(doc)
    return topology.parse(doc, source="test")


def start_links(tb, links: dict[str, LinkConfig]) -> list:
    emus = []
    scratch = tempfile.mkdtemp(prefix="satbed-test-")
    for name, cfg in links.items():
        emu = emulation.make(tb.nodes[name], cfg, scratch, stats_dir=os.path.join(scratch, name))
        emu.start()
        emus.append(emu)
    return emus


def ping(src, dst, count: int = 1, interval: float = 0.2) -> str:
    return src.run(["ping", "-n", "-c", str(count), "-i", str(interval), "-W", "3", str(dst.ip.ip)],
                   timeout=30).stdout


def test_two_routers_forward_and_ttl_drops_by_the_router_count():
    bridge = LinkConfig.symmetric(backend="bridge")
    with running(spec_with(), bridge_kinds=("pep",)) as tb:
        emus = start_links(tb, {"inet": bridge, "sat": bridge})
        try:
            h1, h3, h4, h5 = (tb.host(h) for h in ("h1", "h3", "h4", "h5"))
            # Echo replies start at TTL 64; each router on the way takes one.
            assert "ttl=62" in ping(h1, h5)        # r2, r1
            assert "ttl=63" in ping(h5, h3)        # r1
            assert "ttl=63" in ping(h1, h4)        # r2
            assert "ttl=62" in ping(h4, h3)        # r1, r2
            route = tb.routers["r1"].run(["ip", "route", "get", "10.0.1.2"]).stdout
            assert "via 10.0.10.2" in route
        finally:
            for e in emus:
                e.stop()


def test_two_emulated_links_each_hold_their_own_delay():
    inet = LinkConfig.symmetric(rate="100mbit", rtt_ms=20, backend="userspace")
    sat = LinkConfig.symmetric(rate="100mbit", rtt_ms=100, backend="userspace")
    with running(spec_with(), bridge_kinds=("pep",)) as tb:
        emus = start_links(tb, {"inet": inet, "sat": sat})
        try:
            h1, h3, h5 = tb.host("h1"), tb.host("h3"), tb.host("h5")
            ping(h1, h5)        # neighbours resolved before timing
            out = ping(h1, h5, count=20)
            rtts = [float(x) for x in re.findall(r"time=([\d.]+)", out)]
            # Both links' delays, each applied once: the fastest echo says it,
            # since a busy or descheduled machine (a VM's stolen CPU) only adds.
            assert 119.9 <= min(rtts) < 130, rtts
            # h3 -> h5 crosses neither link.
            out = ping(h3, h5, count=5)
            assert max(float(x) for x in re.findall(r"time=([\d.]+)", out)) < 10
        finally:
            stats = [e.stop() for e in emus]
    assert all(s["backend"] == "userspace" for s in stats)


def test_router_queue_of_20_packets_drops_under_overload_and_counts_it():
    def small_queue(doc):
        doc["routers"]["r1"]["interfaces"]["wan"] = {"ip": "10.0.10.1/24", "rate": "10mbit", "queue": 20}
    spec = spec_with(small_queue)
    assert spec.routers["r1"].queues["wan"].packets == 20
    bridge = LinkConfig.symmetric(backend="bridge")
    with running(spec, bridge_kinds=("pep",)) as tb:
        emus = start_links(tb, {"inet": bridge, "sat": bridge})
        run_dir = tempfile.mkdtemp(prefix="satbed-test-")
        try:
            h5, h4 = tb.host("h5"), tb.host("h4")
            r1 = tb.routers["r1"]
            server = h4.popen(["nuttcp", "-S", "--nofork"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_listening(h4, 5000)           # nuttcp's control port
            # The runner's sampler, on every router port.
            with counters.CounterSampler([i for r in tb.routers.values() for i in r.intfs.values()],
                                         run_dir) as sampler:
                # 30 Mbit/s offered into a 10 Mbit/s port.
                h5.run(["nuttcp", "-u", "-T3", "-l1400", "-R30m", str(h4.ip.ip)], timeout=30, check=False)
            totals = sampler.stop()["ports"]
            server.terminate()
            server.wait(timeout=5)
        finally:
            for e in emus:
                e.stop()
    wan = totals["r1.wan"]
    assert wan["kind"] == "htb", wan      # the root: the shaper, its 20-packet fifo below
    assert wan["dropped"] > 1000, wan
    assert wan["sent_packets"] > 2000, wan
    # The queue never held more than its limit, and was full while overloaded.
    assert 15 <= wan["backlog_packets_max"] <= 20, wan
    # The other ports queue nothing.
    assert totals["r2.sat"]["dropped"] == 0


def test_one_sided_pepd_on_a_routed_path_splits(tmp_path):
    from satbed.execution.runner import run
    from satbed.model.config import PepPlacement, RunConfig
    cfg = RunConfig(client="ftp", topology="spoofing", size_bytes=1 << 20, captures="none", analyze=False,
                    link=LinkConfig.symmetric(rate="2mbit", rtt_ms=100, backend="userspace"),
                    links={"inet": LinkConfig.symmetric(rate="10mbit", rtt_ms=10, backend="userspace")},
                    peps={"h2": PepPlacement("pepd")}, endpoints=["h1", "h5"])
    run_dir, result = run(cfg, str(tmp_path))
    assert result["integrity"] == "ok", result
    node = result["pep"]["nodes"]["h2"]
    assert node["pep"] == "pepd" and node["side"] == "a"
    assert result["pep"]["connections_split"] >= 1, result["pep"]
    # Both links were up with their own settings.
    assert set(result["emulators"]) == {"inet", "sat"}
    assert result["emulators"]["inet"]["config"]["a_to_b"]["delay_ms"] == 5


def test_each_emulator_gets_its_own_tc_link():
    """The tc backend per emulator node (rate only: this kernel has no netem)."""
    inet = LinkConfig.symmetric(rate="10mbit", backend="tc")
    sat = LinkConfig.symmetric(rate="2mbit", ceil="3mbit", backend="tc")
    with running(spec_with(), bridge_kinds=("pep",)) as tb:
        emus = start_links(tb, {"inet": inet, "sat": sat})
        try:
            assert "ttl=62" in ping(tb.host("h1"), tb.host("h5"))
        finally:
            stats = {e.node.name: e.stop() for e in emus}
    assert all(s["backend"] == "tc" for s in stats.values())
    inet_cmds = " ".join(stats["inet"]["tc_commands"])
    sat_cmds = " ".join(stats["sat"]["tc_commands"])
    assert "rate 10000000bit" in inet_cmds and "2000000bit" not in inet_cmds
    assert "rate 2000000bit ceil 3000000bit" in sat_cmds
    # Each node's own ports: a_to_b leaves by port b.
    assert stats["sat"]["tc_commands"][0].split()[4].endswith("sab")


# Connect from h1 to h5:port, report milliseconds and the outcome; when it
# connects, send a line and read the echo (data through the split).
CONNECT = r"""
import socket, sys, time
s = socket.socket()
t = time.monotonic()
try:
    s.connect(("10.0.5.2", int(sys.argv[1])))
except ConnectionRefusedError:
    print("refused", round((time.monotonic() - t) * 1000, 1)); sys.exit()
ms = round((time.monotonic() - t) * 1000, 1)
try:
    s.sendall(b"through the spoofer\n")
    print("connected", ms, s.makefile().readline().strip())
except ConnectionResetError:
    print("reset", ms)
"""

ECHO = r"""
import socket
ls = socket.create_server(("10.0.5.2", 5009))
c, _ = ls.accept()
c.sendall(c.makefile("rb").readline())
"""


@pytest.mark.parametrize("mode", ["local", "end-to-end"])
def test_spoofer_handshake_modes(tmp_path, mode):
    """The spoofing study's spoofer keeps connection setup end to end: with
    handshake=end-to-end the client's connect takes the whole path's RTT
    (Internet 400 ms + satellite 100 ms here), not the satellite's alone,
    data still goes through the split, and a refused port is refused to
    the client after that same RTT with nothing split."""
    from satbed.backends.pepnodes import Pep
    inet = LinkConfig.symmetric(rate="100mbit", rtt_ms=400, backend="userspace")
    sat = LinkConfig.symmetric(rate="100mbit", rtt_ms=100, backend="userspace")
    with running(spec_with(), bridge_kinds=("pep",)) as tb:
        emus = start_links(tb, {"inet": inet, "sat": sat})
        h1, h5 = tb.host("h1"), tb.host("h5")
        pep = Pep("pepd", tb.nodes["h2"], "a", sat, str(tmp_path), options=f"handshake={mode}")
        server = h5.popen(["/usr/bin/python3", "-c", ECHO])
        try:
            ping(h1, h5)                       # neighbours resolved before timing
            pep.start()
            wait_listening(h5, 5009)
            ok = h1.run(["/usr/bin/python3", "-c", CONNECT, "5009"], timeout=30).stdout.split()
            refused = h1.run(["/usr/bin/python3", "-c", CONNECT, "5010"], timeout=30).stdout.split()
            # pepd refreshes its stats each second: wait for the split (and, end to
            # end, the refused upstream connect) to show, at most 10 s.
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                stats = pep.stats()
                if stats.get("connections_split", 0) >= 1 and (
                        mode != "end-to-end" or stats.get("connections_connect_failed", 0) >= 1):
                    break
                time.sleep(0.2)
        finally:
            server.kill()
            server.wait(timeout=10)
            pep.stop()
            records = [e.stop() for e in emus]
    assert ok[0] == "connected" and " ".join(ok[2:]) == "through the spoofer", ok
    connect_ms, refused_ms = float(ok[1]), float(refused[1])
    assert stats["connections_split"] == 1, stats
    # A handshake crosses each link there and back; on a loaded machine an
    # emulator may send a frame late, and satemu records by how much at
    # most. That much more is the emulators' doing, not the spoofer's.
    late_ms = 2 * sum(max(d["tx_late_max_us"] for d in r["stats"]["totals"]["directions"].values())
                      for r in records) / 1000
    if mode == "end-to-end":
        assert refused[0] == "refused", refused
        assert 480 <= connect_ms <= 800 + late_ms, (connect_ms, late_ms)
        assert 480 <= refused_ms <= 800 + late_ms, (refused_ms, late_ms)
        assert stats["connections_connect_failed"] == 1, stats
    else:
        # The spoofer answers across the satellite link alone; the refusal
        # comes as a reset after the connection was accepted.
        assert refused[0] == "reset", refused
        assert 90 <= connect_ms <= 300 + late_ms, (connect_ms, late_ms)
