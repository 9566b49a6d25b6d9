"""The Docker backend, the images, the PEP image contract and compose wiring
(tests/test_pep_programs.py has the PEPsal and SCPS adapters). Integration tests need root and a Docker daemon and
skip with the reason otherwise; images are built once (hash-tagged, so a
second build is a no-op) and reused."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time

import pytest

from satbed_testlib import REPO, images_lock, needs_root, satbed
from satbed.backends import docker, records
from satbed.core.errors import SatbedError
from satbed.core.proc import cli_reason

DOCKER_MISSING = docker.available()
needs_docker = pytest.mark.skipif(DOCKER_MISSING is not None, reason=DOCKER_MISSING or "")
IMAGES = ["host", "emulator", "pep-none", "pep-pepd"]


def satbed_containers() -> list[str]:
    return docker.containers()


@pytest.fixture(scope="module")
def images():
    """satbed's images, built from nothing where absent (minutes), else reused."""
    for b in ("satemu", "pepd", "saratoga", "satquic"):
        if not os.access(os.path.join(REPO, "bin", b), os.X_OK):
            pytest.skip(f"bin/{b} missing: run `make build`")
    started = time.monotonic()
    with images_lock():
        built = docker.build_images(IMAGES, log=lambda line: None)
    return {"tags": built, "seconds": time.monotonic() - started}


FIXTURE_IMAGE = "satbed-fixture/splitpep:latest"


@pytest.fixture(scope="module")
def fixture_image(images):
    """A PEP image that is not ours (tests/fixtures/pep-splitpy), built once;
    Docker's layer cache makes a rebuild a no-op."""
    with images_lock():
        docker.docker("build", "-q", "-t", FIXTURE_IMAGE, os.path.join(REPO, "tests", "fixtures", "pep-splitpy"),
                      timeout=900, env={**os.environ, "DOCKER_BUILDKIT": "0"})
    return FIXTURE_IMAGE


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


def test_the_host_image_carries_our_transfer_programs(tmp_path):
    """The end-host image takes saratoga and satquic from bin/ (the staged
    context holds them, so the Dockerfile's COPY finds them)."""
    host = docker.spec("host")
    assert {"bin/saratoga", "bin/satquic"} <= set(host.files)
    with open(os.path.join(REPO, host.dockerfile), encoding="utf-8") as f:
        copies = [line.split()[1:] for line in f if line.startswith("COPY ")]
    assert ["bin/saratoga", "/opt/satbed/bin/saratoga"] in copies and ["bin/satquic", "/opt/satbed/bin/satquic"] in copies


def test_host_mirror_reads_deb822(tmp_path, monkeypatch):
    src = tmp_path / "debian.sources"
    src.write_text("Types: deb\nURIs: http://mirror.lab/debian\nSuites: bookworm bookworm-updates\n"
                   "Components: main\n\nTypes: deb\nURIs: http://mirror.lab/security\n"
                   "Suites: bookworm-security\nComponents: main\n")
    monkeypatch.setattr(docker, "DEBIAN_SOURCES", str(src))
    assert docker.host_mirror() == "http://mirror.lab/debian"
    assert docker.host_mirror(security=True) == "http://mirror.lab/security"


def test_pep_check_stats_rules():
    from satbed.execution.pepcheck import stats_problems
    good = {"name": "x", "connections_split": 1, "connections_active": 0, "bytes_lan_to_wan": 5,
            "bytes_wan_to_lan": 0, "splitting": True, "extra": "kept"}
    assert stats_problems(good, "x", True) == []
    for broken, problem in [({"name": "x"}, "no connections_split"),
                            ({**good, "connections_split": True}, "connections_split is bool"),
                            ({**good, "bytes_lan_to_wan": "5"}, "bytes_lan_to_wan is str"),
                            ({**good, "connections_active": -1}, "connections_active is negative"),
                            ({**good, "splitting": 1}, "splitting is int"),
                            ({**good, "name": "y"}, "not the label's"),
                            ({**good, "splitting": False}, "the label says true"),
                            ([good], "not a JSON object")]:
        assert any(problem in p for p in stats_problems(broken, "x", True)), (broken, problem)


