"""Every transfer client of the Global Hawk matrix on real namespaces: files
cross the testbed intact, interactive echo takes about one RTT, and a missing
tool, a server that never starts or a stalled transfer end in one clear
error within a bound."""

from __future__ import annotations

import json
import hashlib
import os
import select
import subprocess
import sys
import time

import pytest

from satbed_testlib import REPO, needs_root, satbed

SATEMU = os.path.join(REPO, "bin", "satemu")
SARATOGA = os.path.join(REPO, "bin", "saratoga")
RTT_MS = 100
SIZE = "2M"
SIZE_BYTES = 2 << 20

# (client, direction): every client once, both directions for ftp and scp.
TRANSFERS = [("ftp", "download"), ("ftp", "upload"), ("scp", "download"), ("scp", "upload"),
             ("sftp", "download"), ("rsync", "upload"), ("wget", "download"), ("nuttcp-tcp", "download"),
             ("tcp", "download"), ("tcp", "upload"),
             ("saratoga", "download")]
BASELINES = [("nuttcp-udp", "download"), ("iperf3", "upload")]
INTERACTIVE = [("telnet", "download"), ("ssh", "download")]
CASES = TRANSFERS + BASELINES + INTERACTIVE


@pytest.fixture(scope="module")
def rtt_runs(tmp_path_factory):
    """Every case at 100 ms RTT on one testbed (userspace emulator, no PEP),
    one after the other: a testbed per case would cost more than the runs.
    Yields {case: (run_dir, result or the error)}; after each run nothing the
    client started may be left in either host's namespace."""
    if os.geteuid() != 0:
        pytest.skip("needs root for network namespaces")
    if not os.access(SATEMU, os.X_OK):
        pytest.skip(f"{SATEMU} is absent (run `make build`): the {RTT_MS} ms RTT tests need the userspace emulator")
    from satbed.backends import clients, emulation, records
    from satbed.model import topology
    from satbed.backends.clients.base import ClientContext
    from satbed.model.link import LinkConfig
    from satbed.core.errors import SatbedError
    from satbed.backends.testbed import running

    out = tmp_path_factory.mktemp("rtt")
    link = LinkConfig.symmetric(rtt_ms=RTT_MS, backend="userspace")
    runs: dict = {}
    with running(topology.load("globalhawk"), bridge_kinds=("pep", "bridge")) as tb:
        emu = emulation.make(tb.transparent("emulator")[0], link, str(out / "emulator"))
        emu.start()
        try:
            ground, aircraft = tb.host("clientA"), tb.host("clientB")
            for client, direction in CASES:
                if client == "saratoga" and not os.access(SARATOGA, os.X_OK):
                    continue
                run_dir = str(out / f"{client}-{direction}")
                ctx = ClientContext(ground=ground, aircraft=aircraft, direction=direction, size_bytes=SIZE_BYTES,
                                    run_dir=run_dir, rate_bps=link.rate_bps, rtt_ms=RTT_MS)
                try:
                    runs[(client, direction)] = (run_dir, clients.get(client).run(ctx))
                except SatbedError as e:
                    runs[(client, direction)] = (run_dir, e)
                for host in (ground, aircraft):
                    left = [p for p in records.processes_in_netns({tb.record.netns[host.name]}) if p != host.pid]
                    assert left == [], f"{client}: left running in {host.name}: {_cmdlines(left)}"
        finally:
            emu.stop()
    yield runs


def _cmdlines(pids: list[int]) -> list[str]:
    names = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                names.append(f.read().replace(b"\0", b" ").decode(errors="replace").strip())
        except OSError:
            pass
    return names


def result_of(rtt_runs: dict, case: tuple[str, str]) -> tuple[str, dict]:
    if case not in rtt_runs:
        pytest.skip(f"{SARATOGA} is absent (run `make build`)")
    run_dir, r = rtt_runs[case]
    if isinstance(r, Exception):
        pytest.fail(f"{case[0]} {case[1]}: {r}")
    return run_dir, r


