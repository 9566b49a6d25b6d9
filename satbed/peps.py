"""PEPs plug in through one executable contract (pep/CONTRACT.md): an adapter
pep/adapters/<name> run inside the PEP node as `start|stop|health|stats`, with
the link parameters in its environment. The registry is that directory.

On the Docker backend a PEP may also be named by image (lab/pep:1): any image
meeting the image contract, driven through its own ENTRYPOINT verbs."""

from __future__ import annotations

import json
import os
import re

from satbed.emulation import LinkConfig
from satbed.errors import SatbedError
from satbed.net import TransparentNode
from satbed.proc import BIN_DIR, REPO_ROOT, last_line

ADAPTER_DIR = os.path.join(REPO_ROOT, "pep", "adapters")


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


class Pep:
    """One PEP on one PEP node, driven through its adapter."""

    def __init__(self, name: str, node: TransparentNode, role: str, link: LinkConfig,
                 run_dir: str, options: str = ""):
        self.name, self.node, self.role = name, node, role
        # A container node runs the image's own verbs; a namespace node the
        # repository's adapter.
        image_verbs = getattr(node.sandbox, "pep_entrypoint", None)
        self.command = list(image_verbs) if image_verbs else [check(name)]
        self.state_dir = os.path.join(run_dir, "pep", node.name)
        os.makedirs(self.state_dir, exist_ok=True)
        lan, wan = node.ports
        rate = link.rate_bps or 0
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "SATBED_PEP_LAN": node.port(lan).name,
            "SATBED_PEP_WAN": node.port(wan).name,
            "SATBED_PEP_BRIDGE": node.bridge(),
            "SATBED_RATE_BPS": str(rate),
            "SATBED_RTT_MS": f"{link.rtt_ms:g}",
            "SATBED_BER": f"{link.a_to_b.ber:g}",
            "SATBED_BUFFER_BYTES": str(link.a_to_b.queue_bytes or link.a_to_b.queue_packets * 1514),
            "SATBED_PEP_OPTS": options,
            "SATBED_STATE_DIR": self.state_dir,
            "SATBED_BIN_DIR": BIN_DIR,
            "SATBED_PEP_ROLE": role,
        }
        if image_verbs:
            # The image's own PATH and binaries, as its defaults say.
            del self.env["SATBED_BIN_DIR"], self.env["PATH"]
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
        return self._call("health", check=False).returncode == 0

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
        stats = self.stats()
        self._call("stop", timeout=30, check=False)
        self.started = False
        return stats
