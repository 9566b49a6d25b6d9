"""The adapters for programs satbed does not ship: PEPsal and the SCPS
reference gateway; and pepd's health, which the harness asks for every two
seconds of a transfer.

Without the real programs, CI runs our stand-ins (tests/standins/), which
behave as the real ones do where the adapters depend on it: PEPsal exits 1
silently when the open-file limit it sets is refused, connects upstream
from the node's own address and ends a connection at its first FIN; the
SCPS gateway opens two taps, builds its bridges with brctl and ifconfig and
splits TCP (the tests assert the split: LAN-side handshake short, other
sequence numbers on the WAN, data intact by SHA-256). With
SATBED_PEPSAL_BIN / SATBED_SCPS_BIN pointing at real builds
(docs/peps/pepsal-scps.md), the last tests run them."""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import shutil
import subprocess
import time

import pytest

from satbed.backends import pepnodes
from satbed.backends.pepnodes import ProbeLeg, split_verdict
from satbed.core.settings import Settings
from satbed_testlib import REPO, needs_root, satbed

ADAPTERS = os.path.join(REPO, "pep", "adapters")
STANDINS = os.path.join(REPO, "tests", "standins")
PEPSAL_NOFILE = 1048576          # what upstream PEPsal sets RLIMIT_NOFILE's hard limit to
REAL_PEPSAL = os.environ.get("SATBED_PEPSAL_BIN", "")
REAL_SCPS = os.environ.get("SATBED_SCPS_BIN", "")
needs_real_pepsal = pytest.mark.skipif(not REAL_PEPSAL, reason="SATBED_PEPSAL_BIN does not point at a PEPsal build")
needs_real_scps = pytest.mark.skipif(not REAL_SCPS, reason="SATBED_SCPS_BIN does not point at an SCPS gateway build")
needs_tun = pytest.mark.skipif(not os.path.exists("/dev/net/tun"), reason="no /dev/net/tun here")
needs_brctl = pytest.mark.skipif(shutil.which("brctl") is None or shutil.which("ifconfig") is None,
                                 reason="brctl/ifconfig missing (bridge-utils, net-tools)")