def test_pep_check_label_rules():
    from satbed.execution.pepcheck import label_problems
    assert label_problems({"org.satbed.contract": "1", "org.satbed.pep.name": "x",
                           "org.satbed.pep.splits": "false"}) == []
    assert len(label_problems({"org.satbed.contract": "1"})) == 2
    assert len(label_problems({})) == 3
    limited = {"org.satbed.contract": "1", "org.satbed.pep.name": "x", "org.satbed.pep.splits": "true"}
    assert label_problems({**limited, "org.satbed.pep.limits": "no-half-close"}) == []
    assert "names slow" in label_problems({**limited, "org.satbed.pep.limits": "no-half-close, slow"})[0]


@pytest.mark.parametrize("reply,limits,ok,said", [
    ("5 ab", [], True, "still got the server's answer"),
    ("", [], False, "got no answer"),
    # A declared limitation is verified, not taken on trust.
    ("", ["no-half-close"], True, "not relayed, as declared"),
    ("5 ab", ["no-half-close"], False, "declares no-half-close but relayed"),
])
def test_pep_check_half_close(reply, limits, ok, said):
    from satbed.execution.pepcheck import Report, half_close_check
    name, passed, detail = half_close_check({"reply": reply, "end": "eof", "sent": "5 ab"},
                                            "it sent its answer", limits)
    assert name == "half-close" and passed is ok and said in detail, detail
    report = Report("lab/pep:1", limits)
    report.add(name, passed, detail)
    assert report.lines()[-1] == ("PASS lab/pep:1" if ok else "FAIL lab/pep:1") + (
        " (declared limits, verified: no-half-close)" if limits else "")


def test_pep_names_and_images():
    from satbed.model import peps
    assert peps.is_image("lab/pep:1") and peps.is_image("pep@sha256:ab") and not peps.is_image("pepd")
    assert peps.check("lab/pep:1") == "lab/pep:1"
    assert peps.slug("satbed/pep-pepd:latest") == "satbed_pep-pepd_latest"
    peps.check_backend("lab/pep:1", "docker")
    with pytest.raises(SatbedError, match="needs --backend docker"):
        peps.check_backend("lab/pep:1", "mininet")
    with pytest.raises(SatbedError, match="unknown PEP 'nosuch'"):
        peps.check("nosuch")


def test_container_nodes_get_namespaced_sysctls_only():
    pep = docker.node_sysctls("pep")
    assert pep["net.ipv4.ip_forward"] == "1" and pep["net.ipv4.conf.all.send_redirects"] == "0"
    assert all(k.startswith("net.") for k in pep)          # namespaced keys only
    assert "net.ipv4.ip_forward" not in docker.node_sysctls("host")


@pytest.mark.parametrize("text,want", [("10:1", {"period_s": 10.0, "down_s": 1.0, "offset_s": 0.0}),
                                       ("60:5:2.5", {"period_s": 60.0, "down_s": 5.0, "offset_s": 2.5}),
                                       ("off", None)])
def test_compose_outage_option(text, want):
    from satbed.commands.compose import _outage
    assert _outage(text) == want


@pytest.mark.parametrize("text", ["10", "1:10", "x:1", "0:0", "10:-1", "1:2:3:4"])
def test_compose_outage_option_rejects(text):
    from satbed.commands.compose import _outage
    with pytest.raises(SatbedError, match="PERIOD_S:DOWN_S"):
        _outage(text)


def test_compose_link_parameters():
    import argparse
    from satbed.commands.compose import _link_params
    ns = argparse.Namespace(rate="4mbit", ceil=None, rtt="300", ber="1e-6", queue=50, outage=None)
    assert _link_params(ns) == {"rate_bps": 4_000_000, "ceil_bps": 4_000_000, "delay_ms": 150.0,
                                "ber": 1e-6, "queue_packets": 50}


