"""A realized topology: nodes, links and the teardown that always runs."""

from __future__ import annotations

import os
import shutil
import socket
import time
import signal
from contextlib import contextmanager
from typing import Iterator

from mininet.log import setLogLevel

from satbed.backends import docker, profiles as host_profiles, records
from satbed.model.profiles import load as load_profile

from satbed.core import proc, signals
from satbed.core.errors import SatbedError
from satbed.backends.net import NAMESPACES, Backend, Host, Link, Node, Router, TransparentNode
from satbed.core.proc import require_root, require_tools
from satbed.backends.records import RunRecord, start_time
from satbed.model.topology_spec import TopologySpec
from satbed.model.segments import transit_routes

NEEDED_TOOLS = ("ip", "ethtool", "sysctl", "mnexec")


class Testbed:
    """One testbed instance. Names carry a per-run prefix (sbXXXX) so several
    can be up at once; a record under /run/satbed lets `satbed clean` remove
    what a killed run left."""

    def __init__(self, spec: TopologySpec, prefix: str | None = None, backend: Backend = NAMESPACES):
        self.spec, self.backend = spec, backend
        self.prefix = prefix or records.new_prefix()
        self.record = RunRecord(self.prefix, os.getpid(), start_time(os.getpid()))
        self.nodes: dict[str, Node] = {}
        self.links: list[Link] = []
        self.tcp_cc: dict[str, str] = {}
        self.queue_commands: dict[str, list[str]] = {}     # router.port -> the tc that made its queue
        self.tcp_profiles: dict[str, dict] = {}            # host -> the profile's applied values
        self.started = False

    @property
    def hosts(self) -> dict[str, Host]:
        return {n: v for n, v in self.nodes.items() if isinstance(v, Host)}

    def host(self, name: str) -> Host:
        node = self.nodes.get(name)
        if not isinstance(node, Host):
            raise SatbedError(f"topology {self.spec.name} has no host {name!r}")
        return node

    def transparent(self, kind: str) -> list[TransparentNode]:
        return [n for n in self.nodes.values() if isinstance(n, TransparentNode) and n.kind == kind]

    @property
    def routers(self) -> dict[str, Router]:
        return {n: v for n, v in self.nodes.items() if isinstance(v, Router)}

    def start(self, bridge_kinds: tuple[str, ...] = ("pep", "bridge", "emulator"),
              profiles: dict[str, str] | None = None, backend: Backend | None = None) -> "Testbed":
        """Build nodes and links; bridge the transparent nodes whose kind is
        listed (the emulator is left unbridged when satemu will own its ports).
        profiles: host -> TCP profile name, over the topology's own. backend:
        the run's own (bound to its images or machines), over the testbed's."""
        if backend is not None:
            self.backend = backend
        require_root()
        require_tools(*NEEDED_TOOLS)
        setLogLevel("error")
        self.record.save()
        self.started = True
        spec = self.spec
        for h in spec.hosts.values():
            self.nodes[h.name] = Host(h.name, h.short, self.prefix, self.record, h.ip, self.backend, h.gateway)
        for r in spec.routers.values():
            self.nodes[r.name] = Router(r.name, r.short, self.prefix, self.record, r.addresses, self.backend)
        for t in spec.transparent.values():
            self.nodes[t.name] = TransparentNode(t.name, t.short, self.prefix, self.record, t.kind, t.ports,
                                                    self.backend, address=t.ip)
        for ls in spec.links:
            a, b = self.nodes[ls.a.node], self.nodes[ls.b.node]
            ia = a.add_intf(ls.a.port, a.intf_name(ls.a.port))
            ib = b.add_intf(ls.b.port, b.intf_name(ls.b.port))
            if not (a.sandbox.wired and b.sandbox.wired):
                self.links.append(Link(ia, ib))
        for name, node in self.nodes.items():
            if not node.sandbox.wired:     # a machine's NICs are as its playbook left them
                node.configure(spec.mtu)
            if isinstance(node, Host):
                self.tcp_cc[name] = node.set_tcp_cc(spec.hosts[name].tcp_cc)
            elif isinstance(node, TransparentNode) and node.kind in bridge_kinds:
                node.bridge()
            if isinstance(node, TransparentNode) and node.kind == "pep":
                # A PEP's sockets (PEPsal's, and pepd's without its cc option)
                # take the node's default. On a node satbed makes, the stock
                # one, not whatever this machine's kernel defaults to; a lab's
                # PEP machine keeps its own, which is recorded.
                self.tcp_cc[name] = node.tcp_cc_in_force() if node.sandbox.wired else node.set_tcp_cc("")
        for r in spec.routers.values():
            router = self.routers[r.name]
            for route in r.routes:
                router.add_route(str(route.to), str(route.via))
            for port, q in r.queues.items():
                cmds = router.set_queue(port, q.packets, q.bytes, q.rate_bps, spec.mtu)
                self.queue_commands[f"{r.name}.{port}"] = [" ".join(c) for c in cmds]
        wanted = {h: (profiles or {}).get(h, spec.hosts[h].profile) for h in spec.hosts}
        for host, name in wanted.items():
            if name:
                self.tcp_profiles[host] = host_profiles.apply(load_profile(name), self.host(host))
                # The profile's congestion control replaced the one set above: record what runs.
                self.tcp_cc[host] = self.tcp_profiles[host]["net.ipv4.tcp_congestion_control"]
        if spec.routers:
            # A PEP's own upstream connections need next hops beyond its bridge.
            for t in spec.of_kind("pep"):
                for route in transit_routes(spec, t.name):
                    self.nodes[t.name].add_route(str(route.to), str(route.via))
        return self

    def stop(self) -> None:
        """Tear everything down; safe to call twice and after a partial start."""
        if not self.started:
            return
        # A second Ctrl-C must not cut the teardown short.
        with signals.handled(signal.SIG_IGN, signal.SIGINT, signal.SIGTERM):
            errors = []
            for node in reversed(list(self.nodes.values())):
                try:
                    node.stop()
                except Exception as e:  # keep tearing down the rest
                    errors.append(f"{node.name}: {e}")
            # Anything that slipped into our namespaces without a record dies
            # too: namespaces still held, so the inodes are ours, not a
            # namespace another run has just been given the number of.
            nodes = list(self.nodes.values())
            records.kill_pids(records.processes_in_netns({n.netns.inode for n in nodes if n.netns}))
            for node in nodes:
                node.release_netns()
            self.record.remove()
            self.started = False
            if errors:
                raise SatbedError("teardown: " + "; ".join(errors))

    def offload_state(self) -> dict[str, dict[str, str]]:
        return {intf.name: intf.offloads() for node in self.nodes.values() for intf in node.intfs.values()}

    def mininet(self):
        """A Mininet object over our nodes, for Mininet's CLI (`clientA ping clientB`)."""
        from mininet.link import Intf as MininetIntf
        from mininet.net import Mininet
        net = Mininet(topo=None, controller=None, build=False, autoSetMacs=False)
        for name, node in self.nodes.items():
            for intf in node.intfs.values():
                if intf.name not in node.mn.nameToIntf:
                    # Already in place: tell Mininet about it without moving it.
                    MininetIntf(intf.name, node=node.mn, moveIntfFn=lambda *_: None)
            net.hosts.append(node.mn)
            net.nameToNode[node.mn.name] = node.mn
            net.nameToNode[name] = node.mn      # `clientA ping clientB` without the run prefix
        return net


