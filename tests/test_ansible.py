"""The physical test bed's playbooks (playbooks/site.yml) on five containers
standing in for the five machines, and `satbed run --backend ansible` across
them (`make test-ansible`; `make test` runs it with the rest).

Each container is a machine of one Debian install (satbed/host): sshd as its
only process, Docker's default capabilities plus NET_ADMIN, a management NIC
(eth0, a Docker network the controller reaches it on) and its test NICs,
veth pairs wired like the real chain:

    clientA.eth1 = pepA.eth1   pepA.eth2 = emulator.eth1
    emulator.eth2 = pepB.eth2  pepB.eth1 = clientB.eth1

A container's /proc/sys is read-only, so the kernel settings the roles keep
(from the same plan the roles read: `python3 -m satbed.backends.ansible plan`) are set
when it is created, as Docker allows for namespaced ones; the roles then find
them in force (on a real machine they write them). Needs root, Docker,
ansible-playbook and bin/ (`make build`); skips with the reason otherwise."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import time

import pytest
import yaml

from satbed_testlib import REPO, images_lock, needs_root, satbed
from satbed.backends import docker
from satbed.backends.ansible import plan
from satbed.backends.net import allow_in_namespaces
from satbed.model.topology import load
from satbed.results.metrics import run_metrics

DOCKER_MISSING = docker.available()
needs_docker = pytest.mark.skipif(DOCKER_MISSING is not None, reason=DOCKER_MISSING or "")
needs_ansible = pytest.mark.skipif(shutil.which("ansible-playbook") is None,
                                   reason="ansible-playbook missing (apt-get install ansible-core)")
PLAYBOOK = os.path.join(REPO, "playbooks", "site.yml")
LABEL = "org.satbed.test=ansible"

# node -> {topology port: the machine's NIC}; links between the NICs.
NICS = {"clientA": {"eth0": "eth1"}, "pepA": {"lan": "eth1", "wan": "eth2"},
        "emulator": {"a": "eth1", "b": "eth2"}, "pepB": {"lan": "eth1", "wan": "eth2"},
        "clientB": {"eth0": "eth1"}}
GROUPS = {"clientA": "end_host", "clientB": "end_host", "pepA": "pep", "pepB": "pep", "emulator": "satemu"}
RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def _offered_cc() -> list[str]:
    with open("/proc/sys/net/ipv4/tcp_available_congestion_control", encoding="ascii") as f:
        return f.read().split()


def preset_sysctls(node: str, the_plan: dict) -> dict[str, str]:
    """The namespaced kernel settings the roles keep on this machine."""
    out = {"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"}
    spec = the_plan["nodes"][node]
    if spec["kind"] != "host" and os.path.exists("/proc/sys/net/bridge/bridge-nf-call-iptables"):
        out["net.bridge.bridge-nf-call-iptables"] = "0"
    if spec["kind"] == "pep":
        out.update({"net.ipv4.ip_forward": "1", "net.ipv4.conf.all.send_redirects": "0",
                    "net.ipv4.conf.default.send_redirects": "0"})
    if spec["kind"] == "host":
        out["net.ipv4.tcp_congestion_control"] = next(c for c in spec["congestion_control"] if c in _offered_cc())
        out.update(spec["sysctls"])
    return out


class Bed:
    """Five containers wired as the chain, an SSH key and an inventory."""

    def __init__(self, workdir: str, runs_dir: str):
        self.prefix = "sbans" + os.urandom(2).hex()
        self.workdir, self.runs_dir = workdir, runs_dir
        self.network = f"{self.prefix}-mgmt"
        self.containers: dict[str, str] = {}
        self.addresses: dict[str, str] = {}
        self.key = os.path.join(workdir, "id_ed25519")
        self.inventory = os.path.join(workdir, "inventory.yml")
        self.applied = False
        self.first: subprocess.CompletedProcess | None = None

    def up(self, image: str) -> None:
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", self.key], check=True, timeout=30)
        keys = os.path.join(self.workdir, "authorized_keys")
        shutil.copy(self.key + ".pub", keys)
        os.chmod(keys, 0o600)
        docker.docker("network", "create", "--label", LABEL, self.network)
        the_plan = plan(load("globalhawk"))
        for node in NICS:
            name = f"{self.prefix}-{node}"
            self.containers[node] = name
            args = ["run", "-d", "--name", name, "--hostname", node, "--label", LABEL,
                    "--network", self.network, "--cap-add", "NET_ADMIN",
                    "-v", f"{keys}:/root/.ssh/authorized_keys:ro", "-v", f"{self.runs_dir}:{self.runs_dir}"]
            sysctls = preset_sysctls(node, the_plan)
            if "net.ipv4.tcp_congestion_control" in sysctls:
                # On a machine the role sets it in the root namespace; a container
                # may only take one on the root namespace's allowed list, which on
                # a kernel that defaults to bbr lacks cubic until something adds it.
                allow_in_namespaces(sysctls["net.ipv4.tcp_congestion_control"])
            for k, v in sysctls.items():
                args += ["--sysctl", f"{k}={v}"]
            args += ["--entrypoint", "/bin/sh", image, "-c",
                     "ssh-keygen -A >/dev/null && exec /usr/sbin/sshd -D -e"]
            docker.docker(*args)
        pids = {}
        for node, name in self.containers.items():
            out = docker.docker("inspect", "--format",
                                "{{.State.Pid}} {{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                                name).stdout.split()
            pids[node], self.addresses[node] = out[0], out[1]
        for (a, pa), (b, pb) in ((("clientA", "eth0"), ("pepA", "lan")), (("pepA", "wan"), ("emulator", "a")),
                                 (("emulator", "b"), ("pepB", "wan")), (("pepB", "lan"), ("clientB", "eth0"))):
            subprocess.run(["ip", "link", "add", "name", NICS[a][pa], "netns", pids[a], "type", "veth",
                            "peer", "name", NICS[b][pb], "netns", pids[b]], check=True, timeout=30)
        self.write_inventory()
        self.wait_ssh()

    def write_inventory(self) -> None:
        groups: dict[str, dict] = {}
        for node, group in GROUPS.items():
            groups.setdefault(group, {"hosts": {}})["hosts"][node] = {
                "ansible_host": self.addresses[node], "satbed_ports": NICS[node]}
        doc = {"all": {"vars": {
            "ansible_user": "root", "ansible_ssh_private_key_file": self.key,
            "ansible_python_interpreter": "/usr/bin/python3",
            "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
                                       "-o LogLevel=ERROR",
            "satbed_runs_dir": self.runs_dir},
            "children": groups}}
        with open(self.inventory, "w", encoding="utf-8") as f:
            yaml.safe_dump(doc, f, sort_keys=False)

    def wait_ssh(self) -> None:
        deadline = time.monotonic() + 60
        for node, addr in self.addresses.items():
            while True:
                cp = subprocess.run(["ssh", "-i", self.key, "-o", "StrictHostKeyChecking=no", "-o",
                                     "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o",
                                     "BatchMode=yes", "-o", "ConnectTimeout=5", f"root@{addr}", "true"],
                                    capture_output=True, text=True, timeout=30)
                if cp.returncode == 0:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sshd on {node} does not answer: {cp.stderr.strip()}")
                time.sleep(0.5)

    def playbook(self, *extra: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "ANSIBLE_PIPELINING": "1", "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORKS": "5",
               "ANSIBLE_RETRY_FILES_ENABLED": "0", "ANSIBLE_LOCAL_TEMP": os.path.join(self.workdir, "tmp"),
               "ANSIBLE_SSH_CONTROL_PATH_DIR": os.path.join(self.workdir, "cp"),
               # The satbed_host role's bundle of the build goes there too, not in /tmp.
               "TMPDIR": self.workdir}
        return subprocess.run(["ansible-playbook", "-i", self.inventory, PLAYBOOK, *extra], capture_output=True,
                              text=True, timeout=2400, env=env, cwd=REPO)

    def exec(self, node: str, *args: str) -> subprocess.CompletedProcess:
        return docker.docker("exec", self.containers[node], *args, check=False)

    def down(self) -> None:
        # Ansible's multiplexed SSH connections would outlive the machines by a minute.
        cp_dir = os.path.join(self.workdir, "cp")
        for sock in os.listdir(cp_dir) if os.path.isdir(cp_dir) else []:
            subprocess.run(["ssh", "-o", f"ControlPath={os.path.join(cp_dir, sock)}", "-O", "exit", "machine"],
                           capture_output=True, timeout=15)
        for name in self.containers.values():
            docker.docker("rm", "-f", name, check=False, timeout=60)
        docker.docker("network", "rm", self.network, check=False, timeout=60)


def recap(out: str) -> dict[str, dict[str, int]]:
    return {m[0]: {"ok": int(m[1]), "changed": int(m[2]), "unreachable": int(m[3]), "failed": int(m[4])}
            for m in RECAP.findall(out)}


def tail(cp: subprocess.CompletedProcess, n: int = 40) -> str:
    return "\n".join((cp.stdout + cp.stderr).splitlines()[-n:])


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    for b in ("satemu", "pepd", "saratoga", "satquic"):
        if not os.access(os.path.join(REPO, "bin", b), os.X_OK):
            pytest.skip(f"bin/{b} missing: run `make build`")
    # The end-host image `make images` built (any machine image with sshd and
    # python3 would do); built here only where absent.
    with images_lock():
        image = ("satbed/host:latest" if docker.image_id("satbed/host:latest")
                 else docker.build_images(["host"], log=lambda line: None)["host"])
    work = tmp_path_factory.mktemp("ansible")
    runs = os.path.join("/tmp", f"satbed-ansible-runs-{os.getpid()}")
    os.makedirs(runs, exist_ok=True)
    b = Bed(str(work), runs)
    try:
        b.up(image)
        # Applied here, once, so that no test depends on another having run
        # first (pytest-xdist may give them to different workers otherwise).
        b.first = b.playbook()
        b.applied = b.first.returncode == 0
        yield b
    finally:
        b.down()
        shutil.rmtree(runs, ignore_errors=True)


@needs_root
@needs_docker
@needs_ansible
# The per-test timeout counts the bed's setup, which this test pays for (it
# runs first): five machines and the playbook applied, then applied again.
# Beside the rest of the suite on a VM whose Docker stores layers through
# fuse-overlayfs the two took 10 min (2026-11-28), 3 min on a quiet machine.
@pytest.mark.timeout(1200)
def test_site_playbook_twice_changes_nothing_the_second_time(bed):
    first = bed.first
    assert first.returncode == 0, tail(first)
    counts = recap(first.stdout)
    assert set(counts) == set(NICS), tail(first)
    assert all(c["failed"] == 0 and c["unreachable"] == 0 for c in counts.values()), tail(first)
    second = bed.playbook()
    assert second.returncode == 0, tail(second)
    again = recap(second.stdout)
    print("\n".join(line for line in second.stdout.splitlines() if RECAP.match(line)))
    assert {n: c["changed"] for n, c in again.items()} == {n: 0 for n in NICS}, tail(second, 80)
    # The machines are as the roles say: ports, addresses, bridges.
    for node in NICS:
        cp = bed.exec(node, "/usr/local/sbin/satbed-ports", "check")
        assert cp.returncode == 0, f"{node}: {cp.stdout}{cp.stderr}"
    assert "10.99.99.2/24" in bed.exec("clientA", "ip", "-o", "-4", "addr", "show", "dev", "eth1").stdout
    for pep in ("pepA", "pepB"):
        assert "master br0" in bed.exec(pep, "ip", "-o", "link", "show", "dev", "eth1").stdout
        assert bed.exec(pep, "ip", "-o", "-4", "addr", "show", "dev", "br0").stdout.strip() == ""
    # The userspace emulator owns its ports: no kernel bridge there.
    assert "master" not in bed.exec("emulator", "ip", "-o", "link", "show", "dev", "eth1").stdout


def _copy_out(bed, node: str, root: str, paths: list[str]) -> None:
    """Files of a machine into root (a root directory for systemd-analyze)."""
    for path in paths:
        os.makedirs(root + os.path.dirname(path), exist_ok=True)
        docker.docker("cp", f"{bed.containers[node]}:{path}", root + path)


def _verify_unit(root: str, unit: str) -> None:
    """systemd-analyze verify against the machine's own files: a unit that
    does not parse, or names a command the machine lacks, says so. The
    machines have no systemd of their own: this host's units stand in for
    the ones a unit's default dependencies name (sysinit.target...)."""
    system = os.path.join(root, "usr/lib/systemd/system")
    if not os.path.isdir(system):
        shutil.copytree(os.path.realpath("/lib/systemd/system"), system, symlinks=True)
    cp = subprocess.run(["systemd-analyze", "verify", f"--root={root}", f"/etc/systemd/system/{unit}"],
                        capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0 and not (cp.stdout + cp.stderr).strip(), (unit, cp.stdout + cp.stderr)


def _exec_start(bed, node: str, unit: str) -> list[list[str]]:
    text = bed.exec(node, "cat", f"/etc/systemd/system/{unit}").stdout
    return [line.split("=", 1)[1].split() for line in text.splitlines() if line.startswith("ExecStart=")]


@needs_root
@needs_docker
@needs_ansible
@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze missing")
def test_boot_units(bed, tmp_path):
    """The units the roles install. The containers run no systemd, so each
    unit is checked by systemd-analyze verify against the machine's own
    files, and its command is run as systemd would run it: at boot, from
    ports that lost their state; the standing link for a few seconds. (The
    tc standing link needs netem, which this kernel lacks: not run here.)"""
    if not bed.applied:
        pytest.fail(f"the site playbook did not apply: {tail(bed.first)}")
    for node in NICS:
        root = str(tmp_path / node)
        _copy_out(bed, node, root, ["/etc/systemd/system/satbed-ports.service", "/usr/local/sbin/satbed-ports"])
        _verify_unit(root, "satbed-ports.service")
    # As after a reboot: no bridge on a PEP, no address on an end host.
    bed.exec("pepA", "ip", "link", "del", "br0")
    bed.exec("clientA", "ip", "-4", "addr", "flush", "dev", "eth1")
    for node in ("pepA", "clientA"):
        assert bed.exec(node, "/usr/local/sbin/satbed-ports", "check").returncode == 1
        for cmd in _exec_start(bed, node, "satbed-ports.service"):
            cp = bed.exec(node, *cmd)
            assert cp.returncode == 0, (node, cmd, cp.stdout + cp.stderr)
        cp = bed.exec(node, "/usr/local/sbin/satbed-ports", "check")
        assert cp.returncode == 0, (node, cp.stdout)

    # The standing link (satemu as a service): installed, verified, run.
    standing = bed.playbook("--limit", "emulator", "--tags", "satemu", "-e", "satemu_standing=true")
    assert standing.returncode == 0, tail(standing)
    root = str(tmp_path / "standing")
    _copy_out(bed, "emulator", root, ["/etc/systemd/system/satbed-link.service",
                                      "/etc/systemd/system/satbed-ports.service", "/usr/local/sbin/satbed-ports",
                                      "/etc/satbed/satemu.json", os.path.join(REPO, "bin", "satemu")])
    _verify_unit(root, "satbed-link.service")
    # A run refuses the machines while the standing link holds the emulator's ports.
    cp = satbed("run", "--backend", "ansible", "--inventory", bed.inventory, "--client", "ping",
                "--out", bed.runs_dir, timeout=120)
    assert cp.returncode == 2 and "emulator: a standing link is installed" in cp.stderr, cp.stderr
    # The service's command stays up (stopped after 3 s by timeout, 124),
    # in the state directory systemd would make.
    [cmd] = _exec_start(bed, "emulator", "satbed-link.service")
    cp = bed.exec("emulator", "sh", "-c", "mkdir -p /var/lib/satbed/emulator && timeout 3 " + " ".join(cmd))
    assert cp.returncode == 124, cp.stdout + cp.stderr
    # Not standing again: the role removes it, and the run may go on.
    off = bed.playbook("--limit", "emulator", "--tags", "satemu")
    assert off.returncode == 0 and recap(off.stdout)["emulator"]["changed"] > 0, tail(off)
    assert bed.exec("emulator", "test", "-e", "/etc/systemd/system/satbed-link.service").returncode == 1
    bed.exec("emulator", "rm", "-rf", "/var/lib/satbed")


@needs_ansible
@pytest.mark.skipif(shutil.which("ansible-lint") is None, reason="ansible-lint missing")
def test_ansible_lint_passes():
    cp = subprocess.run(["ansible-lint", "--offline", "--nocolor", "playbooks/site.yml", "playbooks/slurm.yml"],
                        capture_output=True,
                        text=True, timeout=300, cwd=REPO, env={**os.environ, "ANSIBLE_NOCOLOR": "1"})
    assert cp.returncode == 0, (cp.stdout + cp.stderr)[-4000:]


def _inventory_with(bed, path: str, **changes: dict) -> str:
    with open(bed.inventory, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    for group in doc["all"]["children"].values():
        for host, hv in group["hosts"].items():
            hv.update(changes.get(host, {}))
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(doc, f)
    return path


@needs_root
@needs_docker
@needs_ansible
def test_run_across_the_machines(bed):
    """A short FTP download with pepd across the five machines: the file
    arrives intact, the PEPs split (the LAN-side connect is short) and the
    usual run directory and analysis follow."""
    if not bed.applied:
        pytest.fail(f"the site playbook did not apply: {tail(bed.first)}")
    cp = satbed("run", "--backend", "ansible", "--inventory", bed.inventory, "--client", "ftp", "--pep", "pepd",
                "--emulator", "userspace", "--rtt", "200", "--size", "2M", "--out", bed.runs_dir, timeout=600)
    assert cp.returncode == 0, cp.stderr[-3000:]
    run_dir = cp.stdout.splitlines()[0]
    with open(os.path.join(run_dir, "result.json"), encoding="utf-8") as f:
        result = json.load(f)
    print(json.dumps({k: result.get(k) for k in ("goodput_bps", "integrity", "sha256", "tcp_connect_ms")}))
    assert result["integrity"] == "ok" and result["sha256"] == result["sha256_expected"]
    legs = result["split_proof"]["legs"]
    print("split proof connect_ms:", [leg["connect_ms"] for leg in legs])
    # The SYN is answered by the PEP beside the connecting host, not 200 ms away.
    assert all(leg["connect_ms"] < 50 for leg in legs), legs
    assert all(n["connections_split"] >= 1 for n in result["pep"]["nodes"].values()), result["pep"]
    for vantage in ("lan_a", "wan_a", "wan_b", "lan_b"):
        assert os.path.getsize(os.path.join(run_dir, "captures", f"{vantage}.pcap")) > 24
    with open(os.path.join(run_dir, "environment.json"), encoding="utf-8") as f:
        env = json.load(f)
    assert env["testbed"]["backend"] == "ansible"
    # The PEP machines keep their own default congestion control, recorded as
    # each machine's kernel says it.
    for pep in ("pepA", "pepB"):
        in_force = bed.exec(pep, "sysctl", "-n", "net.ipv4.tcp_congestion_control").stdout.strip()
        assert in_force and env["tcp_congestion_control"][pep] == in_force, env["tcp_congestion_control"]
    assert set(run_metrics(run_dir)["analysis"]) == {"lan_a", "wan_a", "wan_b", "lan_b"}
    # Nothing left running on the machines.
    for node in NICS:
        ps = bed.exec(node, "ps", "-eo", "comm=").stdout.split()
        assert not {"pepd", "satemu", "tcpdump"} & set(ps), (node, ps)


@needs_root
@needs_docker
@needs_ansible
def test_matrix_across_the_machines(bed, tmp_path):
    """A small matrix on the machines: the SSH-based clients (their sshd on
    its own port, the machine's sshd keeping 22), Saratoga and QUIC, without
    and with pepd, one cell at a time; every file intact."""
    if not bed.applied:
        pytest.fail(f"the site playbook did not apply: {tail(bed.first)}")
    exp = tmp_path / "machines.yaml"
    exp.write_text(yaml.safe_dump({
        "name": "machines", "repetitions": 1,
        "fixed": {"size": "256K", "direction": "download", "rtt": 100, "emulator": "userspace",
                  "captures": "none"},
        "axes": {"client": ["scp", "sftp", "rsync", "saratoga", "quic"], "pep": ["none", "pepd"]}}))
    out = os.path.join(bed.runs_dir, "matrix")
    cp = satbed("matrix", str(exp), "--backend", "ansible", "--inventory", bed.inventory, "--jobs", "2",
                "--out", out, timeout=60)
    assert cp.returncode == 2 and "one cell at a time" in cp.stderr, cp.stderr
    started = time.monotonic()
    cp = satbed("matrix", str(exp), "--backend", "ansible", "--inventory", bed.inventory, "--out", out,
                timeout=1200)
    print(f"10 cells in {time.monotonic() - started:.0f} s")
    assert cp.returncode == 0, (cp.stdout + cp.stderr)[-3000:]
    results = []
    for path in glob.glob(os.path.join(out, "cells", "*", "result.json")):
        with open(path, encoding="utf-8") as f:
            results.append(json.load(f))
    assert len(results) == 10
    for r in results:
        cell = (r["client"], r["pep"]["name"] if isinstance(r["pep"], dict) else r["pep"])
        assert r["integrity"] == "ok" and r["sha256"] == r["sha256_expected"], (cell, r.get("error"))
        print(cell, r.get("goodput_bps"), r.get("tcp_connect_ms"))
        if r["client"] == "quic":
            # Both ends' qlogs and the key log, written on the machines into
            # the shared run directory, as on namespaces.
            assert set(r["qlog"]) == {"client", "server"}, (cell, r.get("qlog"))
            assert r["keylog"] == "tls-keys.log" and r["congestion_control"] == "newreno", cell
    # Nothing left running: no PEP, emulator or capture, no run's sshd.
    for node in NICS:
        ps = bed.exec(node, "ps", "-eo", "args=").stdout.splitlines()
        assert not [a for a in ps if a.split()[0].rsplit("/", 1)[-1] in ("pepd", "satemu", "tcpdump", "satquic")
                    or "sshd_config" in a], (node, ps)


@needs_root
@needs_docker
@needs_ansible
def test_clean_reaches_the_machines(bed):
    """A run killed mid-transfer leaves pepd and its interception on the PEP
    machines (and satemu, tcpdump...); `satbed clean --backend ansible`
    stops all of it."""
    if not bed.applied:
        pytest.fail(f"the site playbook did not apply: {tail(bed.first)}")
    env = {**os.environ, "PYTHONPATH": REPO}
    run = subprocess.Popen(["/usr/bin/python3", "-m", "satbed", "run", "--backend", "ansible", "--inventory",
                            bed.inventory, "--client", "ftp", "--pep", "pepd", "--rtt", "200", "--rate", "2mbit",
                            "--size", "20M", "--out", bed.runs_dir], cwd=REPO, env=env, start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 420
        while "ncftpget" not in bed.exec("clientA", "ps", "-eo", "comm=").stdout.split():
            assert run.poll() is None and time.monotonic() < deadline, "the run did not reach its transfer"
            time.sleep(1)
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    left = {node: set(bed.exec(node, "ps", "-eo", "comm=").stdout.split()) & {"pepd", "satemu", "tcpdump"}
            for node in NICS}
    print("left by the killed run:", left)
    # pepd (detached by its adapter) and its interception outlive the run for sure.
    assert "pepd" in left["pepA"] and "pepd" in left["pepB"]
    assert "satbed_pep" in bed.exec("pepA", "nft", "list", "tables").stdout
    assert bed.exec("clientA", "sh", "-c", "ls /run/satbed").stdout.strip(), "no pid files left"
    cp = satbed("clean", "--backend", "ansible", "--inventory", bed.inventory, timeout=300)
    print(cp.stdout)
    assert cp.returncode == 0, cp.stderr
    for node in NICS:
        ps = set(bed.exec(node, "ps", "-eo", "comm=").stdout.split())
        assert not {"pepd", "satemu", "tcpdump", "vsftpd", "ncftpget"} & ps, (node, ps)
        assert bed.exec(node, "sh", "-c", "ls /run/satbed").stdout.strip() == "", node
    for pep in ("pepA", "pepB"):
        assert "satbed_pep" not in bed.exec(pep, "nft", "list", "tables").stdout
        assert "lookup 100" not in bed.exec(pep, "ip", "rule").stdout
    # Nothing more to do the second time.
    cp = satbed("clean", "--backend", "ansible", "--inventory", bed.inventory, timeout=300)
    assert cp.returncode == 0 and "process(es) stopped, " not in cp.stdout, cp.stdout


@needs_root
@needs_docker
@needs_ansible
def test_bad_inventories_say_one_line(bed, tmp_path):
    if not bed.applied:
        pytest.fail(f"the site playbook did not apply: {tail(bed.first)}")
    cases = {
        "no such file": (str(tmp_path / "missing.yml"), "no inventory file"),
        "no machine for a node": (_inventory_with(bed, str(tmp_path / "nodes.yml"),
                                                  pepB={"satbed_node": "nothing"}), "no machine for node pepB"),
        "unreachable": (_inventory_with(bed, str(tmp_path / "down.yml"),
                                        clientB={"ansible_host": "127.0.0.1", "ansible_port": 9}),
                        "clientB (127.0.0.1): unreachable over SSH"),
        "role missing": (_inventory_with(bed, str(tmp_path / "role.yml"),
                                         pepB={"ansible_host": bed.addresses["clientB"]}),
                         "pepB: role transparent_bridge, pep not applied"),
    }
    for case, (inventory, said) in cases.items():
        cp = satbed("run", "--backend", "ansible", "--inventory", inventory, "--client", "ping",
                    "--out", bed.runs_dir, timeout=120)
        lines = cp.stderr.strip().splitlines()
        assert cp.returncode == 2 and len(lines) == 1 and said in lines[0], (case, cp.stderr)
    # clean names a machine it cannot reach, after cleaning the others.
    cp = satbed("clean", "--backend", "ansible", "--inventory", cases["unreachable"][0], timeout=120)
    lines = cp.stderr.strip().splitlines()
    assert cp.returncode == 2 and len(lines) == 1 and "clean: clientB (127.0.0.1)" in lines[0], cp.stderr
