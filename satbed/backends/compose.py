"""`satbed compose`: the standing testbed of docker-compose.yml, driven as a
lab drives it. docker-compose.yml stays the declarative file underneath;
this adds what compose cannot do: wiring the chain, swapping a PEP while the
end hosts and the emulator stay up, changing the link live, and checking the
path end to end before saying it is up.

    satbed compose up [--pep IMAGE | --pep-a IMAGE --pep-b IMAGE] [--pep-options S] [link options]
    satbed compose swap IMAGE [--side a|b|both] [--pep-options S]
    satbed compose status [--json]
    satbed compose link [--rate R] [--ceil C] [--rtt MS] [--ber B] [--queue N] [--outage P:D[:O]|off]
    satbed compose wire                  (rewire and check only; docker/wire.sh)
    satbed compose down

The containers are the state: the images, PEP options and link a service runs
with are read back from its container, so a later `up` or `swap` changes only
what it is told to change (leaving --pep off never swaps back to a default).
The nodes and ports are the globalhawk topology's, one container per node,
each port a veth end named as the topology names it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field

from satbed.backends import docker

from satbed.model import topology
from satbed.backends.emulation import control_request
from satbed.backends.net import OFFLOADS
from satbed.backends.tcpcheck import CLIENT, SERVER, client_answer
from satbed.core.errors import SatbedError
from satbed.core.proc import REPO_ROOT, last_line, require_root, require_tools
from satbed.core.proc import run as proc_run

COMPOSE_FILE = os.path.join(REPO_ROOT, "docker-compose.yml")
TOPOLOGY = "globalhawk"
DEFAULT_PEP = "satbed/pep-pepd:latest"
DEFAULT_LINK = {"RATE_BPS": "8000000", "CEIL_BPS": "10000000", "RTT_MS": "600", "BER": "0"}
PEP_STATE = "/run/satbed/pep"               # SATBED_STATE_DIR of the PEP services
EMU_STATE = "/run/satbed/emulator"          # satemu's config, control socket and stats
SIDES = {"a": "pepA", "b": "pepB"}
CHECK_PORT = 5299
CHECK_BYTES = 256 << 10
READY_S = 90
STATS_SETTLE_S = 3


@dataclass
class Service:
    """One running (or stopped) container of the project."""
    name: str
    id: str
    pid: int
    running: bool
    image: str
    env: dict[str, str] = field(default_factory=dict)


def host_mac(ip) -> str:
    """A locally administered MAC made from an end host's IPv4 address."""
    return "02:5a:" + ":".join(f"{b:02x}" for b in ip.ip.packed)


def project_name(given: str | None) -> str:
    name = given or os.environ.get("COMPOSE_PROJECT_NAME") or "satbed"
    if not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", name):
        raise SatbedError(f"bad project name {name!r}: lower-case letters, digits, - and _")
    return name


def compose_cmd() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    cp = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True, timeout=30)
    if cp.returncode == 0:
        return ["docker", "compose"]
    raise SatbedError("neither docker-compose nor the docker compose plugin is installed")