@contextmanager
def running(spec: TopologySpec, **start_kwargs) -> Iterator[Testbed]:
    tb = Testbed(spec)
    try:
        yield tb.start(**start_kwargs)
    finally:
        tb.stop()


def clean(verbose: bool = True) -> list[str]:
    """Remove what killed runs left: processes in their namespaces (which frees
    the namespaces and their veths), recorded pids, root-namespace links,
    containers bearing their prefix, and the payloads and keys in their run
    directories (captures and logs stay). Live runs are left alone, and so is
    a namespace a live run holds: inode numbers are reused once freed.

    A record is read as untrusted input (clean_record): what does not prove
    to be the run's is reported in one line and left alone."""
    done = []
    found = records.scan()
    live = [r for r in found if isinstance(r, RunRecord) and r.owner_alive()]
    held = {i for r in live for i in r.netns.values()}
    for rec in found:
        if isinstance(rec, records.Suspect):
            done.append(rec.line())
            continue
        if isinstance(rec, str):
            try:
                os.unlink(rec)
                done.append(f"{os.path.basename(rec)}: unreadable record removed")
            except OSError:
                pass
            continue
        if rec in live:
            continue
        done += clean_record(rec, held)
    done += remove_stale_files({r.prefix for r in live})
    return done


def clean_record(rec: RunRecord, held: set[int]) -> list[str]:
    """Clean one dead run's leftovers, acting only on what is provably its:
    namespaces a process of the run or one of its containers holds, pids in
    those namespaces or naming the run, containers Docker labels with its
    prefix, a run directory holding satbed's marker for it."""
    labelled = _labelled(rec.prefix) if rec.containers else {}
    netns = records.owned_netns(rec, {n: pid for n, (_, pid) in labelled.items()}) - held
    ids = {cid for cid, _ in labelled.values()}
    recorded = [int(p) for p, st in rec.pids.items() if st is not None and start_time(int(p)) == st]
    victims = set(records.processes_in_netns(netns))
    victims |= {p for p in recorded if records.pid_is_runs(p, rec, netns, ids)}
    records.kill_pids(sorted(victims))
    refused = []
    for link in root_links(rec.prefix):
        proc.run(["ip", "link", "del", link], check=False)
    for container in rec.containers:
        if container.startswith(rec.prefix + "-") and container in labelled:
            proc.run(["docker", "rm", "-f", container], check=False, timeout=60)
        elif container in labelled or _container_exists(container):
            refused.append(f"container {container[:64]} (not labelled {rec.prefix})")
    # Processes entering a removed container end with it.
    deadline = time.monotonic() + 2
    strays = [p for p in recorded if p not in victims]
    while strays and time.monotonic() < deadline:
        time.sleep(0.1)
        strays = [p for p in strays if start_time(p) == rec.pids[str(p)]]
    refused += [f"pid {p} (not in the run's namespaces or containers)" for p in strays]
    unclaimed = {i for i in rec.netns.values() if i} - netns - held - {records.root_netns()}
    if unclaimed and records.processes_in_netns(unclaimed):
        refused.append(f"{len(unclaimed)} namespace(s) no process of the run holds")
    note = f"{rec.prefix}: {len(victims)} process(es) stopped"
    if rec.run_dir:
        run_dir = os.path.realpath(rec.run_dir) if os.path.isabs(rec.run_dir) else rec.run_dir
        problem = records.run_dir_problem(run_dir, rec.prefix)
        if problem:
            refused.append(problem)
        elif remove_run_files(run_dir):
            note += f", payloads and keys removed from {rec.run_dir}"
    rec.remove()
    out = [note]
    if refused:
        out.append(f"{rec.prefix}: left alone: {'; '.join(refused)}")
    return out


