"""PEPs plug in through one executable contract (pep/CONTRACT.md): an adapter
pep/adapters/<name> run inside the PEP node as `start|stop|health|stats`, with
the link parameters in its environment. The registry is that directory.

On the Docker backend a PEP may also be named by image (lab/pep:1): any image
meeting the image contract, driven through its own ENTRYPOINT verbs."""

from __future__ import annotations

import hashlib
import json
import os
import select
import subprocess
import time
from dataclasses import dataclass
from typing import Sequence

from satbed.model.link import MTU_FRAME, LinkConfig
from satbed.core.errors import SatbedError
from satbed.backends.net import Host, NamespaceSandbox, TransparentNode
from satbed.core.proc import BIN_DIR, REPO_ROOT, last_line
from satbed.model.peps import check, is_image
from satbed.core.settings import Settings

# A lab's own PEPsal / SCPS gateway build on this machine (docs/peps/pepsal-scps.md).
LAB_BINARIES = ("SATBED_PEPSAL_BIN", "SATBED_SCPS_BIN")


def contract_env(lan: str, wan: str, bridge: str, side: str, link: LinkConfig, options: str,
                 state_dir: str, bin_dir: str = BIN_DIR, address: str = "") -> dict[str, str]:
    """The adapter's environment (pep/CONTRACT.md), built in this one place.
    side is which end of the satellite link the PEP is on (a or b); the link
    figures are those of the emulated link its WAN port faces, seen leaving
    its side (the direction its WAN sends into)."""
    out = link.a_to_b if side == "a" else link.b_to_a
    return {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "SATBED_PEP_LAN": lan,
        "SATBED_PEP_WAN": wan,
        "SATBED_PEP_BRIDGE": bridge,
        "SATBED_RATE_BPS": str(out.rate_bps or 0),
        "SATBED_RTT_MS": f"{link.rtt_ms:g}",
        "SATBED_BER": f"{out.ber:g}",
        "SATBED_BUFFER_BYTES": str(out.queue_bytes or out.queue_packets * MTU_FRAME),
        "SATBED_PEP_OPTS": options,
        "SATBED_STATE_DIR": state_dir,
        "SATBED_BIN_DIR": bin_dir,
        "SATBED_PEP_ROLE": side,
        "SATBED_PEP_ADDR": address,
    }


# The adapter's `available` verb (pep/CONTRACT.md): how long it may take, and
# the exit statuses that mean it does not know the verb, so the PEP counts as
# available (64 EX_USAGE; 2, the usage exit of adapters older than the verb).
AVAILABLE_TIMEOUT_S = 15.0
UNKNOWN_VERB = (64, 2)