class Standing:
    """The standing testbed of one compose project."""

    def __init__(self, project: str | None = None, log=print):
        require_root()
        require_tools("ip", "ethtool", "nsenter", "sysctl")
        reason = docker.available()
        if reason:
            raise SatbedError(reason)
        self.project = project_name(project)
        self.spec = topology.load(TOPOLOGY)
        self.log = log

    # ------------------------------------------------------------ state

    def services(self) -> dict[str, Service]:
        ids = docker.docker("ps", "-a", "-q", "--filter", f"label=com.docker.compose.project={self.project}",
                            timeout=30).stdout.split()
        if not ids:
            return {}
        doc = json.loads(docker.docker("inspect", *ids, timeout=60).stdout)
        out = {}
        for c in doc:
            name = (c["Config"]["Labels"] or {}).get("com.docker.compose.service", "")
            env = dict(e.split("=", 1) for e in c["Config"].get("Env") or [] if "=" in e)
            out[name] = Service(name, c["Id"], int(c["State"]["Pid"] or 0), bool(c["State"]["Running"]),
                                c["Config"]["Image"], env)
        return out

    def running(self) -> dict[str, Service]:
        svcs = self.services()
        missing = [n for n in self.spec.node_names() if n not in svcs or not svcs[n].running]
        if missing:
            raise SatbedError(f"compose project {self.project}: {', '.join(missing)} not running "
                              f"(`satbed compose up{self._pflag()}`)")
        return svcs

    def _pflag(self) -> str:
        return "" if self.project == "satbed" else f" --project {self.project}"

    # ------------------------------------------------------------ compose

    def compose(self, *args: str, env: dict[str, str], timeout: float = 300) -> None:
        full = {k: v for k, v in os.environ.items()
                if not k.startswith(("PEP_", "RATE_BPS", "CEIL_BPS", "RTT_MS", "BER"))}
        full.update(env)
        cmd = [*compose_cmd(), "-p", self.project, "-f", COMPOSE_FILE, *args]
        try:
            cp = subprocess.run(cmd, capture_output=True, text=True, env=full, timeout=timeout, cwd=REPO_ROOT)
        except subprocess.TimeoutExpired:
            raise SatbedError(f"{' '.join(cmd[:1])} {args[0]} timed out after {timeout:g} s") from None
        if cp.returncode != 0:
            raise SatbedError(f"docker-compose {args[0]} failed: {last_line(cp.stderr or cp.stdout)}")

    def apply(self, wanted: dict[str, dict[str, str]]) -> None:
        """Bring each service to its variables; services sharing the same
        variables go in one call. --no-deps: a service not named is not
        touched, so swapping a PEP leaves the emulator and hosts alone."""
        groups: dict[str, tuple[dict[str, str], list[str]]] = {}
        for svc, env in wanted.items():
            key = json.dumps(env, sort_keys=True)
            groups.setdefault(key, (env, []))[1].append(svc)
        for env, svcs in groups.values():
            self.compose("up", "-d", "--no-deps", *svcs, env=env)

    # ------------------------------------------------------------ wiring

    def _ns(self, pid: int, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return proc_run(["nsenter", "-t", str(pid), "-n", "--", *args], check=check)

    def _veth_peer(self, pid: int, dev: str) -> tuple[int, int] | None:
        """(ifindex, peer ifindex) of a veth in a namespace, None if absent."""
        cp = self._ns(pid, "ip", "-j", "link", "show", "dev", dev, check=False)
        if cp.returncode != 0:
            return None
        index = json.loads(cp.stdout)[0]["ifindex"]
        stats = self._ns(pid, "ethtool", "-S", dev, check=False).stdout
        m = re.search(r"peer_ifindex:\s*(\d+)", stats)
        return (index, int(m.group(1))) if m else (index, -1)

    def wire(self, svcs: dict[str, Service]) -> list[str]:
        """Every link of the topology as a veth pair between the two running
        containers; a link that is already right is left alone, one whose
        other end is gone (a recreated container; its namespace may linger
        for a minute) is removed and made again. Returns what changed."""
        changed = []
        for ls in self.spec.links:
            a, b = svcs[ls.a.node], svcs[ls.b.node]
            ea, eb = self._veth_peer(a.pid, ls.a.port), self._veth_peer(b.pid, ls.b.port)
            if ea and eb and ea[1] == eb[0] and eb[1] == ea[0]:
                continue
            for pid, dev, end in ((a.pid, ls.a.port, ea), (b.pid, ls.b.port, eb)):
                if end:
                    self._ns(pid, "ip", "link", "del", "dev", dev, check=False)
            # An end host keeps its MAC address across rewiring, so no
            # neighbour cache in the chain goes stale when a PEP is swapped.
            mac_a, mac_b = (["address", host_mac(self.spec.hosts[e.node].ip)] if e.node in self.spec.hosts else []
                            for e in (ls.a, ls.b))
            proc_run(["ip", "link", "add", "name", ls.a.port, "netns", str(a.pid), *mac_a, "type", "veth",
                      "peer", "name", ls.b.port, "netns", str(b.pid), *mac_b])
            for pid, dev, node in ((a.pid, ls.a.port, ls.a.node), (b.pid, ls.b.port, ls.b.node)):
                self._ns(pid, "ip", "link", "set", "dev", dev, "mtu", str(self.spec.mtu))
                self._ns(pid, "ethtool", "-K", dev, *(a for o in OFFLOADS for a in (o, "off")))
                if node in self.spec.transparent:
                    self._ns(pid, "ip", "link", "set", "dev", dev, "promisc", "on")
                self._ns(pid, "ip", "link", "set", "dev", dev, "up")
            changed.append(f"{ls.a} = {ls.b}")
        for h in self.spec.hosts.values():
            self._ns(svcs[h.name].pid, "ip", "addr", "replace", str(h.ip), "dev", "eth0")
        # Bridged frames must not reach iptables as well (br_netfilter's
        # key exists only where it is loaded; only the host may write it).
        if os.path.exists("/proc/sys/net/bridge/bridge-nf-call-iptables"):
            for t in self.spec.transparent:
                self._ns(svcs[t].pid, "sysctl", "-q", "-w", "net.bridge.bridge-nf-call-iptables=0")
        return changed

    def wait_ready(self, names: list[str]) -> None:
        """PEP entrypoints write their ready file once bridged and started;
        the emulator is ready when its control socket answers."""
        deadline = time.monotonic() + READY_S
        pending = list(names)
        while pending:
            svcs = self.services()
            for name in list(pending):
                svc = svcs.get(name)
                if svc is None or not svc.running:
                    raise SatbedError(f"{name} exited: {self._logs(name)}")
                if name == "emulator":
                    try:
                        self.emulator_request(svc, {"op": "stats"})
                        pending.remove(name)
                    except (OSError, ValueError):
                        pass
                elif os.path.exists(f"/proc/{svc.pid}/root{PEP_STATE}/ready"):
                    pending.remove(name)
            if pending and time.monotonic() > deadline:
                raise SatbedError(f"{', '.join(pending)} not ready after {READY_S} s: {self._logs(pending[0])}")
            if pending:
                time.sleep(0.2)

    def _logs(self, service: str) -> str:
        svcs = self.services()
        if service not in svcs:
            return "no container"
        cp = docker.docker("logs", "--tail", "5", svcs[service].id, check=False)
        return last_line(cp.stderr + "\n" + cp.stdout) or "no output"

    # ------------------------------------------------------------ checks

    def pep_stats(self, svc: Service) -> dict:
        ep = docker.entrypoint(svc.image)
        cp = docker.docker("exec", svc.id, *ep, "stats", check=False, timeout=30)
        try:
            stats = json.loads(cp.stdout)
            return stats if isinstance(stats, dict) else {"error": "stats is not an object"}
        except ValueError:
            return {"error": f"stats unreadable: {last_line(cp.stderr or cp.stdout)}"}

    def check_path(self, svcs: dict[str, Service]) -> dict:
        """Client A reaches Client B through both PEPs and the emulator: ICMP
        first (retried while the emulator restarts on new ports), then a TCP
        transfer whose bytes are compared by SHA-256; the PEPs' split
        counters before and after say who split it."""
        ca, cb = svcs["clientA"], svcs["clientB"]
        target = str(self.spec.hosts["clientB"].ip.ip)
        deadline = time.monotonic() + READY_S
        while True:
            cp = docker.docker("exec", ca.id, "ping", "-c", "2", "-i", "0.5", "-W", "3", target,
                               check=False, timeout=30)
            if cp.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise SatbedError(f"clientA cannot reach clientB ({target}) through the chain after {READY_S} s "
                                  f"(`satbed compose status{self._pflag()}`)")
            time.sleep(1)
        # Measured once the neighbours are resolved (a recreated host port
        # resolves its neighbour first: a round trip more for early pings).
        cp = docker.docker("exec", ca.id, "ping", "-c", "3", "-i", "0.3", "-W", "3", target, check=False, timeout=30)
        m = re.search(r"= ([\d.]+)/[\d.]+/", cp.stdout)
        rtt = float(m.group(1)) if m else None
        peps = [n for n in self.spec.transparent if self.spec.transparent[n].kind == "pep"]
        before = {n: self.pep_stats(svcs[n]).get("connections_split", 0) for n in peps}
        server = subprocess.Popen(["docker", "exec", cb.id, "python3", "-c", SERVER, str(CHECK_PORT), "count",
                                   str(CHECK_BYTES)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            if server.stdout.readline().strip() != "listening":
                raise SatbedError(f"clientB: check server did not start: {last_line(server.stderr.read())}")
            cp = docker.docker("exec", ca.id, "python3", "-c", CLIENT, target, str(CHECK_PORT), str(CHECK_BYTES), "close",
                               check=False, timeout=120)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                raise SatbedError(f"TCP through the chain failed: {last_line(cp.stderr or cp.stdout) or 'no reply'}"
                                  ) from None
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
        got = client_answer(cp)
        # The server's answer ("length sha256" of what it received) is what the client sent.
        if not (got.get("reply") and got["reply"] == got.get("sent")):
            # Both ends' last words: a client that read nothing and a server
            # that never accepted point at the PEP, a wrong answer at the bytes.
            seen = last_line(server.stderr.read() + "\n" + server.stdout.read()) or "no output"
            raise SatbedError(f"TCP through the chain failed: {got.get('error') or got.get('reply') or 'no reply'}"
                              f" (clientA's reading ended: {got.get('end', 'unknown')}; clientB's server: {seen})")
        # PEPs may refresh their counters periodically (pepd: every second):
        # wait a little for a splitting PEP that shows no split yet.
        deadline = time.monotonic() + STATS_SETTLE_S
        while True:
            now = {n: self.pep_stats(svcs[n]) for n in peps}
            split = {n: now[n]["connections_split"] - before[n]
                     if isinstance(now[n].get("connections_split"), int) and isinstance(before[n], int) else None
                     for n in peps}
            if time.monotonic() > deadline or all(split[n] or not now[n].get("splitting") for n in peps):
                break
            time.sleep(0.5)
        return {"rtt_ms": rtt, "tcp_bytes": CHECK_BYTES, "tcp_intact": True, "split": split}

    # ------------------------------------------------------------ emulator

    def emulator_request(self, svc: Service, req: dict) -> dict:
        return control_request(f"/proc/{svc.pid}/root{EMU_STATE}/satemu.sock", req)

    def live_link(self, svc: Service) -> dict:
        """The link in force, from satemu: direction -> effective settings."""
        try:
            reply = self.emulator_request(svc, {"op": "get"})
        except (OSError, ValueError) as e:
            raise SatbedError(f"emulator control socket: {e}") from None
        dirs = (reply.get("config") or {}).get("directions") or {}
        return {d: v["effective"] for d, v in dirs.items()}

    def set_link(self, params: dict) -> dict:
        svcs = self.running()
        emu = svcs["emulator"]
        try:
            reply = self.emulator_request(emu, {"op": "set", "dir": "both", "params": params})
        except (OSError, ValueError) as e:
            raise SatbedError(f"emulator control socket: {e}") from None
        if not reply.get("ok"):
            raise SatbedError(f"the emulator refused {json.dumps(params)}: {reply.get('error')}")
        if params.get("outage"):
            # An outage's offset counts from now, not from when satemu started.
            self.emulator_request(emu, {"op": "clock"})
        # Kept in the emulator's config file too: satemu restarts from it
        # when a PEP swap took its ports away.
        cfg = self.emulator_request(emu, {"op": "get"})["config"]["directions"]
        path = f"/proc/{emu.pid}/root{EMU_STATE}/satemu.json"
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError):
            doc = {"seed": 1, "sample_ms": 100}
        doc.update({d: v["config"] for d, v in cfg.items()})
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)
        os.replace(path + ".tmp", path)
        return self.live_link(emu)

    # ------------------------------------------------------------ commands

    def link_vars(self, svc: Service | None) -> dict[str, str]:
        """RATE_BPS... as a container was given them (the defaults if none)."""
        if svc is None:
            return dict(DEFAULT_LINK)
        return {k: svc.env.get(f"SATBED_{k}", v) for k, v in DEFAULT_LINK.items()}

    def pep_vars(self, side: str, image: str, opts: str, link: dict[str, str]) -> dict[str, str]:
        s = side.upper()
        return {f"PEP_{s}_IMAGE": image, f"PEP_{s}_OPTS": opts,
                **{k: link[k] for k in ("RATE_BPS", "RTT_MS", "BER")}}

    def up(self, pep_a: str | None = None, pep_b: str | None = None, pep_options: str | None = None,
           link: dict[str, str] | None = None) -> dict:
        svcs = self.services()
        emu = svcs.get("emulator")
        link_now = self.link_vars(emu)
        new_link = {**link_now, **(link or {})}
        wanted: dict[str, dict[str, str]] = {h: {} for h in self.spec.hosts}
        wanted["emulator"] = dict(new_link)
        for side, name in SIDES.items():
            svc = svcs.get(name)
            given = pep_a if side == "a" else pep_b
            image = docker.pep_image(given) if given else (svc.image if svc else docker.pep_image(DEFAULT_PEP))
            opts = pep_options if pep_options is not None else (svc.env.get("SATBED_PEP_OPTS", "") if svc else "")
            # A PEP keeps the link it was tuned for unless the link changes.
            plink = new_link if (link or svc is None) else self.link_vars(svc)
            wanted[name] = self.pep_vars(side, image, opts, plink)
        self.apply(wanted)
        return self.settle(list(wanted))

    def swap(self, image: str, side: str = "both", pep_options: str = "") -> dict:
        svcs = self.running()
        ref = docker.pep_image(image)
        # The new PEP is tuned for the link in force now.
        eff = self.live_link(svcs["emulator"]).get("a_to_b", {})
        link = {"RATE_BPS": f"{eff.get('rate_bps', 0):.0f}", "RTT_MS": f"{2 * eff.get('delay_ms', 0):g}",
                "BER": f"{eff.get('ber', 0):g}"}
        names = list(SIDES.values()) if side == "both" else [SIDES[side]]
        wanted = {}
        for s, name in SIDES.items():
            if name in names:
                wanted[name] = self.pep_vars(s, ref, pep_options, link)
        self.apply(wanted)
        return self.settle(names)

    def settle(self, touched: list[str]) -> dict:
        svcs = self.running()
        changed = self.wire(svcs)
        self.wait_ready([n for n in self.spec.transparent if n in touched or self._near(n, changed)])
        path = self.check_path(self.running())
        return {"project": self.project, "rewired": changed, "path": path, **self.status(quick=True)}

    def _near(self, node: str, changed: list[str]) -> bool:
        return any(c.startswith(f"{node}.") or f"= {node}." in c for c in changed)

    def status(self, quick: bool = False) -> dict:
        svcs = self.services()
        out: dict = {"project": self.project, "nodes": {}}
        chain = list(dict.fromkeys(n for ls in self.spec.links for n in (ls.a.node, ls.b.node)))
        for name in chain + [n for n in self.spec.node_names() if n not in chain]:
            svc = svcs.get(name)
            if svc is None:
                out["nodes"][name] = {"state": "absent"}
                continue
            node: dict = {"state": "running" if svc.running else "stopped", "image": svc.image}
            if name in self.spec.transparent and self.spec.transparent[name].kind == "pep":
                node["pep_options"] = svc.env.get("SATBED_PEP_OPTS", "")
                node["tuned_for"] = self.link_vars(svc)
                if svc.running and not quick:
                    node["stats"] = self.pep_stats(svc)
            out["nodes"][name] = node
        running = {n: s for n, s in svcs.items() if s.running}
        out["links"] = {}
        for ls in self.spec.links:
            a, b = running.get(ls.a.node), running.get(ls.b.node)
            ea = self._veth_peer(a.pid, ls.a.port) if a else None
            eb = self._veth_peer(b.pid, ls.b.port) if b else None
            out["links"][f"{ls.a} = {ls.b}"] = bool(ea and eb and ea[1] == eb[0] and eb[1] == ea[0])
        if "emulator" in running:
            try:
                out["link"] = self.live_link(running["emulator"])
            except SatbedError as e:
                out["link"] = {"error": str(e)}
        return out

    def down(self) -> list[str]:
        names = [s.id[:12] for s in self.services().values()]
        self.compose("down", "-t", "20", env={})
        return names


# ------------------------------------------------------------ CLI

