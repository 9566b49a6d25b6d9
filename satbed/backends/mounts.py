"""What a container node sees of the host (the Docker backend's bind mounts).

Each node mounts only what its own programs need, every path at the same
path inside so the paths the runner passes mean the same there. A PEP image
is a lab's code under test (pep/CONTRACT.md, "What an image can reach"): its
node gets its own state directory and nothing else. No node sees the record
directory, which `satbed clean` acts on as root, nor another run's files or
control sockets."""

from __future__ import annotations

import os
from dataclasses import dataclass

from satbed.backends import records
from satbed.core.proc import BIN_DIR, REPO_ROOT


@dataclass(frozen=True)
class Mount:
    """A host path bind-mounted at the same path inside a node."""
    path: str
    read_only: bool = False

    def args(self) -> list[str]:
        return ["-v", f"{self.path}:{self.path}" + (":ro" if self.read_only else "")]


def node_mounts(role: str, prefix: str, node: str, host_mounts: tuple[str, ...] = (), run_dir: str = "",
                link_files: tuple[str, ...] = ()) -> list[Mount]:
    """A node's mounts by its role:

    - an end host: the repository read-only (satbed's probe, trafficgen's
      tables) and host_mounts (the run directory and SATBED_DOCKER_MOUNTS:
      payloads, keys, logs of its clients and servers);
    - a PEP node: RUN/pep/<node>/, its SATBED_STATE_DIR;
    - the emulator: satemu's binary directory and the link profiles it
      reads (read-only), RUN/emulator/ (its configuration and statistics)
      and its own control-socket directory, /run/satbed/runs/<prefix>/<node>/;
    - routers and bridges: nothing (satbed configures them from the host).

    Writable directories are created here, before Docker would make them."""
    out: list[Mount] = []
    if role == "host":
        out = [Mount(REPO_ROOT, read_only=True), *(Mount(m) for m in sorted(set(host_mounts)))]
    elif role == "pep" and run_dir:
        out = [Mount(os.path.join(run_dir, "pep", node))]
    elif role == "emulator":
        out = [Mount(BIN_DIR, read_only=True), Mount(records.make_control_dir(prefix, node))]
        if run_dir:
            out.append(Mount(os.path.join(run_dir, "emulator")))
        out += [Mount(f, read_only=True) for f in sorted(set(link_files))]
    for m in out:
        if not m.read_only:
            os.makedirs(m.path, exist_ok=True)
    return out