# ------------------------------------------------------------ root and Docker

@needs_root
@needs_docker
def test_images_are_reused_when_current(images):
    """A build right after a build changes nothing: every image is current.
    (The fixture's build may have rebuilt what `make build` had changed.)"""
    logs: list[str] = []
    with images_lock():
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
        env = json.load(f)
    tb = env["testbed"]
    assert tb["backend"] == "docker"
    assert tb["nodes"]["pepA"]["image"] == "satbed/pep-pepd:latest"
    assert all(v["id"].startswith("sha256:") for v in tb["images"].values())
    assert env["tcp_congestion_control"] == {n: "cubic" for n in ("clientA", "clientB", "pepA", "pepB")}
    with open(os.path.join(run_dir, "result.json"), encoding="utf-8") as f:
        result = json.load(f)
    assert result["pep"]["connections_split"] >= 1
    caps = os.listdir(os.path.join(run_dir, "captures"))
    assert "lan_a.pcap" in caps and any(c.startswith("wan") for c in caps), caps
    assert all(os.path.getsize(os.path.join(run_dir, "captures", c)) > 24 for c in caps)


@needs_root
@needs_docker
def test_quic_moves_a_file_intact_on_containers(images, tmp_path, no_leftovers):
    """The quic client on containers as on namespaces: the file checked by
    SHA-256, both ends' qlogs and the client's TLS key log in the run
    directory, pepd passing the UDP untouched. The end-host image carries
    this build's satquic."""
    image = docker.docker("run", "--rm", "--network", "none", "--entrypoint", "sha256sum", "satbed/host:latest",
                          "/opt/satbed/bin/satquic", check=False, timeout=120)
    assert image.returncode == 0, image.stderr
    with open(os.path.join(REPO, "bin", "satquic"), "rb") as f:
        assert image.stdout.split()[0] == hashlib.file_digest(f, "sha256").hexdigest()
    cp = satbed("run", "--backend", "docker", "--pep", "pepd", "--client", "quic", "--size", "2M", "--rtt", "100",
                "--captures", "none", "--no-analysis", "--out", str(tmp_path), timeout=600)
    assert cp.returncode == 0, cp.stderr
    run_dir, summary = _result(cp.stdout)
    with open(os.path.join(run_dir, "result.json"), encoding="utf-8") as f:
        r = json.load(f)
    assert summary["integrity"] == "ok" and r["bytes"] == 2 << 20 and r["sha256"] == r["sha256_expected"]
    with open(os.path.join(run_dir, "environment.json"), encoding="utf-8") as f:
        tb = json.load(f)["testbed"]
    assert tb["backend"] == "docker" and tb["nodes"]["clientA"]["image"] == "satbed/host:latest"
    assert r["congestion_control"] == "newreno" and 95 < r["handshake_ms"] < 400, r
    assert set(r["qlog"]) == {"client", "server"}
    for s in r["qlog"].values():
        assert s["file"].startswith("qlog/") and s["malformed"] == 0, s
        assert os.path.getsize(os.path.join(run_dir, s["file"])) > 0
    with open(os.path.join(run_dir, r["keylog"]), encoding="utf-8") as f:
        assert "CLIENT_TRAFFIC_SECRET_0 " in f.read()
    for node in r["pep"]["nodes"].values():
        assert node["bytes_lan_to_wan"] == 0 and node["bytes_wan_to_lan"] == 0, node


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
@pytest.mark.parametrize("image", ["satbed/pep-none:latest", "satbed/pep-pepd:latest", FIXTURE_IMAGE])
def test_pep_check_passes(images, fixture_image, image, no_leftovers):
    cp = satbed("pep-check", image, timeout=300)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert cp.stdout.strip().splitlines()[-1] == f"PASS {image}"
    split = [ln for ln in cp.stdout.splitlines() if "splitting" in ln][0]
    assert ("end to end" in split) == image.startswith("satbed/pep-none")