def cli_result(cp: subprocess.CompletedProcess) -> tuple[str, dict]:
    assert cp.returncode == 0, cp.stderr
    run_dir = cp.stdout.splitlines()[0]
    with open(os.path.join(run_dir, "result.json"), encoding="utf-8") as f:
        return run_dir, json.load(f)


@needs_root
@pytest.mark.parametrize("client,direction", TRANSFERS)
def test_file_crosses_100ms_link_intact(rtt_runs, client, direction):
    run_dir, r = result_of(rtt_runs, (client, direction))
    assert r["integrity"] == "ok" and r["bytes"] == SIZE_BYTES
    assert r["sha256"] == r["sha256_expected"]
    assert r["client"] == client and r["direction"] == direction
    # At most the 10 Mbit/s ceiling; a 2 MB file needs well over a second. Over 1.5 Mbit/s:
    # a goodput in bytes per second (at most 10.5e6 / 8) fails.
    assert 1.5e6 < r["goodput_bps"] < 10.5e6 and r["seconds"] > 1.5
    assert r["goodput_bps"] == pytest.approx(r["bytes"] * 8 / r["seconds"], rel=0.01)
    if client != "saratoga":
        # No PEP: a connect costs one round trip.
        assert RTT_MS * 0.95 < r["tcp_connect_ms"] < RTT_MS * 2, r["tcp_connect_ms"]
    # Both ends' CPU time is recorded (the server's in 10 ms ticks: may be 0).
    assert r["cpu_client_s"] > 0 and r["cpu_server_s"] >= 0, r
    with open(os.path.join(run_dir, "logs", f"{client}.txt"), encoding="utf-8") as f:
        assert "integrity ok" in f.read()
    # The payload copies are gone once verified.
    leftovers = [os.path.join(d, n) for d, _, names in os.walk(os.path.join(run_dir, "files"))
                 for n in names if n.endswith(".bin")]
    assert leftovers == []


@needs_root
def test_nuttcp_udp_runs_at_the_link_rate(rtt_runs):
    _, r = result_of(rtt_runs, ("nuttcp-udp", "download"))
    assert r["offered_rate_bps"] == 8_000_000
    assert r["loss"] < 0.01
    assert 7.0e6 < r["goodput_bps"] < 8.5e6, r


@needs_root
def test_iperf3_reports_goodput(rtt_runs):
    _, r = result_of(rtt_runs, ("iperf3", "upload"))
    assert 1.5e6 < r["goodput_bps"] < 10.5e6 and r["bytes"] > 0      # bits, not bytes, per second
    assert RTT_MS * 0.95 < r["tcp_connect_ms"] < RTT_MS * 2


@needs_root
@pytest.mark.parametrize("client,direction", INTERACTIVE)
def test_keystroke_echo_takes_one_rtt(rtt_runs, client, direction):
    _, r = result_of(rtt_runs, (client, direction))
    assert r["keystrokes"] >= 10
    assert RTT_MS * 0.95 < r["keystroke_ms_p50"] < RTT_MS + 40, r
    assert RTT_MS * 0.95 < r["keystroke_ms_avg"] < RTT_MS + 60, r
    assert r["keystroke_ms_p95"] >= r["keystroke_ms_p50"]


@needs_root
@pytest.mark.parametrize("direction", ["download", "upload"])
def test_ftp_on_a_plain_bridge(tmp_path, direction):
    """Runs without the userspace emulator too."""
    cp = satbed("run", "--client", "ftp", "--direction", direction, "--size", "3M", "--pep", "none",
                "--emulator", "bridge", "--captures", "none", "--no-analysis", "--out", str(tmp_path))
    _, r = cli_result(cp)
    assert r["integrity"] == "ok" and r["bytes"] == 3 << 20
    assert json.loads(cp.stdout.splitlines()[1])["integrity"] == "ok"