def available(name: str, options: str = "", settings: Settings | None = None) -> str:
    """'' when the PEP named by adapter can run on this machine, else the
    adapter's one line saying what is missing. Asked outside any PEP node
    with the contract's minimum: the options (bin= may name the program),
    satbed's binaries and the lab's own builds."""
    settings = settings or Settings.from_environ()
    env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "SATBED_BIN_DIR": BIN_DIR,
           "SATBED_PEP_OPTS": options}
    for var, path in zip(LAB_BINARIES, (settings.pepsal_bin, settings.scps_bin)):
        if path:
            env[var] = path
    try:
        cp = subprocess.run([check(name), "available"], capture_output=True, text=True, env=env,
                            timeout=AVAILABLE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"{name}: its adapter's `available` did not answer in {AVAILABLE_TIMEOUT_S:g} s"
    except OSError as e:
        return f"{name}: its adapter could not be run ({e.strerror})"
    if cp.returncode == 0 or cp.returncode in UNKNOWN_VERB:
        return ""
    return last_line(cp.stderr or cp.stdout) or f"{name}: `available` exited {cp.returncode}"


def describe(name: str) -> dict:
    """What environment.json records of a PEP: its adapter's digest, and the
    digest of satbed's own binary behind it where there is one. A PEP image
    is driven by its own entrypoint: its id is under testbed.images."""
    if is_image(name):
        return {"name": name, "image": name}
    out = {"name": name, "adapter_sha256": _sha256(check(name))}
    binary = os.path.join(BIN_DIR, name)
    if os.path.isfile(binary):
        out["binary_sha256"] = _sha256(binary)
    return out


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


class Pep:
    """One PEP on one PEP node, driven through its adapter. side: a or b,
    from the topology (the emulator port its WAN faces, or declared)."""

    def __init__(self, name: str, node: TransparentNode, side: str, link: LinkConfig,
                 run_dir: str, options: str = ""):
        self.name, self.node, self.role = name, node, side
        self.options = options
        # A container node runs the image's own verbs; a namespace node the
        # repository's adapter.
        image_verbs = getattr(node.sandbox, "pep_entrypoint", None)
        self.command = list(image_verbs) if image_verbs else [check(name)]
        self.state_dir = os.path.join(run_dir, "pep", node.name)
        os.makedirs(self.state_dir, exist_ok=True)
        self.env = contract_env(node.port("lan").name, node.port("wan").name, node.bridge(), side, link,
                                options, self.state_dir, address=str(node.address or ""))
        if image_verbs:
            # The image's own PATH and binaries, as its defaults say.
            del self.env["SATBED_BIN_DIR"], self.env["PATH"]
        self.in_namespace = isinstance(node.sandbox, NamespaceSandbox)
        # A container has its image's binary instead.
        if self.in_namespace:
            settings = Settings.from_environ()
            for var, path in zip(LAB_BINARIES, (settings.pepsal_bin, settings.scps_bin)):
                if path:
                    self.env[var] = path
        # The repository's `none` adapter in a namespace starts nothing (the
        # node stays a plain bridge): nothing of it can go down mid-transfer.
        self.runs_nothing = self.in_namespace and name == "none"
        self.started = False

    def _argv(self, verb: str) -> list[str]:
        """The call as one command line (`satbed clean` keeps it)."""
        return ["env", *(f"{k}={v}" for k, v in self.env.items()), *self.command, verb]

    def _call(self, verb: str, timeout: float = 30, check: bool = True):
        if self.in_namespace:
            # The environment handed over directly: an `env` program per call
            # was one more exec in every health check of every matrix cell.
            cp = self.node.run([*self.command, verb], timeout=timeout, check=False,
                               env={**os.environ, **self.env})
        else:
            cp = self.node.run(self._argv(verb), timeout=timeout, check=False)
        if check and cp.returncode != 0:
            raise SatbedError(f"PEP {self.name} on {self.node.name}: {verb} failed: "
                              f"{last_line(cp.stderr or cp.stdout) or 'exit ' + str(cp.returncode)}")
        return cp

    def start(self) -> None:
        # Registered first: stop is idempotent, and a run killed amid start leaves rules too.
        self.node.sandbox.on_clean(self._argv("stop"))
        # Generous: a dozen parallel matrix cells on two cores once made a start take over 30 s.
        self._call("start", timeout=90)
        self.started = True

    def healthy(self) -> bool:
        return self.health()[0]

    def health(self) -> tuple[bool, str]:
        """(up, the adapter's one line)."""
        cp = self._call("health", check=False)
        return cp.returncode == 0, last_line(cp.stdout or cp.stderr) or f"health exit {cp.returncode}"

    def stats(self) -> dict:
        cp = self._call("stats", check=False)
        try:
            return json.loads(cp.stdout)
        except ValueError:
            return {"name": self.name, "error": f"stats unreadable: {last_line(cp.stderr or cp.stdout)}"}

    def stop(self) -> dict:
        """Stop and return the final statistics; always leaves the node clean."""
        if not self.started:
            return {"name": self.name}
        # A killed PEP never writes its final stats: its last file still says
        # running, so what the harness sees wins.
        up, line = self.health()
        stats = self.stats()
        if not up:
            stats.update(running=False, down=line)
        self._call("stop", timeout=30, check=False)
        self.started = False
        return stats


def unhealthy(pep_list: list[Pep]) -> str:
    """'' when every started PEP is healthy, else one line naming the ones
    that are not and why."""
    down = []
    for p in pep_list:
        if not p.started:
            continue
        up, line = p.health()
        if not up:
            down.append(f"PEP {p.name} on {p.node.name} is down: {line}")
    return "; ".join(down)


# The split proof (pep/CONTRACT.md, "The split proof"): after every PEP's
# start, one short TCP connection each way between the end hosts. It must get
# through end to end, and every PEP whose stats say it splits must count it
# in its own connections_split. That is all satbed knows of any PEP, so
# pepd, PEPsal, the SCPS gateway and a lab's image get the same proof.
PROBE = ["/usr/bin/python3", os.path.join(REPO_ROOT, "satbed", "backends", "probe.py")]
PROBE_PORTS = (7702, 7703)      # a to b, b to a
# pepd refreshes its stats every second; a container's stats verb runs
# through docker exec: counters get this long to show the probe.
COUNT_WAIT_S = 10.0


@dataclass
class ProbeLeg:
    """One probe connection: who connected to whom, and what each side saw."""
    src: str
    dst: str
    port: int
    client: dict
    server: dict

    def through(self) -> bool:
        return bool(self.server.get("accepted")) and bool(self.client.get("connected"))

    def to_dict(self) -> dict:
        return {"from": self.src, "to": self.dst, "port": self.port, **self.client,
                "peer_seen_by_server": self.server.get("peer")}


def split_count(stats: dict) -> int | None:
    v = stats.get("connections_split")
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def split_verdict(legs: Sequence[ProbeLeg], counts: dict[str, tuple[bool, int | None, int | None]],
                  health: dict[str, str], wait_s: float) -> str:
    """'' when the path is proven, else one line with the reason. counts maps a
    PEP's label to (splits, connections_split before, after); health to its
    health line (said beside a failure: the adapter knows why)."""
    problems = []
    for leg in legs:
        if leg.through():
            continue
        client = (f"connected in {leg.client['connect_ms']:g} ms but the far side never took it"
                  if leg.client.get("connected") else leg.client.get("error") or "no answer")
        problems.append(f"the probe connection {leg.src} -> {leg.dst}:{leg.port} did not get through "
                        f"in {wait_s:g} s ({client})")
    for label, (splits, before, after) in counts.items():
        if not splits:
            continue
        if before is None or after is None:
            problems.append(f"{label} says it splits but its stats have no connections_split count")
        elif after <= before:
            problems.append(f"{label} did not split either probe connection (connections_split stayed {after})")
    if not problems:
        return ""
    said = "; ".join(f"{k}: {v}" for k, v in health.items())
    return "the PEPs are not proven in the path: " + "; ".join(problems) + (f" [health: {said}]" if said else "")


def _ready(proc: subprocess.Popen, deadline: float) -> bool:
    """Wait for the accepting side's "ready" line."""
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        r, _, _ = select.select([proc.stdout], [], [], 0.2)
        if r:
            return proc.stdout.readline().strip() == "ready"
    return False


def _result(proc: subprocess.Popen, timeout: float) -> dict:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    try:
        return json.loads(last_line(out))
    except ValueError:
        return {"error": last_line(err) or f"probe exit {proc.returncode}"}


def prove_split(pep_list: Sequence[Pep], a: Host, b: Host, rtt_ms: float) -> dict:
    """The split proof: raises SatbedError with one line when the PEPs are not
    in the path, else returns what it saw (the LAN-side handshake time of each
    probe among it: short where a PEP next to the connecting host splits)."""
    started = [p for p in pep_list if p.started]
    before = {p: p.stats() for p in started}
    splits = {p: before[p].get("splitting") is True for p in started}
    if not any(splits.values()):
        return {}       # plain bridges (none): nothing to prove, and no run pays for it
    # SYNs lost to bit errors are retransmitted after 1, 2, 4 s...
    wait_s = 15.0 + 3 * rtt_ms / 1000
    labels = {p: f"PEP {p.name} on {p.node.name}" for p in started}
    t0 = time.monotonic()
    servers: list[subprocess.Popen] = []
    legs = []
    for (src, dst), port in zip(((a, b), (b, a)), PROBE_PORTS):
        server = dst.popen([*PROBE, "accept", "--port", str(port), "--total", f"{wait_s:g}"], text=True)
        servers.append(server)
        if not _ready(server, time.monotonic() + 15):
            for s in servers:
                s.kill()
            raise SatbedError(f"the split probe's listener on {dst.name} did not start: "
                              f"{_result(server, 5).get('error', 'no ready line')}")
    clients = [src.popen([*PROBE, "connect", str(dst.ip.ip), "--port", str(port), "--wait", f"{wait_s:g}"],
                         text=True)
               for (src, dst), port in zip(((a, b), (b, a)), PROBE_PORTS)]
    for (src, dst), port, server, client in zip(((a, b), (b, a)), PROBE_PORTS, servers, clients):
        legs.append(ProbeLeg(str(src.ip.ip), str(dst.ip.ip), port,
                             client=_result(client, wait_s + 10), server=_result(server, wait_s + 10)))
    after = dict(before)
    deadline = time.monotonic() + COUNT_WAIT_S
    while True:
        after = {p: (p.stats() if splits[p] else before[p]) for p in started}
        counted = all(not splits[p] or (split_count(after[p]) or 0) > (split_count(before[p]) or 0)
                      for p in started)
        if counted or time.monotonic() > deadline or not all(leg.through() for leg in legs):
            break
        time.sleep(0.5)
    counts = {labels[p]: (splits[p], split_count(before[p]), split_count(after[p])) for p in started}
    verdict = split_verdict(legs, counts, {}, wait_s)
    if verdict:
        # A PEP that died is the reason, whatever the probe then saw.
        down = unhealthy(started)
        if down:
            raise SatbedError(f"before the transfer: {down} (the split proof then failed: {verdict})")
        raise SatbedError(split_verdict(legs, counts, {labels[p]: p.health()[1] for p in started}, wait_s))
    return {"seconds": round(time.monotonic() - t0, 3), "link_rtt_ms": rtt_ms,
            "legs": [leg.to_dict() for leg in legs],
            "connections_split": {p.node.name: [split_count(before[p]), split_count(after[p])]
                                  for p in started if splits[p]}}
