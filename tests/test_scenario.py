"""Scenario files: parsing, one-line errors, the Global Hawk matrix as a
scenario, and the routed scenario end to end (both backends)."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from satbed.execution import matrix

from satbed.model import scenario
from satbed.core.errors import SatbedError
from satbed.core.proc import BIN_DIR, REPO_ROOT

from satbed_testlib import needs_root, satbed

SHIPPED = sorted(f[:-5] for f in os.listdir(scenario.SCENARIO_DIR) if f.endswith(".yaml"))


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_scenarios_load_and_expand(name):
    exp = matrix.load(scenario.find(name))
    assert exp.cells


def comparable(cell) -> dict:
    return {k: v for k, v in cell.config.items() if k not in ("scenario", "endpoints")}


@pytest.mark.parametrize("scen, experiment", [("globalhawk", "globalhawk"), ("globalhawk-quick", "quick")])
def test_global_hawk_scenarios_are_the_experiment_files_cells(scen, experiment):
    new = matrix.load(scenario.find(scen))
    old = matrix.load(os.path.join(REPO_ROOT, "experiments", experiment + ".yaml"))
    # The scenario's `today` hosts are the experiment file's (globalhawk adds the study's hosts beside).
    today = [c for c in new.cells if c.params["variant"] in ("", "today")]
    assert len(today) == len(old.cells)
    assert [comparable(c) for c in today] == [comparable(c) for c in old.cells]
    assert all(c.config["endpoints"] == ["clientA", "clientB"] for c in new.cells)
    assert new.reference == old.reference == {"client": "saratoga"}


def test_named_links_hold_their_own_settings_per_direction():
    link = scenario.link_config({"rate": "10mbit", "delay": 25, "queue": 40, "b_to_a": {"ber": 1e-6}},
                                "links.inet", seed=3)
    assert link.a_to_b.rate_bps == link.a_to_b.ceil_bps == 10_000_000
    assert link.a_to_b.delay_ms == link.b_to_a.delay_ms == 25
    assert link.a_to_b.queue_packets == 40
    assert (link.a_to_b.ber, link.b_to_a.ber) == (0, 1e-6)
    assert link.seed == 3


def write(tmp_path, doc) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


BASE = {"topology": "spoofing", "workload": {"main": {"client": "ping", "between": ["h1", "h5"]}}}


@pytest.mark.parametrize("change, message", [
    ({"colour": "blue"}, "unknown key"),
    ({"links": {"inet": {"rate": "fast"}}}, "links.inet: bad rate"),
    ({"links": {"inet": {"delay": 1, "rtt": 2}}}, "rtt: or delay:"),
    ({"link": {"delay": 5}}, "per-emulator settings go under links"),
    ({"profiles": {"h1": "nosuch"}}, "unknown TCP profile"),
    ({"peps": {"h2": {"name": "nosuch"}}}, "unknown PEP"),
    ({"workload": {"main": {"between": ["h1"]}}}, "between"),
    ({"workload": {"main": {"client": "ftp", "rcvbuf": "32K"}}}, "workload.main.rcvbuf"),
    ({"workload": {"main": {"client": "ping"}, "traffic": {"server": "h3"}}}, "workload.traffic"),
])
def test_bad_scenarios_are_one_line(tmp_path, change, message):
    path = write(tmp_path, {**BASE, **change})
    with pytest.raises(SatbedError, match=message) as err:
        matrix.load(path)
    assert "\n" not in str(err.value)


@needs_root
def test_unknown_hosts_are_refused_before_any_testbed(tmp_path):
    path = write(tmp_path, {**BASE, "workload": {"main": {"client": "ping", "between": ["h1", "ghost"]}}})
    cp = satbed("run", "--scenario", path, "--out", str(tmp_path / "runs"), timeout=120)
    assert cp.returncode == 2
    assert cp.stderr.strip().count("\n") == 0 and "no host 'ghost'" in cp.stderr


@pytest.fixture
def bins() -> None:
    """Decided when the test runs, not when the module is imported: `make test`
    builds bin/ before pytest starts, and a collection must not outlive a build."""
    missing = [b for b in ("satemu", "pepd", "trafficgen") if not os.path.exists(os.path.join(BIN_DIR, b))]
    if missing:
        pytest.skip(f"bin/{', bin/'.join(missing)} missing: make build first")


@needs_root
def test_spoofing_scenario_runs_with_traffic_counters_and_a_one_sided_spoofer(bins, tmp_path):
    cp = satbed("run", "--scenario", "spoofing", "--size", "100K", "--no-analysis", "--out", str(tmp_path),
                timeout=600)
    assert cp.returncode == 0, cp.stderr
    run_dir = cp.stdout.splitlines()[0]
    with open(os.path.join(run_dir, "result.json")) as f:
        result = json.load(f)
    assert result["integrity"] == "ok"
    assert result["pep"]["nodes"]["h2"]["pep"] == "pepd" and result["pep"]["connections_split"] >= 1
    assert set(result["emulators"]) == {"inet", "sat"}
    assert result["traffic"]["summary"]["flows"] >= 10
    assert result["counters"]["ports"]["r1.wan"]["sent_packets"] > 0
    with open(os.path.join(run_dir, "config.json")) as f:
        config = json.load(f)
    assert config["plan"]["a"] == "h1" and config["plan"]["b"] == "h5"
    assert config["plan"]["primary_emulator"] == "sat"
    with open(os.path.join(run_dir, "environment.json")) as f:
        env = json.load(f)
    assert env["tcp_profiles"]["h1"]["net.ipv4.tcp_congestion_control"] == "reno"


def _docker_missing() -> str | None:
    from satbed.backends import docker
    why = docker.available()
    if why is None and not all(docker.image_id(f"satbed/{i}:latest") for i in ("base", "host", "emulator",
                                                                               "pep-pepd")):
        why = "satbed images not built (make images)"
    return why


@needs_root
def test_routed_scenario_on_containers(bins, tmp_path):
    if (why := _docker_missing()) is not None:
        pytest.skip(why)
    cp = satbed("run", "--scenario", "spoofing", "--size", "100K", "--no-analysis", "--backend", "docker",
                "--out", str(tmp_path), timeout=900)
    assert cp.returncode == 0, cp.stderr
    with open(os.path.join(cp.stdout.splitlines()[0], "result.json")) as f:
        result = json.load(f)
    assert result["integrity"] == "ok" and result["pep"]["connections_split"] >= 1
    with open(os.path.join(cp.stdout.splitlines()[0], "environment.json")) as f:
        env = json.load(f)
    assert env["testbed"]["backend"] == "docker"
    assert {"r1", "r2", "h2", "sat", "inet"} <= set(env["testbed"]["nodes"])


def test_sweeps_reach_into_links_traffic_and_the_topology(tmp_path):
    doc = yaml.safe_load(open(scenario.find("spoofing")))
    doc["matrix"] = {"repetitions": 1, "axes": {
        "links.inet.queue": [20, 80],
        "workload.traffic.groups.0.concurrent": [1, 50],
        "topology.routers.r1.interfaces.wan.queue": [10, 100]}}
    exp = matrix.load(write(tmp_path, doc))
    assert len(exp.cells) == 8
    cfgs = [c.config for c in exp.cells]
    assert {c["links"]["inet"]["a_to_b"]["queue_packets"] for c in cfgs} == {20, 80}
    assert {c["traffic"]["groups"][0]["concurrent"] for c in cfgs} == {1, 50}
    assert {c["topology_overrides"]["routers.r1.interfaces.wan.queue"] for c in cfgs} == {10, 100}
    assert len({c.hash for c in exp.cells}) == 8
    assert "links.inet.queue=20" in exp.cells[0].label()


@pytest.mark.parametrize("axis, message", [
    ("colour.x", "dotted path into the scenario"),
    ("topology.routers.r1.interfaces.wan.queue", "queue must hold at least one packet"),
])
def test_bad_sweep_paths_are_one_line(tmp_path, axis, message):
    doc = {**BASE, "matrix": {"axes": {axis: [0]}}}
    with pytest.raises(SatbedError, match=message):
        matrix.load(write(tmp_path, doc))


def test_a_link_profile_is_the_file_beside_the_scenario_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exp = matrix.load(scenario.find("multiflow-ber"))
    profile = exp.cells[0].config["links"]["sat"]["a_to_b"]["profile"]
    assert profile == os.path.join(scenario.SCENARIO_DIR, "multiflow-ber.csv")
    assert os.path.isfile(profile)