def test_missing_tool_is_one_line_naming_the_package(tmp_path):
    # ncftpget lives in /usr/bin; daemons in sbin are still found.
    env = {**os.environ, "PYTHONPATH": REPO, "PATH": "/usr/sbin:/sbin"}
    cp = subprocess.run([sys.executable, "-m", "satbed", "run", "--client", "ftp", "--pep", "none",
                         "--emulator", "bridge", "--out", str(tmp_path)],
                        capture_output=True, text=True, timeout=60, env=env, cwd=REPO)
    assert cp.returncode != 0
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1, cp.stderr
    assert "ncftpget" in lines[0] and "Debian package ncftp" in lines[0]


def test_missing_saratoga_binary_says_make_build(monkeypatch, tmp_path):
    from satbed.backends import clients
    from satbed.core import proc
    monkeypatch.setattr(proc, "BIN_DIR", str(tmp_path))
    with pytest.raises(Exception) as err:
        clients.get("saratoga")
    assert "missing binary" in str(err.value) and "make build" in str(err.value)


def test_integrity_failure_is_loud(tmp_path, capsys):
    from satbed.backends.clients import transfer
    from satbed.backends.clients.base import ClientContext
    ctx = ClientContext(ground=None, aircraft=None, direction="download", size_bytes=4096,
                        run_dir=str(tmp_path), rate_bps=None, rtt_ms=0)
    with transfer.Run(ctx, "ftp") as t:
        payload = t.payload(t.path("send.bin"))
        bad = t.expect(t.path("recv.bin"))
        with open(payload.path, "rb") as src, open(bad, "wb") as dst:
            data = bytearray(src.read())
            data[100] ^= 1
            dst.write(data)
        r = t.verify(payload, bad, 1.0)
    assert r["integrity"] == "fail" and "integrity check failed" in r["error"]
    assert "INTEGRITY FAILURE" in capsys.readouterr().err
    assert not os.path.exists(payload.path) and not os.path.exists(bad)


