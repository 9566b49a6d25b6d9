"""The five-host testbed on real namespaces."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

from satbed_testlib import REPO, needs_root, root_links, satbed

pytestmark = needs_root


def test_client_a_pings_client_b_across_three_transparent_nodes(globalhawk):
    from satbed.backends.testbed import running
    with running(globalhawk) as tb:
        out = tb.host("clientA").run(["ping", "-n", "-c", "3", "-i", "0.2", "10.99.99.254"]).stdout
        assert "3 received" in out
        # Bridges forward frames; a router would have decremented the TTL.
        assert set(re.findall(r"ttl=(\d+)", out)) == {"64"}
        for name in ("pepA", "emulator", "pepB"):
            addrs = tb.nodes[name].run(["ip", "-o", "addr", "show"]).stdout
            assert [ln for ln in addrs.splitlines() if " lo " not in ln] == [], addrs
        # The hosts see each other as neighbours on one subnet: no gateway.
        assert "via" not in tb.host("clientA").run(["ip", "route"]).stdout
        for intf, state in tb.offload_state().items():
            for feature in ("tcp-segmentation-offload", "generic-segmentation-offload",
                            "generic-receive-offload", "tx-checksumming"):
                assert state[feature] == "off", (intf, feature)


def test_two_testbeds_at_once_do_not_collide(globalhawk):
    from satbed.backends.testbed import Testbed
    one, two = Testbed(globalhawk), Testbed(globalhawk)
    try:
        one.start()
        two.start()
        assert one.prefix != two.prefix
        for tb in (one, two):
            out = tb.host("clientB").run(["ping", "-n", "-c", "2", "-i", "0.2", "10.99.99.2"]).stdout
            assert "2 received" in out
        # Each testbed's clientA has one neighbour entry for clientB, with the MAC of
        # its own testbed's clientB: frames did not cross between the testbeds.
        for tb in (one, two):
            neigh = [ln.split() for ln in tb.host("clientA").run(["ip", "neigh"]).stdout.splitlines()
                     if ln.startswith("10.99.99.254 ") and "lladdr" in ln]
            b_macs = [ln.split()[2] for ln in tb.host("clientB").run(["ip", "-br", "link"]).stdout.splitlines()
                      if not ln.startswith("lo ")]
            assert [n[n.index("lladdr") + 1] for n in neigh] == b_macs, (neigh, b_macs)
    finally:
        one.stop()
        two.stop()


def test_teardown_leaves_a_namespace_that_took_a_freed_number_alone(globalhawk):
    """The kernel gives a freed namespace's inode number to the next one made,
    so a run's recorded numbers can name another run's new node by the time
    the run tears down. The teardown's sweep for stray processes kills only in
    the namespaces its nodes still hold, never by a recorded number alone."""
    from satbed.backends.testbed import Testbed
    # Another run's node: a namespace with a process in it.
    other = subprocess.Popen(["unshare", "--net", "sleep", "60"])
    try:
        deadline = time.monotonic() + 10
        while (inode := os.stat(f"/proc/{other.pid}/ns/net").st_ino) == os.stat("/proc/self/ns/net").st_ino:
            assert time.monotonic() < deadline, "unshare did not make a namespace"
            time.sleep(0.05)
        tb = Testbed(globalhawk).start()
        # As if one of this run's nodes had gone and its number had been given to the other's.
        tb.record.netns["gone"] = inode
        tb.stop()
        assert other.poll() is None, "the teardown killed another run's process"
    finally:
        other.kill()
        other.wait()


def test_ping_run_writes_result(tmp_path):
    cp = satbed("run", "--client", "ping", "--pep", "none", "--emulator", "bridge",
                "--out", str(tmp_path))
    assert cp.returncode == 0, cp.stderr
    run_dir = cp.stdout.splitlines()[0]
    result = json.load(open(os.path.join(run_dir, "result.json")))
    assert result["loss"] == 0
    assert 0 < result["rtt_ms_avg"] <= result["rtt_ms_max"] < 50
    assert result["ttl"] == [64]
    for name in ("config.json", "environment.json"):
        assert os.path.getsize(os.path.join(run_dir, name)) > 100
    env = json.load(open(os.path.join(run_dir, "environment.json")))
    assert env["kernel"]["release"] and env["git"]["commit"]
    # Every node whose sockets carry a transfer runs cubic, whatever this
    # machine's kernel defaults to (some default to bbr, which a new namespace
    # inherits): what each node read back, recorded.
    assert env["tcp_congestion_control"] == {"clientA": "cubic", "clientB": "cubic", "pepA": "cubic", "pepB": "cubic"}
    assert all(s["tcp-segmentation-offload"] == "off" for s in env["offloads"].values())
    # UDP segmentation too: Saratoga's segmented batches are cut at the sender's port.
    assert all(s["tx-udp-segmentation"] == "off" for s in env["offloads"].values())


def test_sigkilled_run_is_cleaned(globalhawk):
    script = ("import sys, time; sys.path.insert(0, %r)\n"
              "from satbed.model import topology\n"
              "from satbed.backends.testbed import Testbed\n"
              "tb = Testbed(topology.load('globalhawk')).start()\n"
              "tb.host('clientA').popen(['sleep', '600'])\n"
              "print(tb.prefix, flush=True)\n"
              "time.sleep(600)\n") % REPO
    owner = subprocess.Popen(["/usr/bin/python3", "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        prefix = owner.stdout.readline().strip()
        assert prefix.startswith("sb")
        record = json.load(open(f"/run/satbed/{prefix}.json"))
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=10)
        leftover = [p for p in record["pids"] if os.path.exists(f"/proc/{p}")]
        assert leftover, "the killed run should have left its shells behind"
    finally:
        if owner.poll() is None:
            owner.kill()
    cp = satbed("clean")
    assert cp.returncode == 0, cp.stderr
    assert prefix in cp.stdout
    assert not os.path.exists(f"/run/satbed/{prefix}.json")
    for pid in record["pids"]:
        assert not os.path.exists(f"/proc/{pid}/ns/net") or \
            os.stat(f"/proc/{pid}/ns/net").st_ino not in record["netns"].values()
    # Only what this run made is looked at: other runs may be up on the machine.
    deadline = time.monotonic() + 5     # namespaces go once their last process is reaped
    while time.monotonic() < deadline and _ours(prefix):
        time.sleep(0.1)
    assert _ours(prefix) == []
    assert prefix not in satbed("clean").stdout


def _ours(prefix: str) -> list[str]:
    """Links and processes bearing a run's prefix."""
    links = [ln for ln in root_links() if ln.startswith(prefix)]
    procs = [a for a in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout.splitlines()
             if f"mininet:{prefix}" in a]
    return links + procs


