"""Confinement: what a node's container sees of the host (a PEP image is a
lab's code under test), and `satbed clean` reading records as untrusted
input. The unit tests need root only for namespaces; the hostile-image test
needs root and a Docker daemon and skips with the reason otherwise."""

from __future__ import annotations

import glob
import json
import os
import pathlib
import signal
import socket
import subprocess
import threading
import time
from typing import Callable

import pytest
import yaml

from satbed_testlib import REPO, images_lock, needs_root, satbed
from satbed.backends import docker, records, testbed
from satbed.backends.emulation import control_request
from satbed.backends.mounts import node_mounts
from satbed.backends.records import RunRecord, netns_inode, start_time

DOCKER_MISSING = docker.available()
needs_docker = pytest.mark.skipif(DOCKER_MISSING is not None, reason=DOCKER_MISSING or "")
HOSTILE_IMAGE = "satbed-fixture/hostile:latest"


@pytest.fixture
def record_dir(tmp_path, monkeypatch):
    """A record directory of the test's own: `clean` here touches no one else's runs."""
    d = tmp_path / "records"
    d.mkdir()
    monkeypatch.setattr(records, "RECORD_DIR", str(d))
    return d


# ------------------------------------------------------------ what each node mounts

def test_each_container_mounts_only_what_its_node_needs(record_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("SATBED_DOCKER_MOUNTS", raising=False)
    run = str(tmp_path / "run")
    profile = str(tmp_path / "profile.csv")

    def table(role: str, node: str) -> dict[str, bool]:
        return {m.path: m.read_only for m in node_mounts(role, "sbabcd", node, (run,), run, (profile,))}

    assert table("pep", "pepA") == {f"{run}/pep/pepA": False}
    assert table("emulator", "emulator") == {
        os.path.join(REPO, "bin"): True, f"{record_dir}/runs/sbabcd/emulator": False,
        f"{run}/emulator": False, profile: True}
    assert table("host", "clientA") == {REPO: True, run: False}
    assert table("router", "r1") == {} and table("bridge", "br") == {}
    # The control directory is private at every level; no node sees the records.
    for d in (record_dir / "runs", record_dir / "runs" / "sbabcd", record_dir / "runs" / "sbabcd" / "emulator"):
        assert os.stat(d).st_mode & 0o777 == 0o700
    for role, node in (("pep", "pepA"), ("emulator", "emulator"), ("host", "clientA")):
        for path in table(role, node):
            assert not (path == str(record_dir) or str(record_dir).startswith(path + os.sep)), (role, path)
    # Without a run directory (`satbed cli`) a PEP node sees nothing of the host.
    assert node_mounts("pep", "sbabcd", "pepA") == []
    # The run's backend passes what each node needs.
    backend = docker.DockerBackend.for_run(run, link_files=(profile,))
    assert (backend.mounts, backend.run_dir, backend.link_files) == ((run,), run, (profile,))


def test_compose_containers_mount_nothing_of_the_host():
    """docker-compose.yml's nodes keep their state inside (the emulator's
    control socket too): no volume, no host namespace, no privilege."""
    with open(os.path.join(REPO, "docker-compose.yml"), encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    for name, svc in doc["services"].items():
        assert not svc.get("volumes") and not svc.get("volumes_from") and not svc.get("tmpfs"), name
        assert not svc.get("privileged") and not svc.get("devices"), name
        for key in ("pid", "ipc", "userns_mode", "uts", "cgroup"):
            assert svc.get(key) in (None, "private"), (name, key)
        assert svc.get("network_mode") == "none", name
        assert set(svc.get("cap_add") or []) <= {"NET_ADMIN", "NET_RAW"}, name
        assert not any(o.startswith(("seccomp=unconfined", "apparmor=unconfined", "systempaths"))
                       for o in svc.get("security_opt") or []), name


# ------------------------------------------------------------ clean distrusts records

def _record(prefix: str, **fields) -> RunRecord:
    """A record of a dead run (its owner's start time is wrong)."""
    rec = RunRecord(prefix, os.getpid(), 1, **fields)
    rec.save()
    return rec


def _run_dir(path: pathlib.Path, marker: str | None) -> str:
    """A run directory with config.json and a payload in files/, and
    satbed's marker naming `marker` (none if None)."""
    os.makedirs(path / "files")
    (path / "config.json").write_text("{}")
    (path / "files" / "payload").write_text("x")
    if marker is not None:
        records.mark_run_dir(str(path), marker)
    return str(path)


def _spawn(*args: str) -> subprocess.Popen:
    """Each of these ends as `sleep`: returns once it has (past unshare's,
    nsenter's or env's exec, its namespace and environment final)."""
    p = subprocess.Popen(list(args), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (netns_inode(p.pid) is None or _comm(p.pid) != "sleep"):
        time.sleep(0.01)
    return p


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""


def _alive(p: subprocess.Popen) -> bool:
    return p.poll() is None


@needs_root
def test_clean_leaves_alone_what_a_record_cannot_prove_is_its_runs(record_dir, tmp_path):
    """Forged or mistaken records: a pid outside the run's namespaces, a
    namespace no process of the run holds, a run directory satbed did not
    make (or made for another run), a record naming another prefix than its
    file's, one others may write. Each is reported and left alone; what is
    provably the run's is still cleaned."""
    procs = []
    try:
        stranger = _spawn("sleep", "600")                                   # root namespace
        hidden = _spawn("unshare", "-n", "sleep", "600")                    # a namespace of nobody's run
        node = _spawn("unshare", "-n", "bash", "-c", "exec -a mininet:sb0002-node sleep 600")
        procs += [stranger, hidden, node]
        inside = _spawn("nsenter", "-t", str(node.pid), "-n", "sleep", "600")   # no prefix, in the run's namespace
        orphan = _spawn("unshare", "-n", "env", f"{records.RUN_ENV}=sb000a", "sleep", "600")   # its shell gone
        procs += [inside, orphan]
        unmarked = _run_dir(tmp_path / "unmarked", None)
        elsewhere = _run_dir(tmp_path / "elsewhere", "sb0009")
        linked = tmp_path / "linked"
        os.makedirs(linked)
        records.mark_run_dir(str(linked), "sb0003")
        (linked / "config.json").write_text("{}")
        os.symlink(os.path.join(unmarked, "files"), linked / "files")
        ours = _run_dir(tmp_path / "ours", "sb0002")
        _record("sb0001", pids={str(stranger.pid): start_time(stranger.pid)},
                netns={"x": netns_inode(hidden.pid)}, run_dir=unmarked)
        _record("sb0002", pids={str(stranger.pid): start_time(stranger.pid), str(node.pid): start_time(node.pid)},
                netns={"node": netns_inode(node.pid)}, run_dir=ours)
        _record("sb0003", run_dir=str(linked))
        _record("sb000a", netns={"node": netns_inode(orphan.pid)})
        _record("sb0004", run_dir=elsewhere)
        _record("sb0005", run_dir="runs/ours")
        _record("sb0006")
        os.rename(record_dir / "sb0006.json", record_dir / "sb0007.json")   # names another prefix
        _record("sb0008")
        os.chmod(record_dir / "sb0008.json", 0o666)

        out = testbed.clean()
        said = "\n".join(out)
        # Provably the run's: its node's namespace (every process in it) and its files.
        deadline = time.monotonic() + 5
        while (_alive(node) or _alive(inside) or _alive(orphan)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(node) and not _alive(inside) and not _alive(orphan), said
        assert not os.path.exists(os.path.join(ours, "files")), said
        # Not provably its: left alone, one line each.
        assert _alive(stranger) and _alive(hidden), said
        for prefix, why in (("sb0001", f"pid {stranger.pid} (not in the run's namespaces"),
                            ("sb0001", "1 namespace(s) no process of the run holds"),
                            ("sb0001", f"run directory {unmarked} is not one satbed made"),
                            ("sb0002", f"pid {stranger.pid} (not in the run's namespaces"),
                            ("sb0003", f"{linked}/files is a symbolic link"),
                            ("sb0004", f"run directory {elsewhere} belongs to 'sb0009', not sb0004"),
                            ("sb0005", "'runs/ours' is not an absolute path"),
                            ("sb0007.json", "it names prefix 'sb0006'"),
                            ("sb0008.json", "writable by others")):
            lines = [ln for ln in out if ln.startswith(prefix) and "left alone" in ln]
            assert len(lines) == 1 and why in lines[0], (prefix, why, said)
        assert os.path.isfile(os.path.join(unmarked, "files", "payload"))
        assert os.path.isfile(os.path.join(elsewhere, "files", "payload"))
        # Suspect records stay for a human; the others are gone.
        assert sorted(os.listdir(record_dir)) == ["sb0007.json", "sb0008.json"], os.listdir(record_dir)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()


def test_clean_takes_a_malformed_record_in_one_line(record_dir):
    (record_dir / "sb000c.json").write_text(json.dumps(
        {"prefix": "sb000c", "owner_pid": os.getpid(), "owner_start": 1, "containers": [7, None], "run_dir": 5}))
    (record_dir / "sb000d.json").write_text(json.dumps({"prefix": "sb000d", "owner_pid": "x"}))
    out = testbed.clean()
    assert "sb000c: 0 process(es) stopped" in out and "sb000d.json: unreadable record removed" in out, out
    assert os.listdir(record_dir) == []


def test_control_directories_go_with_their_record(record_dir):
    rec = _record("sb00aa")
    ctl = records.make_control_dir("sb00aa", "emulator")
    stale = records.make_control_dir("sb00bb", "emulator")      # its record is gone
    out = testbed.clean()
    assert not os.path.exists(ctl) and not os.path.exists(os.path.dirname(stale)), out
    assert "runs/sb00bb: stale control directory removed" in out
    assert not os.path.exists(rec.path)


# ------------------------------------------------------------ a hostile PEP image

@pytest.fixture(scope="module")
def hostile_image():
    """satbed's images (reused when current) and the hostile fixture, built
    locally like the other images (no registry)."""
    for b in ("satemu", "pepd", "saratoga"):
        if not os.access(os.path.join(REPO, "bin", b), os.X_OK):
            pytest.skip(f"bin/{b} missing: run `make build`")
    with images_lock():
        docker.build_images(["host", "emulator", "pep-none", "pep-pepd"], log=lambda line: None)
        docker.docker("build", "-q", "-t", HOSTILE_IMAGE, os.path.join(REPO, "tests", "fixtures", "pep-hostile"),
                      timeout=900, env={**os.environ, "DOCKER_BUILDKIT": "0"})
    return HOSTILE_IMAGE


class Listener:
    """A TCP port on every host address, counting who gets through."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("0.0.0.0", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.5)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[str] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.is_set():
            try:
                c, peer = self.sock.accept()
            except OSError:
                continue
            self.accepted.append(peer[0])
            c.close()

    def close(self) -> None:
        self.done.set()
        self.thread.join(timeout=5)
        self.sock.close()


def _host_addresses() -> list[str]:
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, timeout=10).stdout
    return [ln.split()[3].split("/")[0] for ln in out.splitlines() if " inet " in ln and " lo " not in ln]


def _wait_for(what: str, probe: Callable[[], list[str]], limit: float, proc: subprocess.Popen) -> list[str]:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        if proc.poll() is not None:
            raise AssertionError(f"the other run ended before {what}: {proc.communicate()[1][-2000:]}")
        time.sleep(0.5)
    raise AssertionError(f"no {what} after {limit:g} s")


def _start(*args: str) -> subprocess.Popen:
    """satbed in a session of its own, so a failing test stops it with
    SIGINT (its teardown runs) and never leaves containers behind."""
    return subprocess.Popen(["/usr/bin/python3", "-m", "satbed", *args], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": REPO}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()


def _breaches(report: dict, node: str) -> list[dict]:
    """The attempts that worked, once the image is seen to have looked around."""
    assert report["walked_files"] > 1000 and not report["walk_cut"], (node, report)
    return [a for a in report["attempts"] if a["ok"]]


@needs_root
@needs_docker
def test_a_hostile_pep_beside_another_run_reaches_nothing(hostile_image, tmp_path, no_leftovers):
    """The hostile image runs as both PEPs of a ping run while another run
    (pepd, an SCP transfer of seeded random data) is under way. Every attempt
    it makes from inside fails: the record directory, every unix socket, the
    other run's files and keys, host sysctls, the host's disk, processes and
    addresses. The other run's link is still what was configured and its
    transfer arrives intact by SHA-256."""
    listener = Listener()
    victim = _start("run", "--backend", "docker", "--pep", "pepd", "--client", "scp", "--size", "24M",
                    "--rate", "2mbit", "--rtt", "200", "--no-analysis", "--out", str(tmp_path / "victim"))
    hostile = None
    forged = os.path.join(records.RECORD_DIR, "sbdead.json")
    try:
        run_dir = _wait_for("run directory", lambda: glob.glob(str(tmp_path / "victim" / "*-sb*")), 180, victim)[0]
        prefix = run_dir.rsplit("-", 1)[1]
        sock = _wait_for("control socket", lambda: glob.glob(
            os.path.join(records.RECORD_DIR, "runs", prefix, "*", "satemu.sock")), 180, victim)[0]
        keys = _wait_for("ssh keys", lambda: glob.glob(os.path.join(run_dir, "files", "**", "*_ed25519"),
                                                       recursive=True), 180, victim)
        before = control_request(sock, {"op": "get"})["config"]
        targets = {"hosts": [f"{a}:{listener.port}" for a in _host_addresses()],
                   "paths": [run_dir, os.path.join(run_dir, "files"), *keys,
                             os.path.join(records.RECORD_DIR, f"{prefix}.json")],
                   "sockets": [sock], "records": [records.RECORD_DIR]}
        options = " ".join(f"{k}={','.join(v)}" for k, v in targets.items())
        hostile = _start("run", "--backend", "docker", "--pep", hostile_image, "--pep-options", options,
                         "--client", "ping", "--no-analysis", "--out", str(tmp_path / "hostile"))
        out, err = hostile.communicate(timeout=600)
        assert hostile.returncode == 0, err
        assert victim.poll() is None, "the other run ended before the hostile one: no overlap to test"
        # Seen from the host: no forged record, no connection, the other run's link as configured.
        assert not os.path.exists(forged)
        assert listener.accepted == []
        assert control_request(sock, {"op": "get"})["config"] == before
        assert before["directions"]["a_to_b"]["config"]["delay_ms"] == 100
        # Seen from inside: every attempt failed.
        hostile_dir = out.strip().splitlines()[0]
        for node in ("pepA", "pepB"):
            with open(os.path.join(hostile_dir, "pep", node, "attempts.json"), encoding="utf-8") as f:
                report = json.load(f)
            tried = {(a["kind"], a["target"]) for a in report["attempts"]}
            # Not vacuous: it tried what it was pointed at, and looked around.
            assert ("socket", sock) in tried and ("read", keys[0]) in tried, tried
            assert ("record-write", os.path.join(records.RECORD_DIR, "sbdead.json")) in tried
            assert {k for k, _ in tried} >= {"socket", "read", "keys", "record-write", "sysctl", "disk",
                                             "processes", "host"}, tried
            breaches = _breaches(report, node)
            assert breaches == [], f"{node}: {json.dumps(breaches, indent=1)}"
        # The overlap is proven: the rest of the other run's transfer need not
        # crawl at 2 Mbit/s (24 MB is sized to outlast the hostile run on a busy
        # machine). Its file must still arrive intact.
        assert control_request(sock, {"op": "set", "dir": "both",
                                      "params": {"rate_bps": 200_000_000, "ceil_bps": 200_000_000,
                                                 "delay_ms": 1}}).get("ok")
        out, err = victim.communicate(timeout=600)
        assert victim.returncode == 0, err
        summary = json.loads(out.strip().splitlines()[-1])
        assert summary["integrity"] == "ok" and summary["bytes"] == 24 << 20, summary
    finally:
        listener.close()
        for proc in (hostile, victim):
            if proc is not None:
                _stop(proc)
        if os.path.exists(forged):
            os.unlink(forged)


@needs_root
@needs_docker
def test_a_hostile_pep_on_the_standing_testbed_reaches_nothing(hostile_image, tmp_path, no_leftovers):
    """The compose path: the hostile image swapped in as both PEPs of a
    standing testbed finds nothing of the host either (its containers
    mount nothing), and the path through it still works."""
    listener = Listener()
    secret = tmp_path / "secret"
    secret.write_text("not for PEPs")
    options = (f"hosts={','.join(f'{a}:{listener.port}' for a in _host_addresses())} "
               f"paths={tmp_path},{secret} records={records.RECORD_DIR}")
    project = "sbt" + os.urandom(2).hex()
    try:
        cp = satbed("compose", "--project", project, "up", "--pep", hostile_image, "--pep-options", options,
                    "--json", timeout=600)
        assert cp.returncode == 0, cp.stderr
        assert json.loads(cp.stdout)["path"]["tcp_intact"]
        for node in ("pepA", "pepB"):
            cid = docker.docker("ps", "-q", "--filter", f"label=com.docker.compose.project={project}",
                                "--filter", f"label=com.docker.compose.service={node}").stdout.strip()
            report = json.loads(docker.docker("exec", cid, "cat", "/run/satbed/pep/attempts.json").stdout)
            tried = {(a["kind"], a["target"]) for a in report["attempts"]}
            assert ("read", str(secret)) in tried and ("record-write", f"{records.RECORD_DIR}/sbdead.json") in tried
            assert _breaches(report, node) == [], f"{node}: {json.dumps(_breaches(report, node), indent=1)}"
        assert listener.accepted == []
        assert not os.path.exists(os.path.join(records.RECORD_DIR, "sbdead.json"))
    finally:
        listener.close()
        down = satbed("compose", "--project", project, "down", timeout=300)
    assert down.returncode == 0, down.stderr