def test_a_matrix_makes_a_payload_once_and_never_sends_a_damaged_copy(tmp_path):
    """The cells of one size and seed link the payload the first one made;
    a cached copy is hashed again before it is used, and a damaged one is
    made anew; a path that is a link to the cache is never written through."""
    from satbed.backends.clients.payload import PayloadCache, make_payload
    cache = PayloadCache(str(tmp_path / "cache"))
    plain = make_payload(str(tmp_path / "plain"), 300_000, 7)
    first = make_payload(str(tmp_path / "a" / "payload.bin"), 300_000, 7, cache)
    second = make_payload(str(tmp_path / "b" / "payload.bin"), 300_000, 7, cache)
    assert plain.sha256 == first.sha256 == second.sha256
    assert os.stat(first.path).st_ino == os.stat(second.path).st_ino       # linked, not made again
    (cached,) = os.listdir(cache.dir)
    assert cached.endswith(f"-{plain.sha256}.bin")
    other = make_payload(second.path, 300_000, 8, cache)                   # over the link: a new file
    assert other.sha256 != plain.sha256 and os.stat(other.path).st_ino != os.stat(first.path).st_ino
    with open(first.path, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == plain.sha256
    with open(os.path.join(cache.dir, cached), "r+b") as f:                # damaged in the cache
        f.seek(1000)
        f.write(b"\0" * 8)
    third = make_payload(str(tmp_path / "c" / "payload.bin"), 300_000, 7, cache)
    with open(third.path, "rb") as f:
        assert third.sha256 == plain.sha256 == hashlib.sha256(f.read()).hexdigest()
    assert os.stat(third.path).st_ino != os.stat(first.path).st_ino
    assert sorted(os.listdir(cache.dir)) == sorted([cached, f"payload-mt1-300000-8-{other.sha256}.bin"])


def test_payload_is_seeded():
    from satbed.backends.clients.transfer import make_payload
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        a = make_payload(os.path.join(d, "a"), 100_000, 7)
        b = make_payload(os.path.join(d, "b"), 100_000, 7)
        c = make_payload(os.path.join(d, "c"), 100_000, 8)
        assert a.sha256 == b.sha256 != c.sha256 and os.path.getsize(a.path) == 100_000


# Burns 0.3 s of CPU (not wall) time in a child it waits for, then prints.
_BUSY = ("import subprocess, sys\n"
         "subprocess.run([sys.executable, '-c', 'import time\\nt = time.process_time()\\n"
         "while time.process_time() - t < 0.3: pass'])\n"
         "print('done'); print('err', file=sys.stderr)")


def test_communicate_measured_counts_the_process_and_its_children():
    from satbed.backends.clients.processes import communicate_measured
    proc = subprocess.Popen([sys.executable, "-c", _BUSY], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err, cpu = communicate_measured(proc, 60)
    assert (out, err, proc.returncode) == (b"done\n", b"err\n", 0)
    assert cpu >= 0.3
    assert proc.wait() == 0     # reaped once, and Popen knows it


def test_communicate_measured_leaves_a_late_process_to_the_caller():
    from satbed.backends.clients.processes import communicate_measured
    proc = subprocess.Popen([sys.executable, "-c", "print('early', flush=True)\nimport time\ntime.sleep(60)"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        select.select([proc.stdout], [], [], 60)     # "early" is in the pipe (not read yet)
        with pytest.raises(subprocess.TimeoutExpired) as e:
            communicate_measured(proc, 0.5)
        assert e.value.output == b"early\n"
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.communicate(timeout=10)


def test_tree_cpu_seconds_of_this_process():
    from satbed.backends.clients.processes import tree_cpu_seconds
    assert tree_cpu_seconds(os.getpid()) > 0
    assert tree_cpu_seconds(2 ** 22 + 1) == 0     # no such process


@needs_root
def test_dead_server_silent_server_and_stalled_transfer_are_bounded(globalhawk, tmp_path):
    from satbed.backends import clients, records
    from satbed.backends.clients import transfer
    from satbed.backends.clients.base import ClientContext
    from satbed.core.errors import SatbedError
    from satbed.backends.testbed import running

    with running(globalhawk) as tb:
        ground, aircraft = tb.host("clientA"), tb.host("clientB")
        ctx = ClientContext(ground=ground, aircraft=aircraft, direction="download", size_bytes=20 << 20,
                            run_dir=str(tmp_path), rate_bps=None, rtt_ms=0, timeout_s=4)

        with transfer.Run(ctx, "probe") as t:
            start = time.monotonic()
            with pytest.raises(SatbedError, match=r"exited \(code 1\) before listening"):
                t.server(aircraft, "false", ["false"], 2121, wait=5)
            with pytest.raises(SatbedError, match="did not start listening on 10.99.99.254:2121/tcp within 1 s"):
                t.server(aircraft, "sleeper", ["sleep", "60"], 2121, wait=1)
            assert time.monotonic() - start < 4

        # Data segments die on the ground-side PEP bridge; the handshake, the
        # FTP login and the connect probe (small packets) still pass.
        tb.nodes["pepA"].run(["nft", "-f", "-"], input=(
            "table bridge stall {\n chain drops {\n  type filter hook forward priority 0;\n"
            "  ip length > 600 drop\n }\n}\n"))
        start = time.monotonic()
        with pytest.raises(SatbedError, match="transfer stalled: ncftpget did not finish within 4 s"):
            clients.get("ftp").run(ctx)
        assert time.monotonic() - start < 30
        # Everything the runs started is gone: only each node's shell is left.
        for host in (ground, aircraft):
            assert [p for p in host.procs if p.poll() is None] == []
            left = records.processes_in_netns({tb.record.netns[host.name]})
            assert left == [host.pid], [open(f"/proc/{p}/cmdline").read() for p in left]
        assert not os.path.exists(os.path.join(tmp_path, "files", "ftp", "root", "payload.bin"))
