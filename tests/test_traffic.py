"""Background traffic (satbed/backends/traffic.py, clients/trafficgen) and router
counters (satbed/backends/counters.py): validation and analysis on data, then the
generator and the sampler on real namespaces."""

from __future__ import annotations

import json
import os
import statistics
import subprocess

import pytest

from satbed_testlib import REPO, needs_root
from satbed.core.errors import SatbedError

BIN = os.path.join(REPO, "bin", "trafficgen")


# Validation: one clear line -----------------------------------------------

def spec(**group):
    from satbed.model.workload import TrafficSpec
    return TrafficSpec.from_dict({"duration": 10, **group}, source="t.yaml")


def test_spec_accepts_each_workload_shape():
    s = spec(server="clientB", client="clientA", long=3)
    assert s.groups[0].long == 3 and s.duration_s == 10.0
    s = spec(server="b", client="a", arrival="poisson", rate=2.5, sizes="exp:1M", upload_fraction=0.25)
    assert s.groups[0].sizes == "exp:1048576"
    s = spec(server="b", client="a", arrival="constant", concurrent=20, sizes="table:surge-web")
    assert s.groups[0].sizes.startswith("table:/") and s.groups[0].sizes.endswith("surge-web.cdf")
    from satbed.model.workload import TrafficSpec
    two = TrafficSpec.from_dict({"seed": 7, "groups": [
        {"server": "h4", "client": "h3", "long": 1},
        {"server": "h4", "client": "h1", "arrival": "poisson", "rate": 1, "sizes": "pareto:1.2:10K:50M"}]})
    assert two.seed == 7 and two.groups[1].sizes == "pareto:1.2:10240:52428800" and two.duration_s is None
    assert TrafficSpec.from_dict(two.to_dict()) == two


@pytest.mark.parametrize("doc, message", [
    ({"server": "b", "client": "a"}, "no flows"),
    ({"server": "a", "client": "a", "long": 1}, "same host"),
    ({"server": "b", "client": "a", "long": -1}, "long must be"),
    ({"server": "b", "client": "a", "arrival": "burst"}, "arrival must be"),
    ({"server": "b", "client": "a", "arrival": "poisson", "sizes": "1K"}, "need rate"),
    ({"server": "b", "client": "a", "arrival": "constant", "sizes": "1K"}, "need concurrent"),
    ({"server": "b", "client": "a", "long": 1, "rate": 3}, "rate is for"),
    ({"server": "b", "client": "a", "arrival": "poisson", "rate": 1}, "need sizes"),
    ({"server": "b", "client": "a", "arrival": "poisson", "rate": 1, "sizes": "gauss:3"}, "sizes 'gauss:3'"),
    ({"server": "b", "client": "a", "arrival": "poisson", "rate": 1, "sizes": "table:nosuch"}, "unknown size table"),
    ({"server": "b", "client": "a", "arrival": "poisson", "rate": 1, "sizes": "pareto:1:9K:1K"}, "cap is below"),
    ({"server": "b", "client": "a", "long": 1, "upload_fraction": 2}, "upload_fraction"),
    ({"server": "b", "client": "a", "long": 1, "port": 0}, "port must be"),
    ({"server": "b", "client": "a", "long": 1, "colour": "red"}, "unknown key"),
    ({"server": "b", "client": "a", "long": 1, "duration": -1}, "duration must be"),
])
def test_spec_rejects_with_one_line(doc, message):
    from satbed.core.errors import SatbedError
    from satbed.model.workload import TrafficSpec
    with pytest.raises(SatbedError) as e:
        TrafficSpec.from_dict(doc, source="t.yaml")
    assert message in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith("t.yaml")


def test_generator_rejects_bad_flags_with_status_2():
    if not os.access(BIN, os.X_OK):
        pytest.skip("bin/trafficgen not built (make build)")
    for args in (["client"], ["client", "-server", "x:1", "-arrival", "poisson", "-rate", "1"],
                 ["client", "-server", "x:1", "-long", "1", "-sizes", "weird:1"], ["fly"]):
        cp = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=10)
        assert cp.returncode == 2 and len(cp.stderr.strip().splitlines()) == 1, (args, cp.stderr)


