"""The client contract: an adapter starts its server on one end host, runs its
client on the other, and reports start, end, bytes and errors as metrics."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass

from satbed.backends.clients.payload import PayloadCache
from satbed.backends.net import Host
from satbed.core.settings import Settings


@dataclass
class ClientContext:
    ground: Host            # Client A
    aircraft: Host          # Client B
    direction: str          # "download": aircraft sends to ground; "upload": the reverse
    size_bytes: int
    run_dir: str
    rate_bps: int | None    # the satellite link's sustained rate, for timeouts
    rtt_ms: float
    seed: int = 1
    keep_files: bool = False        # keep payload files after verification (also SATBED_KEEP_FILES=1)
    timeout_s: float | None = None  # overrides the transfer bound (also SATBED_TRANSFER_TIMEOUT=seconds)
    # A measurement window: a transfer still running after it is stopped and
    # measured by the bytes it delivered (a stalled TCP at 11% frame loss would
    # otherwise take hours for 100 MB). None: every transfer runs to completion.
    time_limit_s: float | None = None
    # The receive buffer the client tool asks for (SO_RCVBUF; the kernel
    # doubles it), for tools that size their own: 0 leaves it to the tool.
    rcvbuf: int = 0
    # Payloads a matrix's earlier cells made (a cell of one size and seed
    # links theirs); None: each transfer makes its own.
    payloads: PayloadCache | None = None

    def __post_init__(self) -> None:
        # Tools run with other working directories (sshd in /): never a relative path.
        if not os.path.isabs(self.run_dir):
            raise ValueError(f"ClientContext.run_dir must be absolute, got {self.run_dir!r}")

    @property
    def sender(self) -> Host:
        return self.aircraft if self.direction == "download" else self.ground

    @property
    def receiver(self) -> Host:
        return self.ground if self.direction == "download" else self.aircraft

    def path(self, *parts: str) -> str:
        p = os.path.join(self.run_dir, *parts)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        return p

    def transfer_timeout(self, floor_bps: float = 100_000) -> float:
        """A bound on how long a transfer may take: generous (a buffer-limited
        FTP at 600 ms is slow) but finite, so a stalled transfer never hangs."""
        override = self.timeout_s or Settings.from_environ().transfer_timeout_s
        if override:
            return float(override)
        return stall_limit(self.size_bytes, self.rtt_ms, self.rate_bps, floor_bps)


def stall_limit(size_bytes: int, rtt_ms: float, rate_bps: float | None, floor_bps: float = 100_000) -> float:
    """Seconds a transfer may take before it counts as stalled: the size at a
    twentieth of the link rate (at least floor_bps), plus handshakes."""
    rate = max(floor_bps, (rate_bps or 1e9) / 20)
    return 60 + 10 * rtt_ms / 1000 + size_bytes * 8 / rate


class Client(ABC):
    name: str = ""
    tools: tuple[str, ...] = ()     # binaries that must exist on the end hosts
    tcp: bool = True
    interactive: bool = False
    rcvbuf_directions: tuple[str, ...] = ()     # where the tool can be told its receive buffer

    @abstractmethod
    def run(self, ctx: ClientContext) -> dict:
        """Run one measurement; return the metrics for result.json."""
