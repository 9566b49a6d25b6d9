"""The Docker backend, the images, the PEP image contract, compose wiring and
the pepsal/scps adapters. Integration tests need root and a Docker daemon and
skip with the reason otherwise; images are built once (hash-tagged, so a
second build is a no-op) and reused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from satbed_testlib import REPO, needs_root, root_links, satbed
from satbed import docker

DOCKER_MISSING = docker.available()
needs_docker = pytest.mark.skipif(DOCKER_MISSING is not None, reason=DOCKER_MISSING or "")
IMAGES = ["host", "emulator", "pep-none", "pep-pepd"]
ADAPTERS = os.path.join(REPO, "pep", "adapters")


def satbed_containers() -> list[str]:
    return docker.containers()


@pytest.fixture(scope="module")
def images():
    """satbed's images, built from nothing where absent (minutes), else reused."""
    for b in ("satemu", "pepd", "saratoga"):
        if not os.access(os.path.join(REPO, "bin", b), os.X_OK):
            pytest.skip(f"bin/{b} missing: run `make build`")
    started = time.monotonic()
    built = docker.build_images(IMAGES, log=lambda line: None)
    return {"tags": built, "seconds": time.monotonic() - started}


@pytest.fixture
def no_leftovers():
    links_before = root_links()
    networks_before = set(docker.docker("network", "ls", "-q").stdout.split())
    yield
    assert satbed_containers() == []
    assert set(docker.docker("network", "ls", "-q").stdout.split()) == networks_before
    assert {ln for ln in root_links() - links_before if ln.startswith("sb")} == set()


# ------------------------------------------------------------ no root needed

def test_context_hash_covers_contents_modes_parent_and_args(tmp_path):
    (tmp_path / "a").write_text("one")
    base = docker.context_hash(str(tmp_path), "sha256:p", {})
    assert docker.context_hash(str(tmp_path), "sha256:p", {}) == base
    assert docker.context_hash(str(tmp_path), "sha256:q", {}) != base
    assert docker.context_hash(str(tmp_path), "sha256:p", {"PEPSAL_DEBS": "x"}) != base
    os.chmod(tmp_path / "a", 0o755)
    assert docker.context_hash(str(tmp_path), "sha256:p", {}) != base
    os.chmod(tmp_path / "a", 0o644)
    (tmp_path / "a").write_text("two")
    assert docker.context_hash(str(tmp_path), "sha256:p", {}) != base


def test_every_image_stages_from_the_repository(tmp_path):
    for s in docker.IMAGES:
        if s.requires and not all(os.path.exists(os.path.join(REPO, r)) for r in s.requires):
            continue
        if any(f.startswith("bin/") and not os.path.exists(os.path.join(REPO, f)) for f in s.files):
            continue
        dest = tmp_path / s.name
        docker.stage(s, str(dest))
        assert (dest / s.dockerfile).is_file()


def test_host_mirror_reads_deb822(tmp_path, monkeypatch):
    src = tmp_path / "debian.sources"
    src.write_text("Types: deb\nURIs: http://mirror.lab/debian\nSuites: bookworm bookworm-updates\n"
                   "Components: main\n\nTypes: deb\nURIs: http://mirror.lab/security\n"
                   "Suites: bookworm-security\nComponents: main\n")
    monkeypatch.setattr(docker, "DEBIAN_SOURCES", str(src))
    assert docker.host_mirror() == "http://mirror.lab/debian"
    assert docker.host_mirror(security=True) == "http://mirror.lab/security"


def _adapter(name: str, verb: str, tmp_path, **env) -> subprocess.CompletedProcess:
    full = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SATBED_PEP_LAN": "lan0", "SATBED_PEP_WAN": "wan0",
            "SATBED_PEP_BRIDGE": "br0", "SATBED_STATE_DIR": str(tmp_path), "SATBED_RATE_BPS": "8000000",
            "SATBED_RTT_MS": "600", "SATBED_BER": "1e-5", **env}
    return subprocess.run([os.path.join(ADAPTERS, name), verb], capture_output=True, text=True, env=full,
                          timeout=30)


def test_pepsal_without_binary_says_what_to_provide(tmp_path):
    cp = _adapter("pepsal", "start", tmp_path, SATBED_BIN_DIR=str(tmp_path))
    assert cp.returncode == 1
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1 and "pep/images/pepsal/pepsal" in lines[0] and "bin=" in lines[0]
    stats = json.loads(_adapter("pepsal", "stats", tmp_path).stdout)
    assert stats["name"] == "pepsal" and stats["running"] is False
    assert _adapter("pepsal", "stop", tmp_path).returncode == 0