# Analysis on stored records -------------------------------------------------

def _write(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def test_load_flows_joins_sender_retransmissions_and_counts_open_flows(tmp_path):
    from analysis import traffic
    base = {"record": "flow", "client": 0, "kind": "finite", "size": 1000, "status": "completed"}
    _write(tmp_path / "traffic" / "client-0-a.jsonl", [
        {**base, "side": "client", "flow": 1, "direction": "download", "remote": "10.0.0.2:5301", "start": 100.0,
         "end": 101.0, "bytes": 1000, "goodput_bps": 8000, "sender": False, "retransmissions": None},
        {**base, "side": "client", "flow": 2, "direction": "upload", "remote": "10.0.0.2:5301", "start": 100.5,
         "end": 102.0, "bytes": 1000, "goodput_bps": 5333, "sender": True, "retransmissions": 3},
        {"record": "summary", "side": "client", "cpu_share": 0.01}])
    _write(tmp_path / "traffic" / "server-b-5301.jsonl", [
        {**base, "side": "server", "flow": 1, "direction": "download", "bytes": 1000, "sender": True,
         "retransmissions": 5, "retrans_bytes": 7000},
        {**base, "side": "server", "flow": 2, "direction": "upload", "bytes": 1000, "sender": False,
         "retransmissions": None}])
    flows = traffic.load_flows(str(tmp_path))
    assert [(f["flow"], f["retransmissions"], f["server_bytes"]) for f in flows] == [(1, 5, 1000), (2, 3, 1000)]
    series = dict(traffic.active_flows(flows, step_s=0.5))
    assert series[0.0] == 1 and series[0.5] == 2 and series[1.0] == 1 and series[2.0] == 0
    cdf = traffic.goodput_cdf(flows)
    assert cdf == {"download": [(8000, 1.0)], "upload": [(5333, 1.0)]}
    assert traffic.goodput_cdf(flows, select=lambda f: f["start"] > 100.2) == {"upload": [(5333, 1.0)]}
    s = traffic.summary(str(tmp_path))
    assert s["flows"] == 2 and s["retransmissions"] == 8 and s["cpu_share"]["client-0-a"] == 0.01
    assert traffic.plot(str(tmp_path)).startswith(b"\x89PNG")
    assert "Background traffic" in traffic.report_section(str(tmp_path))


def test_counter_summary_and_plot_from_a_stored_series(tmp_path):
    from analysis import counters as drawn
    from satbed.backends import counters
    rows = []
    for i in range(5):
        rows.append({"t_s": i * 0.1, "unix": 1000 + i * 0.1, "node": "r1", "port": "eth1", "dev": "sb-r1eth1",
                     "kind": "pfifo", "sent_packets": 100 * i, "sent_bytes": 150000 * i, "dropped": 3 * i,
                     "overlimits": 0, "requeues": 0, "backlog_packets": min(20, 5 * i), "backlog_bytes": 0,
                     "tx_packets": 100 * i, "tx_bytes": 150000 * i, "tx_dropped": 0, "rx_packets": 0,
                     "rx_bytes": 0, "rx_dropped": 0})
    _write(tmp_path / counters.SERIES, rows)
    s = counters.summarize(counters.read_series(str(tmp_path / counters.SERIES)))
    assert s["r1.eth1"]["dropped"] == 12 and s["r1.eth1"]["backlog_packets_max"] == 20
    assert drawn.plot(rows).startswith(b"\x89PNG")
    cut = drawn.intervals(rows, "r1.eth1", 0.2)
    assert [(c["t_s"], c["dropped"], round(c["tx_bps"])) for c in cut] == [(0.0, 6, 12000000), (0.2, 6, 12000000)]
    assert "Router interface counters" in drawn.report_section(str(tmp_path))


# On real namespaces ---------------------------------------------------------

def shape(node, dev: str, rate: str, fifo: list[str]) -> None:
    """An HTB rate limit with a FIFO leaf on a port's egress: a bottleneck
    (a veth alone drains at memory speed)."""
    node.run(["tc", "qdisc", "del", "dev", dev, "root"], check=False)
    node.run(["tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1"])
    node.run(["tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", rate,
              "burst", "1514", "cburst", "1514"])
    node.run(["tc", "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", *fifo])


@pytest.fixture(scope="module")
def testbed():
    """The Global Hawk chain, every middle node a plain bridge, 10 Mbit/s each
    way on the emulator's ports (queues of 100 packets): clientB serves."""
    if os.geteuid() != 0:
        pytest.skip("needs root for network namespaces")
    if not os.access(BIN, os.X_OK):
        pytest.skip("bin/trafficgen not built (make build)")
    from satbed.model import topology
    from satbed.backends.testbed import Testbed
    tb = Testbed(topology.load("globalhawk"))
    try:
        tb.start()
        emu = tb.nodes["emulator"]
        for port in emu.ports:
            shape(emu, emu.port(port).name, "10mbit", ["pfifo", "limit", "100"])
        yield tb
    finally:
        tb.stop()


def run_traffic(tb, run_dir, doc):
    from satbed.backends.traffic import Traffic
    from satbed.model.workload import TrafficSpec
    with Traffic(TrafficSpec.from_dict(doc), tb.hosts, str(run_dir)) as t:
        t.wait()
    assert "errors" not in t.result, t.result
    return t.result


@needs_root
def test_constant_count_keeps_20_flows_for_30_s(testbed, tmp_path):
    from analysis import traffic
    result = run_traffic(testbed, tmp_path, {"duration": 30, "seed": 5, "server": "clientB", "client": "clientA",
                                             "arrival": "constant", "concurrent": 20, "sizes": "exp:100K",
                                             "upload_fraction": 0.3})
    flows = traffic.load_flows(str(tmp_path))
    assert result["summary"]["flows"] == len(flows) > 40
    statuses = {f["status"] for f in flows}
    assert statuses <= {"completed", "stopped"}, [f.get("error") for f in flows if f["status"] == "aborted"][:3]
    done = [f for f in flows if f["status"] == "completed"]
    assert sum(f["status"] == "stopped" for f in flows) <= 20
    for f in done:
        assert f["bytes"] == f["size"] == f["server_bytes"] and f["goodput_bps"] > 0 and f["end"] > f["start"]
        assert isinstance(f["retransmissions"], int), f
    assert {f["direction"] for f in done} == {"download", "upload"}
    # Open flows, sampled every 100 ms from the first start to 30 s: never
    # above 20, and 20 nearly always (a replacement starts as its
    # predecessor's record is written).
    series = [n for t, n in traffic.active_flows(flows, step_s=0.1) if 0.5 <= t <= 29.5]
    assert max(series) == 20
    assert sum(n == 20 for n in series) >= 0.95 * len(series), statistics.mean(series)


@needs_root
def test_poisson_arrivals_at_the_configured_rate(testbed, tmp_path):
    from analysis import traffic
    rate, duration = 8.0, 20
    result = run_traffic(testbed, tmp_path, {"duration": duration, "seed": 11, "server": "clientB",
                                             "client": "clientA", "arrival": "poisson", "rate": rate,
                                             "sizes": "fixed:20K"})
    flows = traffic.load_flows(str(tmp_path))
    n = len(flows)
    # Poisson(160): sd 12.6; +-5 sd.
    assert rate * duration - 64 <= n <= rate * duration + 64, n
    assert result["summary"]["processes"]["client-0-clientA"]["skipped_arrivals"] == 0
    starts = sorted(f["start"] for f in flows)
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    mean = statistics.mean(gaps)
    assert 0.7 / rate <= mean <= 1.3 / rate, mean
    # Exponential gaps: coefficient of variation near 1 (a fixed clock gives 0).
    assert 0.7 <= statistics.pstdev(gaps) / mean <= 1.3
    assert sum(f["status"] == "completed" for f in flows) >= n - 5


@needs_root
def test_counters_see_drops_on_a_20_packet_queue_under_overload(testbed, tmp_path):
    from satbed.backends import counters
    emu = testbed.nodes["emulator"]
    port_a = emu.port(emu.ports[0])         # egress toward clientA: the downloads' direction
    shape(emu, port_a.name, "5mbit", ["pfifo", "limit", "20"])
    try:
        with counters.CounterSampler([port_a, testbed.host("clientA").eth0], str(tmp_path), interval_ms=50) as s:
            result = run_traffic(testbed, tmp_path, {"duration": 8, "server": "clientB", "client": "clientA",
                                                     "long": 10})
        totals = s.stop()
    finally:
        shape(emu, port_a.name, "10mbit", ["pfifo", "limit", "100"])
    assert "error" not in totals, totals
    q = totals["ports"][f"emulator.{port_a.port}"]
    assert q["kind"] == "htb" and q["dropped"] > 0 and 0 < q["backlog_packets_max"] <= 20, q
    assert q["tx_bytes"] > 8 * 5e6 / 8 * 0.5       # the bottleneck carried traffic at about its rate
    assert totals["samples"] >= 8 / 0.05 * 0.5
    rows = counters.read_series(os.path.join(str(tmp_path), counters.SERIES))
    assert {r["node"] for r in rows} == {"emulator", "clientA"}
    # The drops made the senders (the server, for downloads) retransmit, and
    # the flows' records say so.
    assert result["summary"]["retransmissions"] > 0, result["summary"]


def test_run_report_draws_traffic_and_counters_from_stored_files(tmp_path):
    test_load_flows_joins_sender_retransmissions_and_counts_open_flows(tmp_path)
    test_counter_summary_and_plot_from_a_stored_series(tmp_path)
    for name in ("config.json", "result.json", "environment.json"):
        (tmp_path / name).write_text("{}")
    from analysis.report import write_report
    page = write_report(tmp_path).read_text()
    assert "<h2>Background traffic</h2>" in page and "<h2>Router interface counters</h2>" in page


@needs_root
def test_traffic_without_duration_stops_on_request_and_records_every_flow(testbed, tmp_path):
    import time
    from analysis import traffic
    from satbed.backends.traffic import Traffic
    from satbed.model.workload import TrafficSpec
    spec = TrafficSpec.from_dict({"server": "clientB", "client": "clientA", "long": 3, "upload_fraction": 0.5})
    with Traffic(spec, testbed.hosts, str(tmp_path)) as t:
        with pytest.raises(SatbedError, match="without a duration runs until stop"):
            t.wait()                    # no duration: nothing ends by itself
        time.sleep(2)
    assert "errors" not in t.result, t.result
    flows = traffic.load_flows(str(tmp_path))
    assert len(flows) == 3 and {f["status"] for f in flows} == {"stopped"}
    assert all(f["bytes"] > 0 and isinstance(f["retransmissions"], int) for f in flows), flows
    assert not any(p.proc.poll() is None for p in [*t.clients, *t.servers])
    procs = t.result["summary"]["processes"]
    assert procs["server-clientB-5301"]["by_status"] == {"stopped": 3}


def test_documented_traffic_example_is_valid():
    import re
    import yaml
    from satbed.model.workload import TrafficSpec
    text = open(os.path.join(REPO, "docs", "guide", "traffic.md"), encoding="utf-8").read()
    block = re.search(r"\n(    traffic:\n(?:    .*\n|\s*\n)+?)\n(?! )", text).group(1)
    doc = yaml.safe_load("\n".join(line[4:] for line in block.splitlines()))
    spec = TrafficSpec.from_dict(doc["traffic"])
    assert len(spec.groups) == 3 and spec.groups[2].rate == 2


@needs_root
def test_traffic_and_counters_on_the_docker_backend(tmp_path):
    """The same modules with containers as nodes: trafficgen runs from the
    repository's bin/ (mounted read-only), the sampler joins a container's
    network namespace by its pid."""
    from satbed.backends import counters, docker
    from satbed.model import topology
    from satbed.backends.testbed import Testbed
    from satbed.backends.traffic import Traffic
    from satbed.model.workload import TrafficSpec
    if docker.available() is not None:
        pytest.skip(docker.available())
    if not os.access(BIN, os.X_OK):
        pytest.skip("bin/trafficgen not built (make build)")
    for name in ("host", "emulator", "pep-none"):
        try:
            docker.current_tag(name)
        except Exception as e:      # images are shared: this test uses, never rebuilds, them
            pytest.skip(str(e))
    tb = Testbed(topology.load("globalhawk"), backend=docker.DockerBackend.for_run(str(tmp_path), "none"))
    try:
        tb.start()
        with counters.CounterSampler([tb.host("clientA").eth0], str(tmp_path)) as sampler:
            spec = TrafficSpec.from_dict({"duration": 3, "server": "clientB", "client": "clientA", "long": 2,
                                          "arrival": "constant", "concurrent": 2, "sizes": "100K"})
            with Traffic(spec, tb.hosts, str(tmp_path)) as t:
                t.wait()
        totals = sampler.stop()
    finally:
        tb.stop()
    assert "errors" not in t.result and t.result["summary"]["by_status"].get("completed", 0) > 0, t.result
    assert totals["ports"]["clientA.eth0"]["rx_bytes"] > 0 and "error" not in totals
    assert [c for c in docker.containers() if c.startswith(tb.prefix)] == []


@needs_root
def test_router_ports_of_a_routed_topology_count_drops_of_competing_traffic(tmp_path):
    """The spoofing study's network: competing uploads h3 -> h4 overload r1's
    Internet port (10 Mbit/s, here a 20-packet queue); the sampler, given
    every router port, sees that port drop and never hold more than 20."""
    import copy
    import yaml
    from satbed.backends import counters
    from satbed.model import topology
    from satbed.backends.testbed import running
    from satbed.backends.traffic import Traffic
    from satbed.model.workload import TrafficSpec
    if not os.access(BIN, os.X_OK):
        pytest.skip("bin/trafficgen not built (make build)")
    doc = copy.deepcopy(yaml.safe_load(open(topology.find("spoofing"))))
    doc["routers"]["r1"]["interfaces"]["wan"]["queue"] = 20
    spec = topology.parse(doc, source="test")
    with running(spec, bridge_kinds=("pep", "bridge", "emulator")) as tb:
        ports = counters.router_ports(tb)
        assert {f"{i.node.name}.{i.port}" for i in ports} == {"r1.e5", "r1.e3", "r1.wan", "r2.wan", "r2.e4",
                                                              "r2.sat"}
        with counters.CounterSampler(ports, str(tmp_path)) as sampler:
            traffic = TrafficSpec.from_dict({"duration": 6, "server": "h4", "client": "h3", "long": 12,
                                             "upload_fraction": 1})
            with Traffic(traffic, tb.hosts, str(tmp_path)) as t:
                t.wait()
        totals = sampler.stop()
    assert "errors" not in t.result, t.result
    wan = totals["ports"]["r1.wan"]
    assert wan["dropped"] > 0 and 0 < wan["backlog_packets_max"] <= 20, wan
    assert totals["ports"]["r2.wan"]["dropped"] == 0
    # The bottleneck ran near its 10 Mbit/s.
    assert wan["tx_bytes"] * 8 / wan["seconds"] > 5e6, wan


@needs_root
def test_traffic_refuses_a_directory_with_records(testbed, tmp_path):
    from satbed.core.errors import SatbedError
    from satbed.backends.traffic import Traffic
    from satbed.model.workload import TrafficSpec
    _write(tmp_path / "traffic" / "client-0-clientA.jsonl", [{"record": "summary"}])
    spec = TrafficSpec.from_dict({"server": "clientB", "client": "clientA", "long": 1})
    with pytest.raises(SatbedError, match="already holds traffic records"):
        Traffic(spec, testbed.hosts, str(tmp_path)).start()
    assert not any("trafficgen" in " ".join(map(str, p.args)) for h in testbed.hosts.values() for p in h.procs)