@pytest.mark.parametrize("stderr, reason", [
    # Docker 20.10's CLI
    ("Unable to find image 'x:0' locally\ndocker: Error response from daemon: No such image: x:0.\n"
     "See 'docker run --help'.\n", "docker: Error response from daemon: No such image: x:0."),
    # newer CLIs
    ("docker: Error response from daemon: Conflict. The container name \"/sb1-a\" is already in use.\n\n"
     "Run 'docker run --help' for more information\n",
     'docker: Error response from daemon: Conflict. The container name "/sb1-a" is already in use.'),
    ("Error: No such container: sb1-a\n", "Error: No such container: sb1-a"),
    ("", ""),
])
def test_a_docker_failure_says_the_clis_reason_not_its_help_pointer(stderr, reason):
    assert cli_reason(stderr) == reason


@needs_root
@needs_docker
def test_a_failed_docker_run_says_why():
    with pytest.raises(SatbedError) as e:
        docker.docker("run", "-d", "--pull", "never", "satbed-test/no-such-image:0", "true", timeout=60)
    assert "No such image" in str(e.value) and "--help" not in str(e.value), str(e.value)


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
        # Only this run's containers (labelled with its pid): others' runs on the
        # machine neither satisfy nor spoil the wait.
        deadline = time.monotonic() + 120
        while len(ours := _containers_of(proc.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert len(ours) >= 3, f"the run started {ours}"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    cp = satbed("clean", timeout=300)
    assert cp.returncode == 0, cp.stderr
    assert _containers_of(proc.pid) == [], cp.stdout


def _containers_of(pid: int) -> list[str]:
    cp = docker.docker("ps", "-a", "--filter", f"label={docker.LABEL}.owner={pid}", "--format", "{{.Names}}",
                       check=False, timeout=30)
    return cp.stdout.split()


def _compose(project: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return satbed("compose", "--project", project, *args, timeout=timeout)


@needs_root
@needs_docker
def test_compose_swaps_peps_on_a_standing_testbed(images, fixture_image, no_leftovers):
    """The lab's sequence: up with pepd; swap to none, to a lab's own image,
    back to pepd, each followed by a transfer compared by SHA-256 and the
    split counts that PEP must show; the link changed live; nothing left."""
    project = "sbt" + os.urandom(2).hex()

    def settled(cp: subprocess.CompletedProcess) -> dict:
        assert cp.returncode == 0, cp.stderr
        res = json.loads(cp.stdout)
        assert res["path"]["tcp_intact"] and all(res["links"].values()), res
        return res

    try:
        res = settled(_compose(project, "up", "--pep", "pepd", "--rtt", "100", "--json"))
        assert res["nodes"]["pepA"]["image"] == "satbed/pep-pepd:latest"
        assert res["path"]["split"] == {"pepA": 1, "pepB": 1}        # the WAN leg is pepA <-> pepB
        assert 99 <= res["path"]["rtt_ms"] <= 150, res["path"]
        emulator = docker.docker("ps", "-q", "--filter", f"name={project}_emulator_1").stdout.strip()
        hosts = docker.docker("ps", "-q", "--filter", f"name={project}_client").stdout.split()
        for image, split in (("satbed/pep-none:latest", {"pepA": 0, "pepB": 0}),
                             (fixture_image, {"pepA": 1, "pepB": 0}),   # it splits what its LAN opens
                             ("pepd", {"pepA": 1, "pepB": 1})):
            res = settled(_compose(project, "swap", image, "--json"))
            assert res["path"]["split"] == split, (image, res["path"])
            assert {res["nodes"][n]["image"] for n in ("pepA", "pepB")} == {docker.pep_image(image)}
        # The end hosts and the emulator were never recreated.
        assert docker.docker("ps", "-q", "--filter", f"name={project}_emulator_1").stdout.strip() == emulator
        assert docker.docker("ps", "-q", "--filter", f"name={project}_client").stdout.split() == hosts
        # One side only; leaving --pep off a later up keeps what runs.
        settled(_compose(project, "swap", "none", "--side", "b", "--json"))
        res = settled(_compose(project, "up", "--json"))
        assert [res["nodes"][n]["image"] for n in ("pepA", "pepB")] == ["satbed/pep-pepd:latest",
                                                                         "satbed/pep-none:latest"]
        assert res["rewired"] == []                  # idempotent: nothing recreated, nothing rewired
        cp = _compose(project, "link", "--rtt", "200")
        assert cp.returncode == 0 and "RTT 200 ms" in cp.stdout, cp.stderr
        ping = docker.docker("exec", f"{project}_clientA_1", "ping", "-c", "3", "-i", "0.3", "10.99.99.254")
        rtt = float(ping.stdout.strip().splitlines()[-1].split("=")[1].split("/")[1])
        assert 199 <= rtt <= 250, ping.stdout
        st = json.loads(_compose(project, "status", "--json").stdout)
        assert st["link"]["a_to_b"]["delay_ms"] == 100
        assert st["nodes"]["pepA"]["stats"]["name"] == "pepd"
    finally:
        down = _compose(project, "down")
    assert down.returncode == 0, down.stderr
    left = docker.docker("ps", "-a", "-q", "--filter", f"label=com.docker.compose.project={project}").stdout
    assert left.strip() == ""
    assert docker.docker("network", "ls", "-q", "--filter", f"name={project}").stdout.strip() == ""


@needs_root
@needs_docker
def test_pep_check_fails_a_do_nothing_image(images, tmp_path, no_leftovers):
    """An image that bridges and answers but does nothing else: stats with a
    name only, no labels but the contract's, every option accepted."""
    (tmp_path / "entry").write_text("""#!/bin/sh
case "${1:-run}" in
run)
    trap 'exit 0' TERM
    until ip link show "$SATBED_PEP_WAN" >/dev/null 2>&1; do sleep 0.1; done
    ip link add br0 type bridge
    for p in "$SATBED_PEP_LAN" "$SATBED_PEP_WAN"; do ip link set "$p" master br0 up; done
    ip link set br0 up
    mkdir -p "$SATBED_STATE_DIR" && touch "$SATBED_STATE_DIR/ready"
    while :; do sleep 1; done ;;
stats) echo '{"name": "nothing"}' ;;
*) echo ok ;;
esac
""")
    (tmp_path / "Dockerfile").write_text("FROM satbed/base:latest\nCOPY entry /entry\nRUN chmod 755 /entry\n"
                                         "LABEL org.satbed.contract=1\nENTRYPOINT [\"/entry\"]\n")
    tag = f"satbed-fixture/do-nothing:{os.urandom(3).hex()}"
    docker.docker("build", "-q", "-t", tag, str(tmp_path), timeout=300, env={**os.environ, "DOCKER_BUILDKIT": "0"})
    try:
        cp = satbed("pep-check", tag, timeout=300)
    finally:
        docker.docker("rmi", "-f", tag, check=False)
    assert cp.returncode == 1, cp.stdout + cp.stderr
    failed = {ln.split()[1] for ln in cp.stdout.splitlines() if ln.startswith("FAIL ")}
    assert {"labels", "splitting", "stats", "options"} <= failed, cp.stdout
    assert cp.stdout.strip().splitlines()[-1] == f"FAIL {tag}"


def _status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def _read(path: str) -> str:
    with open(path, encoding="ascii") as f:
        return f.read()


@needs_root
@needs_docker
def test_programs_in_a_container_node_are_confined(images, tmp_path, no_leftovers):
    """pepd, started by satbed inside a PEP container, has that container's
    capability sets, seccomp mode, cgroups and pid namespace; it and the
    container's other programs cannot write a sysctl, least of all a host one."""
    from satbed.backends import pepnodes
    from satbed.model import topology
    from satbed.model.link import LinkConfig
    from satbed.backends.testbed import Testbed
    tb = Testbed(topology.load("globalhawk"), backend=docker.DockerBackend.for_run(str(tmp_path), "pepd"))
    pep = None
    try:
        tb.start()
        node = tb.nodes["pepA"]
        pep = pepnodes.Pep("pepd", node, "a", LinkConfig(), str(tmp_path))
        pep.start()
        init = node.sandbox.pid
        with open(os.path.join(pep.state_dir, "pepd.pid"), encoding="ascii") as f:
            inner = f.read().strip()
        # The host pid of that pepd: a process in the container's pid namespace whose innermost pid it is.
        pidns = os.readlink(f"/proc/{init}/ns/pid")
        hits = [int(p) for p in os.listdir("/proc") if p.isdigit() and _ns_pid(int(p)) == (pidns, inner)]
        assert len(hits) == 1, hits
        mine, theirs = _status(hits[0]), _status(init)
        assert mine["Name"] == "pepd"
        for key in ("CapEff", "CapPrm", "CapBnd", "Seccomp", "NoNewPrivs"):
            assert mine[key] == theirs[key], key
        assert mine["Seccomp"] == "2"                       # filter mode: Docker's profile
        assert int(mine["CapEff"], 16) & (1 << 21) == 0     # no CAP_SYS_ADMIN
        assert _read(f"/proc/{hits[0]}/cgroup") == _read(f"/proc/{init}/cgroup")
        assert f"/docker/" in _read(f"/proc/{hits[0]}/cgroup")
        # A PEP container cannot write a host-wide sysctl, nor its own.
        host_value = _read("/proc/sys/kernel/pid_max").strip()
        cp = node.run(["sh", "-c", f"echo {host_value} >/proc/sys/kernel/pid_max"], check=False)
        assert cp.returncode != 0 and "Read-only file system" in cp.stderr, cp
        # (sh: a program of the image; satbed's own `sysctl` runs from the host)
        cp = node.run(["sh", "-c", "sysctl -w net.ipv4.ip_forward=0"], check=False)
        assert cp.returncode != 0
        assert node.run(["sysctl", "-n", "net.ipv4.ip_forward"]).stdout.strip() == "1"
        assert _read("/proc/sys/kernel/pid_max").strip() == host_value
    finally:
        if pep is not None:
            pep.stop()
        tb.stop()


def _ns_pid(pid: int) -> tuple[str, str] | None:
    try:
        ns = os.readlink(f"/proc/{pid}/ns/pid")
        nspid = _status(pid).get("NSpid", "").split()
    except OSError:
        return None
    return (ns, nspid[-1]) if nspid else None


@needs_root
@needs_docker
def test_run_and_matrix_drive_a_lab_image(images, fixture_image, tmp_path, no_leftovers):
    cp = satbed("run", "--backend", "docker", "--pep", fixture_image, "--client", "nuttcp-tcp", "--size", "2M",
                "--rtt", "100", "--no-analysis", "--out", str(tmp_path / "runs"), timeout=600)
    assert cp.returncode == 0, cp.stderr
    run_dir, summary = _result(cp.stdout)
    assert summary["integrity"] == "ok"
    with open(os.path.join(run_dir, "result.json"), encoding="utf-8") as f:
        pep = json.load(f)["pep"]
    assert pep["name"] == fixture_image and pep["nodes"]["pepA"]["name"] == "splitpep"
    assert pep["connections_split"] >= 1          # on the side whose end host opened the connection
    assert os.path.isfile(os.path.join(run_dir, "pep", "pepA", "proxy.log"))   # its state dir is the run's
    exp = tmp_path / "lab.yaml"
    exp.write_text(f"fixed: {{client: nuttcp-tcp, size: 1M, rtt: 100, pep: '{fixture_image}', analyze: false}}\n")
    cp = satbed("matrix", str(exp), "--backend", "docker", "--out", str(tmp_path / "matrix"), timeout=900)
    assert cp.returncode == 0, cp.stderr
    assert json.loads(cp.stdout.strip().splitlines()[-1]).get("ok") == 1, cp.stdout
    cp = satbed("matrix", str(exp), "--out", str(tmp_path / "netns"), timeout=120)
    assert cp.returncode == 2 and "needs --backend docker" in cp.stderr, cp.stderr
    assert len(cp.stderr.strip().splitlines()) == 1


@needs_root
@needs_docker
@pytest.mark.parametrize("args,error", [
    (["--project", "Bad!", "status"], "bad project name"),
    (["--project", "sbtabsent", "swap", "pepd"], "not running"),
    (["--project", "sbtabsent", "swap", "nosuch/pep:1"], "not running"),
    (["--project", "sbtabsent", "link"], "nothing to change"),
    (["--project", "sbtabsent", "link", "--outage", "5"], "PERIOD_S:DOWN_S"),
    (["--project", "sbtabsent", "link", "--rtt", "fast"], "RTT"),
    (["--project", "sbtabsent", "up", "--pep", "nosuch/pep:1"], "no image nosuch/pep:1"),
    (["--project", "sbtabsent", "up", "--pep", "satbed/host:latest"], "does not declare the PEP image contract"),
    (["--project", "sbtabsent", "up", "--pep", "pepd", "--pep-a", "none"], "not both"),
])
def test_compose_bad_input_is_one_line(args, error):
    cp = satbed("compose", *args, timeout=120)
    assert cp.returncode == 2, cp.stdout + cp.stderr
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1 and error in lines[0], cp.stderr
    assert docker.docker("ps", "-a", "-q", "--filter", "label=com.docker.compose.project=sbtabsent").stdout == ""


@needs_root
@needs_docker
def test_cli_on_containers(images, no_leftovers):
    """`satbed cli --backend docker`: Mininet's language on container nodes,
    each command confined to its node; exit removes the testbed."""
    cp = subprocess.run(["/usr/bin/python3", "-m", "satbed", "cli", "--backend", "docker"], cwd=REPO,
                        input="clientA ping -c 2 -i 0.3 clientB\npepA sh -c 'grep ^Seccomp: /proc/self/status'\n"
                              "nosuch ls\nexit\n",
                        env={**os.environ, "PYTHONPATH": REPO}, capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stderr
    assert "2 received" in cp.stdout and "Seccomp:\t2" in cp.stdout, cp.stdout
    assert "unknown command or node: nosuch" in cp.stdout


def test_clean_keeps_the_containers_of_a_run_that_starts_beside_it(tmp_path, monkeypatch):
    """`satbed clean` beside a run that is starting: the run saves its record,
    then makes its containers. Here the run starts while clean asks Docker for
    the containers (the worst moment); its container must stay. The order of
    clean's two reads decides it, so Docker's answer is scripted: no daemon
    can be made to interleave a run between two of clean's calls."""
    monkeypatch.setattr(records, "RECORD_DIR", str(tmp_path))
    monkeypatch.setattr(docker, "available", lambda: None)
    removed = []

    def fake_docker(*args, **kwargs):
        if args[0] == "ps":
            # The run starts now: record first (its owner is this live
            # process), then the container Docker lists.
            records.RunRecord("sbabcd", os.getpid(), records.start_time(os.getpid()),
                              containers=["sbabcd-pepB"]).save()
            return subprocess.CompletedProcess(args, 0, "sbabcd-pepB sbabcd\nsb0dead-x sb0dea\n", "")
        if args[0] == "rm":
            removed.append(args[-1])
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(docker, "docker", fake_docker)
    assert docker.clean_orphans() == ["sb0dead-x"]
    assert removed == ["sb0dead-x"]
