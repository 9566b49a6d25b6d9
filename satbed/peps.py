"""PEPs plug in through one executable contract (pep/CONTRACT.md): an adapter
pep/adapters/<name> run inside the PEP node as `start|stop|health|stats`, with
the link parameters in its environment. The registry is that directory.

On the Docker backend a PEP may also be named by image (lab/pep:1): any image
meeting the image contract, driven through its own ENTRYPOINT verbs."""

from __future__ import annotations

import hashlib
import json
import os
import re

from satbed.emulation import MTU_FRAME, LinkConfig
from satbed.errors import SatbedError
from satbed.net import NamespaceSandbox, TransparentNode
from satbed.proc import BIN_DIR, REPO_ROOT, last_line

ADAPTER_DIR = os.path.join(REPO_ROOT, "pep", "adapters")
# A lab's own PEPsal / SCPS gateway build on this machine (docker/README.md).
LAB_BINARIES = ("SATBED_PEPSAL_BIN", "SATBED_SCPS_BIN")


def names() -> list[str]:
    if not os.path.isdir(ADAPTER_DIR):
        return []
    return sorted(f for f in os.listdir(ADAPTER_DIR)
                  if os.access(os.path.join(ADAPTER_DIR, f), os.X_OK)
                  and os.path.isfile(os.path.join(ADAPTER_DIR, f)))


def is_image(name: str) -> bool:
    """A PEP named by image reference (it has a / : or @) rather than adapter."""
    return any(c in name for c in "/:@")


def check(name: str) -> str:
    """The adapter of a PEP name; an image reference is checked by the Docker
    backend when it creates the PEP node."""
    if is_image(name):
        return name
    if name not in names():
        raise SatbedError(f"unknown PEP {name!r} (known: {', '.join(names())}, "
                          "or an image reference with --backend docker)")
    return os.path.join(ADAPTER_DIR, name)


def check_backend(name: str, backend: str) -> None:
    if is_image(name) and backend != "docker":
        raise SatbedError(f"PEP image {name} needs --backend docker (namespace nodes take an adapter name: "
                          f"{', '.join(names())})")


def slug(name: str) -> str:
    """A PEP name fit for a directory name (an image reference has / and :)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


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
        # A container has its image's binary instead.
        if isinstance(node.sandbox, NamespaceSandbox):
            for var in LAB_BINARIES:
                if os.environ.get(var):
                    self.env[var] = os.path.abspath(os.environ[var])
        self.started = False

    def _call(self, verb: str, timeout: float = 30, check: bool = True):
        cp = self.node.run(["env", *(f"{k}={v}" for k, v in self.env.items()), *self.command, verb],
                           timeout=timeout, check=False)
        if check and cp.returncode != 0:
            raise SatbedError(f"PEP {self.name} on {self.node.name}: {verb} failed: "
                              f"{last_line(cp.stderr or cp.stdout) or 'exit ' + str(cp.returncode)}")
        return cp

    def start(self) -> None:
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