def limit_refused() -> bool:
    """Whether this process may not raise its open-file hard limit to
    PEPsal's (as here: hard limit 20,000, no CAP_SYS_RESOURCE)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard >= PEPSAL_NOFILE:
        return False
    cp = subprocess.run(["sh", "-c", f"ulimit -Hn {PEPSAL_NOFILE}"], capture_output=True)
    return cp.returncode != 0


def wrapper(tmp_path, name: str, program: str, **env: str) -> str:
    """An executable that runs PROGRAM with ENV added (the adapter passes
    only its own variables on)."""
    path = tmp_path / name
    sets = " ".join(f"{k}={v}" for k, v in env.items())
    path.write_text(f'#!/bin/sh\n{sets} exec {program} "$@"\n')
    path.chmod(0o755)
    return str(path)


def adapter(name: str, verb: str, tmp_path, private_netns: bool = False, netns: str | None = None,
            **env) -> subprocess.CompletedProcess:
    """Run an adapter verb; private_netns: in a network namespace of its own
    (a start that gets far must not touch the machine's); netns: in that
    named one (ip netns exec mounts its sysfs). env may narrow PATH: the
    wrappers are found on the full one."""
    full = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SATBED_PEP_LAN": "lan0", "SATBED_PEP_WAN": "wan0",
            "SATBED_PEP_BRIDGE": "br0", "SATBED_STATE_DIR": str(tmp_path), "SATBED_RATE_BPS": "8000000",
            "SATBED_RTT_MS": "600", "SATBED_BER": "1e-5", "SATBED_PEP_ADDR": "10.99.99.3/24", **env}
    prefix = ([shutil.which("unshare"), "-n"] if private_netns else
              [shutil.which("ip"), "netns", "exec", netns] if netns else [])
    return subprocess.run([*prefix, os.path.join(ADAPTERS, name), verb], capture_output=True, text=True,
                          env=full, timeout=60)


def one_line(cp: subprocess.CompletedProcess) -> str:
    lines = cp.stderr.strip().splitlines()
    assert cp.returncode == 1 and len(lines) == 1, cp.stderr
    return lines[0]


def rfile(cp: subprocess.CompletedProcess) -> dict[str, str]:
    assert cp.returncode == 0, cp.stderr
    return dict(line.split() for line in cp.stdout.splitlines() if line and not line.startswith("#"))


def run_result(cp: subprocess.CompletedProcess) -> tuple[str, dict, dict]:
    """(run directory, summary line, result.json) of a successful run."""
    assert cp.returncode == 0, cp.stderr
    lines = cp.stdout.strip().splitlines()
    with open(os.path.join(lines[0], "result.json"), encoding="utf-8") as f:
        return lines[0], json.loads(lines[-1]), json.load(f)


def syn_seqs(pcap: str, src: str) -> set[int]:
    """Initial sequence numbers of the SYNs from src in a capture."""
    out = subprocess.run(["tcpdump", "-nn", "-S", "-r", pcap, f"src host {src} and tcp[tcpflags] & tcp-syn != 0 "
                          "and tcp[tcpflags] & tcp-ack == 0"], capture_output=True, text=True).stdout
    return {int(m) for m in re.findall(r"Flags \[S[^\]]*\], seq (\d+)", out)}


def syns_from(pcap: str, src: str) -> int:
    out = subprocess.run(["tcpdump", "-nn", "-r", pcap, f"src host {src} and tcp[tcpflags] & tcp-syn != 0 "
                          "and tcp[tcpflags] & tcp-ack == 0"], capture_output=True, text=True).stdout
    return len(out.splitlines())


# ------------------------------------------------------------ no root needed

def test_pepsal_without_binary_says_what_to_provide(tmp_path):
    line = one_line(adapter("pepsal", "start", tmp_path, SATBED_BIN_DIR=str(tmp_path)))
    assert "pep/images/pepsal/pepsal" in line and "bin=" in line
    stats = json.loads(adapter("pepsal", "stats", tmp_path).stdout)
    assert stats["name"] == "pepsal" and stats["running"] is False and stats["connections_split"] == 0
    assert adapter("pepsal", "stop", tmp_path).returncode == 0


@pytest.mark.parametrize("opts,error", [("bogus=1", "unknown option 'bogus'"),
                                        ("max_conns=5", "outside 128..25000"),
                                        ("nodelay=yes", "takes 0 or 1"),
                                        ("intercept=wan", "takes both or lan"),
                                        ("addr=10.99.99.3", "needs a prefix length")])
def test_pepsal_rejects_bad_options(tmp_path, opts, error):
    assert error in one_line(adapter("pepsal", "start", tmp_path,
                                     SATBED_PEP_OPTS=f"bin={STANDINS}/pepsal {opts}"))


def test_pepsal_needs_an_address_for_the_node(tmp_path):
    line = one_line(adapter("pepsal", "start", tmp_path, SATBED_PEP_ADDR="",
                            SATBED_PEP_OPTS=f"bin={STANDINS}/pepsal"))
    assert "own address" in line and "addr=" in line


@pytest.mark.skipif(not limit_refused(), reason="this machine lets PEPsal raise its open-file hard limit")
@pytest.mark.parametrize("logging,expect", [("0", "empty log"), ("1", "[ERROR]: Failed to set new ressources limits")])
def test_pepsal_names_the_refused_open_file_limit(tmp_path, logging, expect):
    # Upstream PEPsal exits 1 at once here; the stand-in does the same.
    bin_ = wrapper(tmp_path, "pepsal", f"{STANDINS}/pepsal", STANDIN_STDERR_LOGGING=logging)
    line = one_line(adapter("pepsal", "start", tmp_path, SATBED_PEP_OPTS=f"bin={bin_}"))
    assert expect in line and "(status 1)" in line
    assert f"hard limit is {resource.getrlimit(resource.RLIMIT_NOFILE)[1]}" in line and "1048576" in line
    assert not os.path.exists(tmp_path / "pepsal.pid")


def test_scps_rfile_from_the_link(tmp_path):
    rf = rfile(adapter("scps", "rfile", tmp_path, SATBED_BER="0"))
    assert rf["AIF_NAME"] == "lan0" and rf["BIF_NAME"] == "wan0"
    assert rf["BIF_RATE"] == "8000000"
    assert rf["BIF_BUF"] == str(2 * 8_000_000 // 8 * 600 // 1000)     # 2 x BDP = 1.2 MB
    assert rf["BIF_MINRTO"] == "600000"                               # RTT in microseconds
    # scpstp.h: 0 none (rate control only), 1 Van Jacobson, 2 Vegas, 3 flow control.
    assert rf["BIF_CC"] == "0" and rf["AIF_CC"] == "1" and rf["AIF_TCPONLY"] == "1"
    # Bit errors: 8 x BDP, as pepd sizes its WAN buffers.
    assert rfile(adapter("scps", "rfile", tmp_path))["BIF_BUF"] == str(8 * 8_000_000 // 8 * 600 // 1000)
    rf = rfile(adapter("scps", "rfile", tmp_path, SATBED_PEP_OPTS="cc=2 buffer_factor=4", SATBED_RTT_MS="0"))
    assert rf["BIF_CC"] == "2" and rf["BIF_MINRTO"] == "200000" and rf["BIF_BUF"] == "65536"
    assert "3 (flow control)" in one_line(adapter("scps", "rfile", tmp_path, SATBED_PEP_OPTS="cc=4"))
    assert "unknown option 'keep_bridge'" in one_line(
        adapter("scps", "rfile", tmp_path, SATBED_PEP_OPTS="keep_bridge=1"))
    line = one_line(adapter("scps", "start", tmp_path, SATBED_BIN_DIR=str(tmp_path)))
    assert "pep/images/scps/gateway" in line


def test_scps_names_a_missing_brctl(tmp_path):
    # A PATH with everything the adapter uses but brctl.
    tools = tmp_path / "tools"
    tools.mkdir()
    for t in ("sh", "cat", "sed", "awk", "od", "tr", "grep", "dirname", "ip", "ifconfig", "mv", "rm", "mkdir"):
        where = shutil.which(t)
        if where:
            os.symlink(where, tools / t)
    line = one_line(adapter("scps", "start", tmp_path, PATH=str(tools),
                            SATBED_PEP_OPTS=f"bin={STANDINS}/scps-gateway"))
    assert "brctl" in line and "bridge-utils" in line


@needs_tun
@needs_brctl
def test_scps_refuses_a_64_bit_build(tmp_path):
    fake = tmp_path / "gateway"
    shutil.copy("/bin/true", fake)       # any 64-bit ELF
    line = one_line(adapter("scps", "start", tmp_path, SATBED_PEP_OPTS=f"bin={fake}"))
    assert "64-bit build" in line and "-m32" in line


# The optional `available` verb (pep/CONTRACT.md): 0 where the PEP can run
# here, else one line naming what is missing; an unknown verb exits 64.

def test_scps_available_names_the_missing_gateway(tmp_path):
    # No option, no $SATBED_SCPS_BIN, nothing on PATH or in SATBED_BIN_DIR.
    cp = adapter("scps", "available", tmp_path, SATBED_BIN_DIR=str(tmp_path))
    line = one_line(cp)
    assert line.startswith("scps: no SCPS gateway binary") and "SATBED_SCPS_BIN" not in cp.stdout
    assert "bin/scps-gateway" in line and "bin=/path/to/gateway" in line
    assert not os.listdir(tmp_path)             # asked, nothing started or written
    not_x = tmp_path / "gateway"
    not_x.write_text("")
    assert "is not executable" in one_line(adapter("scps", "available", tmp_path, SATBED_SCPS_BIN=str(not_x)))


@needs_tun
@needs_brctl
def test_scps_available_with_a_gateway_found_as_start_finds_it(tmp_path):
    # The CI stand-in as the lab's gateway, by each of the four ways start finds one.
    standin = f"{STANDINS}/scps-gateway"
    on_path = tmp_path / "path"
    on_path.mkdir()
    os.symlink(standin, on_path / "scps-gateway")
    in_bin = tmp_path / "bin"
    in_bin.mkdir()
    os.symlink(standin, in_bin / "scps-gateway")
    for env in ({"SATBED_PEP_OPTS": f"bin={standin}"}, {"SATBED_SCPS_BIN": standin},
                {"PATH": f"{on_path}:/usr/sbin:/usr/bin:/sbin:/bin"}, {"SATBED_BIN_DIR": str(in_bin)}):
        cp = adapter("scps", "available", tmp_path, **env)
        assert cp.returncode == 0 and cp.stderr == "", (env, cp.stderr)
    # What the TAP build needs is checked as start checks it: a 64-bit build is refused.
    fake = tmp_path / "gateway64"
    shutil.copy("/bin/true", fake)
    assert "64-bit build" in one_line(adapter("scps", "available", tmp_path, SATBED_SCPS_BIN=str(fake)))


def test_scps_available_names_a_missing_brctl(tmp_path):
    tools = tmp_path / "tools"
    tools.mkdir()
    for t in ("sh", "cat", "sed", "awk", "od", "tr", "grep", "dirname", "ifconfig"):
        where = shutil.which(t)
        if where:
            os.symlink(where, tools / t)
    line = one_line(adapter("scps", "available", tmp_path, PATH=str(tools), SATBED_SCPS_BIN=f"{STANDINS}/scps-gateway"))
    assert "brctl" in line and "bridge-utils" in line


def test_the_other_adapters_answer_available(tmp_path):
    assert adapter("none", "available", tmp_path).returncode == 0
    line = one_line(adapter("pepd", "available", tmp_path, SATBED_BIN_DIR=str(tmp_path)))
    assert f"{tmp_path}/pepd" in line and "go build" in line
    fake = tmp_path / "pepd"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert adapter("pepd", "available", tmp_path, SATBED_BIN_DIR=str(tmp_path)).returncode == 0
    assert "no pepsal binary" in one_line(adapter("pepsal", "available", tmp_path, SATBED_BIN_DIR=str(tmp_path)))
    cp = adapter("pepsal", "available", tmp_path, SATBED_PEPSAL_BIN=f"{STANDINS}/pepsal")
    assert cp.returncode == 0 and cp.stderr == "", cp.stderr
    for name in ("none", "pepd", "pepsal", "scps"):
        cp = adapter(name, "no-such-verb", tmp_path)
        assert cp.returncode == 64 and cp.stderr.startswith("usage:"), (name, cp.returncode, cp.stderr)


PEPD_STATS = {"name": "pepd", "connections_split": 8, "connections_active": 3, "running": True, "listening": True,
              "options": {"port": "5100"}}


@pytest.mark.parametrize("case, exit_status, says", [
    ("healthy", 0, "pepd healthy: pid {pid}, 3 active, 8 split"),
    ("full", 0, "pepd healthy: pid {pid}, 3 active, 8 split, full: new connections pass unsplit"),
    ("shutting down", 1, "pepd shutting down"),
    ("no stats", 1, "pepd running (pid {pid}) but no stats yet"),
    ("pid without a newline", 0, "pepd healthy: pid {pid}, 3 active, 8 split"),
    ("dead", 1, "pepd not running"),
    ("no pid file", 1, "pepd not running"),
])
def test_pepd_health_answers_with_no_program_but_find(tmp_path, case, exit_status, says):
    """The harness asks every PEP's adapter for its health every 5 s of a
    transfer; each program an adapter starts costs about 2 ms of CPU on a
    small VM (13 a call were a tenth of a Global Hawk cell's CPU). With only
    `find` on PATH, pepd's health still says the right thing in each case."""
    state = tmp_path / "state"
    state.mkdir()
    tools = tmp_path / "tools"
    tools.mkdir()
    os.symlink(shutil.which("find"), tools / "find")
    stats = dict(PEPD_STATS, running=case != "shutting down", listening=case != "full")
    if case != "no stats":
        (state / "stats.json").write_text(json.dumps(stats, separators=(",", ":")) + "\n")
    daemon = subprocess.Popen(["sleep", "60"])
    try:
        if case == "dead":
            daemon.kill()
            daemon.wait()
        if case != "no pid file":
            (state / "pepd.pid").write_text(f"{daemon.pid}" + ("" if case == "pid without a newline" else "\n"))
        cp = adapter("pepd", "health", state, PATH=str(tools))
    finally:
        daemon.kill()
        daemon.wait()
    assert (cp.returncode, cp.stdout.strip(), cp.stderr) == (exit_status, says.format(pid=daemon.pid), "")


def test_pepd_health_names_stale_stats(tmp_path):
    (tmp_path / "stats.json").write_text(json.dumps(PEPD_STATS) + "\n")
    old = os.stat(tmp_path / "stats.json").st_mtime - 30
    os.utime(tmp_path / "stats.json", (old, old))
    with subprocess.Popen(["sleep", "60"]) as daemon:
        (tmp_path / "pepd.pid").write_text(f"{daemon.pid}\n")
        cp = adapter("pepd", "health", tmp_path)
        daemon.kill()
    assert cp.returncode == 1 and re.fullmatch(r"pepd stats stale \((30|31)s old\); daemon stuck\?", cp.stdout.strip()), cp


@contextlib.contextmanager
def netns(name: str):
    subprocess.run(["ip", "netns", "add", name], check=True, timeout=30)
    try:
        yield lambda *cmd: subprocess.run(["ip", "netns", "exec", name, *cmd], check=True, timeout=30)
    finally:
        subprocess.run(["ip", "netns", "del", name], timeout=30)


@needs_root
@pytest.mark.parametrize("case,exit_status,says", [
    ("healthy", 0, "pepsal healthy: pid {pid}, listening on 5000, connecting from 10.99.99.3/24"),
    ("not listening", 1, "pepsal running (pid {pid}) but not listening on 5000"),
    ("rules gone", 1, "pepsal running but its interception rules are gone"),
    ("dead", 1, "pepsal not running"),
])
def test_pepsal_health_starts_nothing_but_nft(tmp_path, case, exit_status, says):
    """Like pepd's: PEPsal's health, asked every 5 s, reads the listener from
    /proc/net/tcp itself; nft, which it needs for the rules, is all it may
    start."""
    tools = tmp_path / "tools"
    tools.mkdir()
    os.symlink(shutil.which("nft"), tools / "nft")
    (tmp_path / "pepsal.addr").write_text("10.99.99.3/24\n")
    listen = "import socket, time; s = socket.socket(); s.bind(('0.0.0.0', 5000)); s.listen(); time.sleep(60)"
    ns = f"sbh-pepsal-{os.getpid()}"
    with netns(ns) as run:
        if case != "rules gone":
            run("nft", "add", "table", "ip", "satbed_pep")
        program = ["sleep", "60"] if case == "not listening" else ["/usr/bin/python3", "-c", listen]
        daemon = subprocess.Popen(["ip", "netns", "exec", ns, *program])
        try:
            if case == "dead":
                daemon.kill()
                daemon.wait()
            elif case != "not listening":
                for _ in range(100):  # until the listener is up
                    if b":1388 00000000:0000 0A" in subprocess.run(
                            ["ip", "netns", "exec", ns, "cat", "/proc/net/tcp"], capture_output=True).stdout:
                        break
                    time.sleep(0.05)
            (tmp_path / "pepsal.pid").write_text(f"{daemon.pid}\n")
            cp = adapter("pepsal", "health", tmp_path, netns=ns, PATH=str(tools))
        finally:
            daemon.kill()
            daemon.wait()
    assert (cp.returncode, cp.stdout.strip(), cp.stderr) == (exit_status, says.format(pid=daemon.pid), "")


@needs_root
@needs_tun
@pytest.mark.parametrize("case,exit_status,says", [
    ("healthy", 0, "SCPS gateway healthy: pid {pid}, bridges aif (lan0) and bif (wan0) up"),
    ("bridge down", 1, "SCPS gateway running (pid {pid}) but its bridges aif/bif are not intact"),
    ("port unbridged", 1, "SCPS gateway running (pid {pid}) but its bridges aif/bif are not intact"),
    ("no tap", 1, "SCPS gateway running (pid {pid}) but its bridges aif/bif are not intact"),
    ("dead", 1, "SCPS gateway not running"),
])
def test_scps_health_starts_no_program(tmp_path, case, exit_status, says):
    """The SCPS gateway's health, asked every 5 s, reads its bridges, their
    ports and flags from sysfs with shell builtins: with nothing on PATH it
    still tells a built bridge pair from a broken one."""
    tools = tmp_path / "tools"
    tools.mkdir()
    if case == "dead":  # a gateway that is gone may cost a grep of its log for why
        os.symlink(shutil.which("grep"), tools / "grep")
    ns = f"sbh-scps-{os.getpid()}"
    with netns(ns) as run:
        for bridge, port, tap in (("aif", "lan0", "tapa"), ("bif", "wan0", "tapb")):
            run("ip", "link", "add", bridge, "type", "bridge")
            run("ip", "link", "add", port, "type", "veth", "peer", "name", port + "p")
            if not (case == "no tap" and bridge == "bif"):
                run("ip", "tuntap", "add", "dev", tap, "mode", "tap")
                run("ip", "link", "set", tap, "master", bridge)
            if not (case == "port unbridged" and bridge == "aif"):
                run("ip", "link", "set", port, "master", bridge)
            if not (case == "bridge down" and bridge == "bif"):
                run("ip", "link", "set", bridge, "up")
        with subprocess.Popen(["sleep", "60"]) as daemon:
            if case == "dead":
                daemon.kill()
                daemon.wait()
            (tmp_path / "scps.pid").write_text(f"{daemon.pid}\n")
            cp = adapter("scps", "health", tmp_path, netns=ns, PATH=str(tools))
            daemon.kill()
    assert (cp.returncode, cp.stdout.strip(), cp.stderr) == (exit_status, says.format(pid=daemon.pid), "")


def test_pepnodes_available_asks_the_adapter_with_the_contract_minimum(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
    none = Settings.from_environ({})
    why = pepnodes.available("scps", "", none)
    assert why.startswith("scps: no SCPS gateway binary") and "\n" not in why
    if os.path.exists("/dev/net/tun") and shutil.which("brctl") and shutil.which("ifconfig"):
        assert pepnodes.available("scps", "", Settings.from_environ(
            {"SATBED_SCPS_BIN": f"{STANDINS}/scps-gateway"})) == ""
        assert pepnodes.available("scps", f"bin={STANDINS}/scps-gateway", none) == ""
    # An adapter without the verb counts as available; one that says no, as not.
    said = {}
    for code in (64, 2, 1, 0):
        script = tmp_path / f"adapter{code}"
        script.write_text(f"#!/bin/sh\necho 'lab: no lab gateway here' >&2\nexit {code}\n")
        script.chmod(0o755)
        monkeypatch.setattr(pepnodes, "check", lambda name, script=script: str(script))
        said[code] = pepnodes.available("lab", "", none)
    assert said == {64: "", 2: "", 1: "lab: no lab gateway here", 0: ""}


def test_scps_options_for_the_global_hawk_study(tmp_path):
    """The study's gateway: 10 Mbit/s, minimum RTO 800 ms, a 2,000,000-byte
    window, whatever the emulated link's RTT and BER (here 600 ms, 1e-5)."""
    rf = rfile(adapter("scps", "rfile", tmp_path,
                       SATBED_PEP_OPTS="rate=10000000 rtt_ms=800 minrto_us=800000 buf=2000000"))
    assert rf["BIF_RATE"] == "10000000" and rf["BIF_MINRTO"] == "800000"
    assert rf["BIF_BUF"] == rf["AIF_BUF"] == "2000000"
    # rtt_ms alone sizes the minimum RTO and the buffers (2 x BDP at BER 0) for that RTT.
    rf = rfile(adapter("scps", "rfile", tmp_path, SATBED_PEP_OPTS="rtt_ms=800", SATBED_BER="0",
                       SATBED_RTT_MS="0", SATBED_RATE_BPS="10000000"))
    assert rf["BIF_MINRTO"] == "800000" and rf["BIF_BUF"] == str(2 * 10_000_000 // 8 * 800 // 1000)
    assert "rtt_ms=80x" in one_line(adapter("scps", "rfile", tmp_path, SATBED_PEP_OPTS="rtt_ms=80x"))


THROUGH = ProbeLeg("10.99.99.2", "10.99.99.254", 7702, {"connected": True, "connect_ms": 0.1},
                   {"accepted": True, "peer": "10.99.99.2"})
STUCK = ProbeLeg("10.99.99.2", "10.99.99.254", 7702, {"connected": True, "connect_ms": 0.1},
                 {"accepted": False})
REFUSED = ProbeLeg("10.99.99.254", "10.99.99.2", 7703, {"connected": False, "error": "timed out"},
                   {"accepted": False})


@pytest.mark.parametrize("legs,counts,health,expect", [
    # Through both ways and counted by every splitting PEP: proven.
    ([THROUGH], {"PEP pepd on pepA": (True, 3, 5)}, {}, ""),
    # A plain bridge counts nothing and need not.
    ([THROUGH], {"PEP none on pepA": (False, 0, 0)}, {}, ""),
    # Through, but one PEP never split it: bridged past it, not proven.
    ([THROUGH], {"PEP scps on pepA": (True, 0, 2), "PEP scps on pepB": (True, 4, 4)},
     {"PEP scps on pepB": "SCPS gateway healthy"},
     "PEP scps on pepB did not split either probe connection (connections_split stayed 4)"),
    # Split at A, never reached B (PEPsal connecting from an address B cannot answer).
    ([STUCK], {"PEP pepsal on pepA": (True, 0, 1)}, {},
     "10.99.99.2 -> 10.99.99.254:7702 did not get through in 16 s (connected in 0.1 ms but the far side "
     "never took it)"),
    ([REFUSED], {}, {}, "10.99.99.254 -> 10.99.99.2:7703 did not get through in 16 s (timed out)"),
    # A lab's PEP whose stats lack the count is not taken on trust.
    ([THROUGH], {"PEP lab/pep:1 on pepA": (True, None, None)}, {}, "says it splits but its stats have no"),
])
def test_split_verdict(legs, counts, health, expect):
    verdict = split_verdict(legs, counts, health, 16)
    assert "\n" not in verdict
    if not expect:
        assert verdict == ""
    else:
        assert verdict.startswith("the PEPs are not proven in the path: ") and expect in verdict, verdict
        for label, line in health.items():
            assert f"{label}: {line}" in verdict


# ------------------------------------------------------------ namespaces (root)

@needs_root
def test_pepsal_split_at_both_ends_from_the_nodes_addresses(tmp_path):
    # The stand-in as patched to warn about the limit (like the local build
    # this machine needs, docs/peps/pepsal-scps.md).
    bin_ = wrapper(tmp_path, "pepsal", f"{STANDINS}/pepsal", STANDIN_LIMIT="warn")
    cp = satbed("run", "--pep", "pepsal", "--client", "scp", "--size", "2M", "--rtt", "100", "--no-analysis",
                "--out", str(tmp_path / "runs"), env={"SATBED_PEPSAL_BIN": bin_}, timeout=600)
    run_dir, summary, result = run_result(cp)
    assert summary["integrity"] == "ok"
    nodes = result["pep"]["nodes"]
    # Client A's SYN is split at PEP A (from the LAN port), PEP A's own
    # upstream SYN at PEP B (from the WAN port): both directions are split.
    assert nodes["pepA"]["syns_from_lan"] >= 1 and nodes["pepB"]["syns_from_wan"] >= 1, nodes
    assert nodes["pepA"]["address"] == "10.99.99.3/24" and nodes["pepB"]["address"] == "10.99.99.253/24"
    assert nodes["pepA"]["bytes_wan_to_lan"] > 2_000_000 and nodes["pepB"]["bytes_lan_to_wan"] > 2_000_000
    # The satellite leg runs PEP A -> PEP B; the server sees PEP B's address.
    caps = os.path.join(run_dir, "captures")
    assert syns_from(f"{caps}/wan_a.pcap", "10.99.99.3") >= 1
    assert syns_from(f"{caps}/lan_b.pcap", "10.99.99.253") >= 1
    assert syns_from(f"{caps}/wan_a.pcap", "10.99.99.2") == 0
    # The split proof: each PEP counted its own upstream SYNs, and PEP A
    # answered Client A's handshake itself (well under the 100 ms link).
    proof = result["split_proof"]
    assert all(after > before for before, after in proof["connections_split"].values()), proof
    assert proof["legs"][0]["connect_ms"] < 50 and proof["legs"][0]["peer_seen_by_server"] == "10.99.99.253"


@needs_root
def test_a_pep_not_in_the_path_fails_start_in_one_line(tmp_path):
    # A PEPsal given an address nobody can answer (a lab's typo): it starts,
    # listens and takes Client A's connection, but its upstream SYN leaves
    # from 192.0.2.3 and never gets an answer. Start must not return as if
    # the PEP were in the path: the split proof names what happened.
    bin_ = wrapper(tmp_path, "pepsal", f"{STANDINS}/pepsal", STANDIN_LIMIT="warn")
    cp = satbed("run", "--pep", "pepsal", "--pep-options", "addr=192.0.2.3/24", "--client", "scp", "--size", "1M",
                "--rtt", "100", "--no-analysis", "--out", str(tmp_path / "runs"),
                env={"SATBED_PEPSAL_BIN": bin_}, timeout=600)
    assert cp.returncode != 0
    last = cp.stderr.strip().splitlines()[-1]
    assert "the PEPs are not proven in the path" in last and "did not get through" in last, last
    assert "Traceback" not in cp.stderr


@needs_root
def test_pepsal_refused_limit_fails_the_run_in_one_line(tmp_path):
    if not limit_refused():
        pytest.skip("this machine lets PEPsal raise its open-file hard limit")
    cp = satbed("run", "--pep", "pepsal", "--client", "ping", "--no-analysis", "--out", str(tmp_path / "runs"),
                env={"SATBED_PEPSAL_BIN": f"{STANDINS}/pepsal"}, timeout=300)
    assert cp.returncode != 0
    last = cp.stderr.strip().splitlines()[-1]
    assert "pepsal exited during startup (status 1)" in last and "cannot be raised" in last


@needs_root
@needs_tun
@needs_brctl
def test_scps_gateway_bridges_and_is_counted(tmp_path):
    cp = satbed("run", "--pep", "scps", "--client", "scp", "--size", "2M", "--rtt", "100", "--no-analysis",
                "--out", str(tmp_path / "runs"), env={"SATBED_SCPS_BIN": f"{STANDINS}/scps-gateway"},
                timeout=600)
    run_dir, summary, result = run_result(cp)
    assert summary["integrity"] == "ok" and result["sha256"] == result["sha256_expected"]
    nodes = result["pep"]["nodes"]
    assert all(n["running"] is True and n["connections_split"] >= 1 for n in nodes.values()), nodes
    # The stand-in's SYNs leave its taps as the real gateway's do: counted.
    assert all(after > before for before, after in result["split_proof"]["connections_split"].values())
    # And it splits, as the real gateway does: each end host's handshake is
    # answered by its own gateway, well inside the 100 ms link ...
    assert summary["tcp_connect_ms"] < 50, summary
    assert all(leg["connect_ms"] < 50 for leg in result["split_proof"]["legs"]), result["split_proof"]
    # ... and the SYNs crossing the satellite link are the gateway's own:
    # same addresses, other initial sequence numbers.
    caps = os.path.join(run_dir, "captures")
    lan, wan = syn_seqs(f"{caps}/lan_a.pcap", "10.99.99.2"), syn_seqs(f"{caps}/wan_a.pcap", "10.99.99.2")
    assert lan and wan and not lan & wan, (lan, wan)
    assert nodes["pepA"]["bytes_wan_to_lan"] > 2_000_000
    with open(os.path.join(run_dir, "pep", "pepA", "scps.log"), encoding="utf-8") as f:
        log = f.read()
    assert "brctl addif aif" in log and "brctl delbr bif" in log      # built, and removed on stop


@needs_root
@needs_tun
@needs_brctl
def test_a_pep_that_dies_is_named_as_the_failure(tmp_path):
    bin_ = wrapper(tmp_path, "gateway", f"{STANDINS}/scps-gateway", STANDIN_DIE_AFTER="3")
    cp = satbed("run", "--pep", "scps", "--client", "scp", "--size", "20M", "--rtt", "600", "--no-analysis",
                "--out", str(tmp_path / "runs"), env={"SATBED_SCPS_BIN": bin_}, timeout=600)
    assert cp.returncode != 0
    last = cp.stderr.strip().splitlines()[-1]
    assert "PEP scps on pepA is down" in last and "SCPS gateway not running" in last, last


# ------------------------------------------------------------ the real programs

def _real_run(tmp_path, pep: str, env: dict[str, str], ber: str = "0") -> tuple[str, dict, dict]:
    cp = satbed("run", "--pep", pep, "--client", "scp", "--size", "2M", "--rtt", "600", "--ber", ber,
                "--out", str(tmp_path / "runs"), env=env, timeout=900)
    if cp.returncode != 0 and "cannot be raised" in cp.stderr:
        pytest.skip(f"this build cannot start here: {cp.stderr.strip().splitlines()[-1]}")
    return run_result(cp)


@needs_root
@needs_real_pepsal
def test_real_pepsal_splits_both_ways(tmp_path):
    run_dir, summary, result = _real_run(tmp_path, "pepsal", {"SATBED_PEPSAL_BIN": REAL_PEPSAL})
    assert summary["integrity"] == "ok"
    assert summary["tcp_connect_ms"] < 100          # answered by PEP A, not across 600 ms
    nodes = result["pep"]["nodes"]
    assert nodes["pepA"]["syns_from_lan"] >= 1 and nodes["pepB"]["syns_from_wan"] >= 1
    assert syns_from(os.path.join(run_dir, "captures", "lan_b.pcap"), "10.99.99.253") >= 1
    assert_split_proven(result)


def assert_split_proven(result: dict) -> None:
    """Both real programs split the probe: counted by both PEPs, and each end
    host's handshake answered by its own PEP, not across the 600 ms link."""
    proof = result["split_proof"]
    assert set(proof["connections_split"]) == {"pepA", "pepB"}
    assert all(after > before for before, after in proof["connections_split"].values()), proof
    assert all(leg["connect_ms"] < 100 for leg in proof["legs"]), proof


@needs_root
@needs_real_pepsal
def test_real_pepsal_refused_limit_is_one_line(tmp_path):
    if not limit_refused():
        pytest.skip("this machine lets PEPsal raise its open-file hard limit")
    cp = adapter("pepsal", "start", tmp_path, private_netns=True, SATBED_PEP_OPTS=f"bin={REAL_PEPSAL}")
    if "exited during startup" not in cp.stderr:
        pytest.skip(f"{REAL_PEPSAL} starts under a refused limit (a build without the fatal limit): "
                    f"{cp.stderr.strip()}")
    line = one_line(cp)
    assert "(status 1)" in line and "cannot be raised" in line


@needs_root
@needs_real_scps
@needs_tun
@pytest.mark.parametrize("ber", ["0", "1e-5"])
def test_real_scps_gateway_splits(tmp_path, ber):
    run_dir, summary, result = _real_run(tmp_path, "scps", {"SATBED_SCPS_BIN": REAL_SCPS}, ber)
    assert summary["integrity"] == "ok"
    assert summary["tcp_connect_ms"] < 100
    nodes = result["pep"]["nodes"]
    assert nodes["pepA"]["syns_from_lan"] >= 1 and nodes["pepB"]["syns_from_wan"] >= 1
    assert nodes["pepA"]["bytes_wan_to_lan"] > 2_000_000
    assert_split_proven(result)
    caps = os.path.join(run_dir, "captures")
    lan, wan = syn_seqs(f"{caps}/lan_a.pcap", "10.99.99.2"), syn_seqs(f"{caps}/wan_a.pcap", "10.99.99.2")
    assert lan and wan and not lan & wan, (lan, wan)
