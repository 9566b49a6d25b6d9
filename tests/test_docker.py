"""The Docker backend, the images, the PEP image contract and compose wiring
(tests/test_pep_programs.py has the PEPsal and SCPS adapters). Integration tests need root and a Docker daemon and
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