def _labelled(prefix: str) -> dict[str, tuple[str, int]]:
    """The containers Docker labels with a run's prefix: name -> (id, pid;
    0 when stopped). Empty where Docker does not answer."""
    if docker.available() is not None:
        return {}
    ids = docker.docker("ps", "-a", "-q", "--no-trunc", "--filter", f"label={docker.LABEL}.prefix={prefix}",
                        check=False, timeout=30).stdout.split()
    if not ids:
        return {}
    cp = docker.docker("inspect", "--format", "{{.Name}} {{.Id}} {{.State.Pid}}", *ids, check=False, timeout=60)
    out = {}
    for line in cp.stdout.splitlines():
        name, cid, pid = (line.split() + ["", "", "0"])[:3]
        out[name.lstrip("/")] = (cid, int(pid) if pid.isdigit() else 0)
    return out


def _container_exists(name: str) -> bool:
    return docker.available() is None and docker.docker("inspect", "--type", "container", name, check=False,
                                                         timeout=30).returncode == 0


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return time.time()


def remove_stale_files(live_prefixes: set[str]) -> list[str]:
    """Control sockets and half-written records killed runs left in the record
    directory: a socket nobody answers on, a temporary record of no live run."""
    removed = []
    try:
        names = os.listdir(records.RECORD_DIR)
    except OSError:
        return removed
    for name in names:
        path = os.path.join(records.RECORD_DIR, name)
        if not records.PREFIX_RE.match(name[:6]) or name[:6] in live_prefixes:
            continue
        if name.endswith(".sock"):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(2)
                try:
                    s.connect(path)
                    continue            # someone answers: not ours to remove
                except OSError:
                    pass
        elif not name.endswith(".tmp") or time.time() - _mtime(path) < 10:
            continue                    # a record being written this moment is a live run's
        try:
            os.unlink(path)
            removed.append(f"{name}: stale file removed")
        except OSError:
            pass
    return removed + remove_stale_control_dirs()


def remove_stale_control_dirs() -> list[str]:
    """Control-socket directories (runs/<prefix>/) of runs without a record:
    a run writes its record before it makes them, and removes them with it."""
    runs = os.path.join(records.RECORD_DIR, "runs")
    try:
        names = os.listdir(runs)
    except OSError:
        return []
    removed = []
    for name in names:
        if records.PREFIX_RE.match(name) and not os.path.exists(os.path.join(records.RECORD_DIR, name + ".json")):
            records.remove_control_dirs(name)
            removed.append(f"runs/{name}: stale control directory removed")
    return removed


def remove_run_files(run_dir: str) -> bool:
    """RUN/files holds a run's payloads, received copies and per-run keys: a
    killed run's are removed (its captures and logs are kept)."""
    files = os.path.join(run_dir, "files") if run_dir else ""
    if not files or not os.path.isabs(files) or not os.path.isfile(os.path.join(run_dir, "config.json")):
        return False
    if not os.path.isdir(files) or os.path.islink(files):
        return False
    shutil.rmtree(files, ignore_errors=True)
    return True


def root_links(prefix: str) -> list[str]:
    """Links in the root namespace named with a run's prefix (a run killed
    between creating a veth and moving it would leave one)."""
    out = proc.run(["ip", "-o", "link", "show"], check=False).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]
    return [n for n in names if n.startswith(prefix + "-")]
