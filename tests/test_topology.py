"""Topology files: parsing and the errors a user sees."""

from __future__ import annotations

import pytest
import yaml

from satbed.model import topology
from satbed.core.errors import SatbedError

from satbed_testlib import satbed


def test_globalhawk_is_the_five_host_chain(globalhawk):
    assert list(globalhawk.hosts) == ["clientA", "clientB"]
    assert str(globalhawk.hosts["clientA"].ip) == "10.99.99.2/24"
    assert str(globalhawk.hosts["clientB"].ip) == "10.99.99.254/24"
    assert [t.kind for t in globalhawk.transparent.values()] == ["pep", "emulator", "pep"]
    assert [(str(l.a), str(l.b)) for l in globalhawk.links] == [
        ("clientA.eth0", "pepA.lan"), ("pepA.wan", "emulator.a"),
        ("emulator.b", "pepB.wan"), ("pepB.lan", "clientB.eth0")]
    assert globalhawk.mtu == 1500
    # Addresses only a PEP that connects from its own address uses (PEPsal).
    assert [str(t.ip) for t in globalhawk.of_kind("pep")] == ["10.99.99.3/24", "10.99.99.253/24"]
    assert globalhawk.to_dict()["transparent"]["pepB"]["ip"] == "10.99.99.253/24"


BASE = yaml.safe_load(open(topology.find("globalhawk")))


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.pop("hosts"), "at least two hosts"),
    (lambda d: d["hosts"]["clientA"].update(ip="192.168.1.1/24"), "outside"),
    (lambda d: d["hosts"]["clientA"].update(ip="nope"), "bad ip"),
    (lambda d: d["transparent"]["pepA"].update(kind="router"), "kind must be"),
    (lambda d: d["transparent"]["pepA"].update(ports=["lan"]), "two distinct"),
    (lambda d: d["links"].pop(), "is not linked"),
    (lambda d: d["links"].append(["clientA.eth0", "pepB.lan"]), "linked twice"),
    (lambda d: d["links"].append(["ghost.eth0", "pepB.lan"]), "unknown node"),
    (lambda d: d.update(colour="blue"), "unknown key"),
    (lambda d: d.update(mtu=10), "mtu"),
    (lambda d: d["transparent"]["pepA"].update(ip="10.99.99.254/24"), "already"),
    (lambda d: d["transparent"]["pepA"].update(ip="10.1.1.3/24"), "not on its segment"),
    (lambda d: d["transparent"]["pepA"].update(ip="10.99.99.3"), "prefix length"),
    (lambda d: d["transparent"]["emulator"].update(ip="10.99.99.5/24"), "only a pep"),
])
def test_bad_topologies_are_refused_with_a_reason(mutate, message):
    import copy
    doc = copy.deepcopy(BASE)
    mutate(doc)
    with pytest.raises(SatbedError, match=message):
        topology.parse(doc)


def test_unknown_topology_names_the_known_ones():
    with pytest.raises(SatbedError, match=r"known: .*\bglobalhawk\b"):
        topology.find("nosuch")


def test_malformed_yaml_is_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("hosts: [unclosed\n")
    with pytest.raises(SatbedError, match="line 2 not valid YAML .topology."):
        topology.load(str(bad))


@pytest.mark.parametrize("args, message", [
    (["run", "--client", "pong"], "unknown client 'pong'"),
    (["run", "--pep", "nosuchpep"], "unknown PEP 'nosuchpep'"),
    (["run", "--rtt", "-5"], "--rtt: rtt must be within 0"),
    (["run", "--ber", "2"], "BER must be in [0, 1)"),
    (["run", "--topology", "nosuch"], "unknown topology"),
    (["run", "--size", "lots"], "bad size"),
    (["run", "--rate", "0"], "rate must be positive"),
])
def test_bad_input_gives_one_clear_line(args, message):
    cp = satbed(*args, "--out", "/tmp/satbed-test-never-written")
    assert cp.returncode == 2
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1, cp.stderr
    assert message in lines[0]
    assert "Traceback" not in cp.stderr


def test_not_root_is_one_clear_line(tmp_path):
    import os
    import subprocess
    from satbed_testlib import REPO
    # The user's own writable home, as a real user has (root's is not theirs: Matplotlib
    # would warn about its cache on stderr before satbed speaks).
    import tempfile
    home = tempfile.mkdtemp(prefix="satbed-nobody-")     # pytest's tmp_path is root's alone
    os.chmod(home, 0o777)
    cp = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                         "/usr/bin/python3", "-m", "satbed", "run", "--client", "ping", "--out", str(tmp_path)],
                        capture_output=True, text=True, cwd="/",
                        env={**os.environ, "PYTHONPATH": REPO, "HOME": home},
                        timeout=60)
    assert cp.returncode == 2
    assert cp.stderr.strip().splitlines() == [
        "satbed: error: satbed needs root (network namespaces, veth, tc): run it with sudo or as root"]