@pytest.mark.parametrize("opts,error", [("bogus=1", "unknown option 'bogus'"),
                                        ("max_conns=5", "outside 128..25000"),
                                        ("nodelay=yes", "takes 0 or 1")])
def test_pepsal_rejects_bad_options(tmp_path, opts, error):
    fake = tmp_path / "pepsal"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    cp = _adapter("pepsal", "start", tmp_path, SATBED_PEP_OPTS=f"bin={fake} {opts}")
    assert cp.returncode == 1 and error in cp.stderr and len(cp.stderr.strip().splitlines()) == 1


def test_scps_rfile_from_the_link(tmp_path):
    cp = _adapter("scps", "rfile", tmp_path)
    assert cp.returncode == 0, cp.stderr
    rf = dict(line.split() for line in cp.stdout.splitlines() if line and not line.startswith("#"))
    assert rf["AIF_NAME"] == "lan0" and rf["BIF_NAME"] == "wan0"
    assert rf["BIF_RATE"] == "8000000"
    assert rf["BIF_BUF"] == str(2 * 8_000_000 // 8 * 600 // 1000)     # 2 x BDP = 1.2 MB
    assert rf["BIF_MINRTO"] == "600000"                               # RTT in microseconds
    assert rf["BIF_CC"] == "0" and rf["AIF_CC"] == "2" and rf["AIF_TCPONLY"] == "1"
    vegas = _adapter("scps", "rfile", tmp_path, SATBED_PEP_OPTS="cc=1", SATBED_RTT_MS="0")
    rf = dict(line.split() for line in vegas.stdout.splitlines() if line and not line.startswith("#"))
    assert rf["BIF_CC"] == "1" and rf["BIF_MINRTO"] == "200000" and rf["BIF_BUF"] == "65536"
    cp = _adapter("scps", "start", tmp_path, SATBED_BIN_DIR=str(tmp_path))
    assert cp.returncode == 1 and "pep/images/scps/gateway" in cp.stderr
    assert len(cp.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------ root and Docker

@needs_root
@needs_docker
def test_images_are_reused_when_current(images):
    """A build right after a build changes nothing: every image is current.
    (The fixture's build may have rebuilt what `make build` had changed.)"""
    logs: list[str] = []
    started = time.monotonic()
    again = docker.build_images(IMAGES, log=logs.append)
    took = time.monotonic() - started
    assert all(line.endswith(": current") for line in logs), logs
    assert took < 60, f"checking current images took {took:.0f} s"
    for name in IMAGES:
        labels = docker.image_labels(f"satbed/{name}:latest")
        assert labels.get("org.satbed.hash") == again[name].rsplit(":", 1)[1]


def _result(stdout: str) -> tuple[str, dict]:
    lines = stdout.strip().splitlines()
    return lines[0], json.loads(lines[-1])


@needs_root
@needs_docker
def test_scp_moves_a_file_intact_on_containers(images, tmp_path, no_leftovers):
    cp = satbed("run", "--backend", "docker", "--pep", "pepd", "--client", "scp", "--size", "2M",
                "--no-analysis", "--out", str(tmp_path), timeout=600)
    assert cp.returncode == 0, cp.stderr
    run_dir, summary = _result(cp.stdout)
    assert summary["integrity"] == "ok" and summary["bytes"] == 2 << 20
    with open(os.path.join(run_dir, "environment.json"), encoding="utf-8") as f:
        tb = json.load(f)["testbed"]
    assert tb["backend"] == "docker"
    assert tb["nodes"]["pepA"]["image"] == "satbed/pep-pepd:latest"
    assert all(v["id"].startswith("sha256:") for v in tb["images"].values())
    with open(os.path.join(run_dir, "result.json"), encoding="utf-8") as f:
        result = json.load(f)
    assert result["pep"]["connections_split"] >= 1
    caps = os.listdir(os.path.join(run_dir, "captures"))
    assert "lan_a.pcap" in caps and any(c.startswith("wan") for c in caps), caps
    assert all(os.path.getsize(os.path.join(run_dir, "captures", c)) > 24 for c in caps)


@needs_root
@needs_docker
@pytest.mark.parametrize("client", ["scp", "ftp"])
def test_a_relative_out_works_on_containers(images, client, tmp_path, no_leftovers):
    # The tools inside the containers see the run directory by its absolute path.
    cp = subprocess.run(["/usr/bin/python3", "-m", "satbed", "run", "--backend", "docker", "--client", client,
                         "--size", "1M", "--no-analysis", "--out", "runs"], cwd=tmp_path, capture_output=True,
                        text=True, timeout=600, env={**os.environ, "PYTHONPATH": REPO})
    assert cp.returncode == 0, cp.stderr
    run_dir, summary = _result(cp.stdout)
    assert run_dir.startswith(str(tmp_path / "runs") + os.sep) and summary["integrity"] == "ok"


def _goodput(backend: str, out: str) -> float:
    cp = satbed("run", "--backend", backend, "--pep", "pepd", "--client", "nuttcp-tcp", "--rtt", "100",
                "--size", "8M", "--no-analysis", "--out", out, timeout=600)
    assert cp.returncode == 0, cp.stderr
    return _result(cp.stdout)[1]["goodput_bps"]


@needs_root
@needs_docker
def test_goodput_matches_the_namespace_backend(images, tmp_path, no_leftovers):
    """The smoke comparison: one cell, both backends, within 5%. A busy
    machine moves single runs by a few percent, so a miss is retried once and
    the means of the two rounds are compared."""
    docker_bps, netns_bps = [_goodput("docker", str(tmp_path))], [_goodput("mininet", str(tmp_path))]
    if abs(docker_bps[0] - netns_bps[0]) > 0.05 * netns_bps[0]:
        netns_bps.append(_goodput("mininet", str(tmp_path)))
        docker_bps.append(_goodput("docker", str(tmp_path)))
    d, n = sum(docker_bps) / len(docker_bps), sum(netns_bps) / len(netns_bps)
    print(f"goodput docker {d / 1e6:.3f} Mbit/s, namespaces {n / 1e6:.3f} Mbit/s ({100 * (d - n) / n:+.1f}%)")
    assert abs(d - n) <= 0.05 * n, (docker_bps, netns_bps)


@needs_root
@needs_docker
@pytest.mark.parametrize("image", ["satbed/pep-none:latest", "satbed/pep-pepd:latest"])
def test_pep_check_passes(images, image, no_leftovers):
    cp = satbed("pep-check", image, timeout=300)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert cp.stdout.strip().splitlines()[-1] == f"PASS {image}"
    split = [ln for ln in cp.stdout.splitlines() if "splitting" in ln][0]
    assert ("end to end" in split) == image.startswith("satbed/pep-none")


@needs_root
@needs_docker
def test_missing_pep_image_fails_in_one_line(images, tmp_path, no_leftovers):
    if docker.image_id("satbed/pep-pepsal:latest"):
        pytest.skip("this machine has a pepsal image")
    cp = satbed("run", "--backend", "docker", "--pep", "pepsal", "--client", "ping", "--no-analysis",
                "--out", str(tmp_path), timeout=300)
    assert cp.returncode == 2
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1 and "pep/images/pepsal/pepsal" in lines[0], cp.stderr


@needs_root
@needs_docker
def test_clean_removes_the_containers_of_a_killed_run(images, tmp_path, no_leftovers):
    env = {**os.environ, "PYTHONPATH": REPO}
    proc = subprocess.Popen(["/usr/bin/python3", "-m", "satbed", "run", "--backend", "docker", "--client",
                             "ping", "--no-analysis", "--out", str(tmp_path)], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while len(satbed_containers()) < 3 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert satbed_containers(), "no container started"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    cp = satbed("clean", timeout=300)
    assert cp.returncode == 0, cp.stderr


@needs_root
@needs_docker
def test_compose_testbed_wires_and_carries_traffic(images, no_leftovers):
    project = "sbt" + os.urandom(2).hex()
    env = {**os.environ, "COMPOSE_PROJECT_NAME": project, "PEP_IMAGE": "satbed/pep-pepd:latest",
           "RTT_MS": "100"}

    def compose(*args, timeout=300):
        return subprocess.run(["docker-compose", "-f", os.path.join(REPO, "docker-compose.yml"), *args],
                              capture_output=True, text=True, env=env, timeout=timeout, cwd=REPO)
    try:
        up = compose("up", "-d")
        assert up.returncode == 0, up.stderr
        wire = subprocess.run([os.path.join(REPO, "docker", "wire.sh")], capture_output=True, text=True,
                              env=env, timeout=300)
        assert wire.returncode == 0, wire.stderr
        client = f"{project}_clientA_1"
        ping = docker.docker("exec", client, "ping", "-c", "3", "-i", "0.3", "10.99.99.254", check=False)
        assert ping.returncode == 0, ping.stdout
        rtt = float(ping.stdout.strip().splitlines()[-1].split("=")[1].split("/")[1])
        assert 95 <= rtt <= 150, ping.stdout            # the emulator's 100 ms
        stats = json.loads(docker.docker("exec", f"{project}_pepA_1", "satbed-pep", "stats").stdout)
        assert stats["name"] == "pepd"
    finally:
        down = compose("down", "-t", "20")
    assert down.returncode == 0, down.stderr
    left = docker.docker("ps", "-a", "-q", "--filter", f"label=com.docker.compose.project={project}").stdout
    assert left.strip() == ""
    assert docker.docker("network", "ls", "-q", "--filter", f"name={project}").stdout.strip() == ""


# A stand-in with PEPsal's command line and mechanism (a transparent TPROXY
# listener that connects upstream from the client's address), so the adapter
# and its interception are tested without the real binary.
FAKE_PEPSAL = r'''#!/usr/bin/python3
import getopt, socket, sys, threading
opts = dict(getopt.getopt(sys.argv[1:], "p:c:T:C:m:fnqkl:dv")[0])
with open(sys.argv[0] + ".args", "w") as f:
    f.write(" ".join(sys.argv[1:]))
IP_TRANSPARENT = 19
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.setsockopt(socket.SOL_IP, IP_TRANSPARENT, 1)
ls.bind(("0.0.0.0", int(opts.get("-p", 5000))))
ls.listen(128)

def pipe(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
        b.shutdown(socket.SHUT_WR)
    except OSError:
        pass

def handle(c, peer):
    u = socket.socket()
    u.setsockopt(socket.SOL_IP, IP_TRANSPARENT, 1)
    u.bind((peer[0], 0))
    u.connect(c.getsockname())
    threading.Thread(target=pipe, args=(u, c), daemon=True).start()
    pipe(c, u)

while True:
    c, peer = ls.accept()
    threading.Thread(target=handle, args=(c, peer), daemon=True).start()
'''


@needs_root
def test_pepsal_adapter_splits_with_a_stand_in(tmp_path):
    fake = tmp_path / "pepsal"
    fake.write_text(FAKE_PEPSAL)
    fake.chmod(0o755)
    cp = satbed("run", "--pep", "pepsal", "--pep-options", f"bin={fake} port=5300 max_conns=256 nodelay=1",
                "--client", "nuttcp-tcp", "--size", "2M", "--rtt", "100", "--no-analysis",
                "--out", str(tmp_path / "runs"), timeout=600)
    assert cp.returncode == 0, cp.stderr
    run_dir, summary = _result(cp.stdout)
    assert summary["integrity"] == "ok"
    assert (tmp_path / "pepsal.args").read_text() == "-p 5300 -c 256 -n"
    with open(os.path.join(run_dir, "result.json"), encoding="utf-8") as f:
        pep = json.load(f)["pep"]
    # A SYN is diverted only at the PEP on the side that opened the
    # connection (PEPsal splits what its own end host opens); the other PEP
    # passes the upstream connection through.
    split = {n: v["connections_split"] for n, v in pep["nodes"].items()}
    assert sorted(split.values())[0] == 0 and sorted(split.values())[1] >= 1, split
    assert all(v["running"] is True and v["name"] == "pepsal" for v in pep["nodes"].values())


@needs_root
def test_scps_adapter_writes_the_rfile_and_runs_the_gateway(tmp_path):
    # A stand-in gateway: records how it was started, then idles; keep_bridge=1
    # leaves the kernel bridge to carry the ping since it forwards nothing.
    fake = tmp_path / "gateway"
    fake.write_text(f'#!/bin/sh\necho "$PWD $*" >{tmp_path}/gateway.args\nexec sleep 600\n')
    fake.chmod(0o755)
    cp = satbed("run", "--pep", "scps", "--pep-options", f"bin={fake} keep_bridge=1 cc=1", "--client", "ping",
                "--rtt", "100", "--no-analysis", "--out", str(tmp_path / "runs"), timeout=300)
    assert cp.returncode == 0, cp.stderr
    run_dir, summary = _result(cp.stdout)
    assert summary["loss"] == 0
    state = os.path.join(run_dir, "pep", "pepA")
    assert (tmp_path / "gateway.args").read_text().split()[1:] == ["-f", "rfile"]
    with open(os.path.join(state, "rfile"), encoding="utf-8") as f:
        rf = dict(line.split() for line in f if line.strip() and not line.startswith("#"))
    assert rf["BIF_CC"] == "1" and rf["BIF_MINRTO"] == "200000" and rf["BIF_RATE"] == "8000000"
    assert rf["BIF_BUF"] == str(max(65536, 2 * 8_000_000 // 8 * 100 // 1000))
    with open(os.path.join(run_dir, "result.json"), encoding="utf-8") as f:
        nodes = json.load(f)["pep"]["nodes"]
    assert all(v["name"] == "scps" and v["running"] is True for v in nodes.values())