def test_sigterm_tears_down(tmp_path):
    from satbed.backends import records
    proc = subprocess.Popen(["/usr/bin/python3", "-m", "satbed", "run", "--client", "ping",
                             "--emulator", "bridge", "--out", str(tmp_path)],
                            cwd=REPO, env={**os.environ, "PYTHONPATH": REPO},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # This run's record (its owner is this process), not any run's on the machine.
    deadline = time.time() + 20
    mine: list[str] = []
    while time.time() < deadline and not (mine := [r.prefix for r in records.load_all() if r.owner_pid == proc.pid]):
        time.sleep(0.05)
    assert mine, "the run wrote no record within 20 s"
    time.sleep(0.5)     # into the run, past its setup: what SIGTERM interrupts
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode != 0
    assert [r for r in records.load_all() if r.owner_pid == proc.pid] == []
    for prefix in mine:
        assert _ours(prefix) == [], prefix


def test_cli_pings_by_host_name():
    cp = subprocess.run(["/usr/bin/python3", "-m", "satbed", "cli"], input="clientA ping -c1 clientB\nexit\n",
                        capture_output=True, text=True, timeout=60, cwd=REPO,
                        env={**os.environ, "PYTHONPATH": REPO})
    assert cp.returncode == 0, cp.stderr
    # Mininet's CLI prints command output through its logger, which may be
    # either stream depending on the terminal.
    assert "1 received" in cp.stdout + cp.stderr


def test_clean_removes_stale_sockets_and_half_written_records_only():
    import socket
    from satbed.backends import records
    os.makedirs(records.RECORD_DIR, exist_ok=True)
    stale_sock = os.path.join(records.RECORD_DIR, "sbfff0-em-satemu.sock")
    live_sock = os.path.join(records.RECORD_DIR, "sbfff1-em-satemu.sock")
    tmp = os.path.join(records.RECORD_DIR, "sbfff2.json.tmp")
    for p in (stale_sock, live_sock, tmp):
        if os.path.exists(p):
            os.unlink(p)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(stale_sock)
    dead.close()                        # a socket file nobody listens on
    live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    live.bind(live_sock)
    live.listen(1)
    open(tmp, "w").close()
    os.utime(tmp, (time.time() - 60, time.time() - 60))
    try:
        out = satbed("clean").stdout
        assert "sbfff0-em-satemu.sock: stale file removed" in out and not os.path.exists(stale_sock)
        assert "sbfff2.json.tmp: stale file removed" in out and not os.path.exists(tmp)
        assert os.path.exists(live_sock)
    finally:
        live.close()
        for p in (stale_sock, live_sock, tmp):
            if os.path.exists(p):
                os.unlink(p)


def test_a_record_saves_while_other_threads_add_pids(tmp_path, monkeypatch):
    """Nodes start processes from several threads: saving must not iterate a
    mapping another thread grows ("dictionary changed size during iteration"
    failed 2 of 196 matrix cells)."""
    import threading
    from satbed.backends import records
    monkeypatch.setattr(records, "RECORD_DIR", str(tmp_path))
    rec = records.RunRecord("sbffff", os.getpid(), records.start_time(os.getpid()))
    errors = []

    def add(base: int) -> None:
        try:
            for i in range(300):
                rec.add_pid(base + i)
        except Exception as e:
            errors.append(e)
    threads = [threading.Thread(target=add, args=(k * 100000,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(rec.pids) == 1200
