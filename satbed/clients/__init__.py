"""Client adapters: one per tool, all behind the contract in satbed.clients.base,
found by name in REGISTRY."""

from __future__ import annotations

from satbed.clients.base import Client, ClientContext
from satbed.clients.ftp import Ftp
from satbed.clients.http import Wget
from satbed.clients.interactive import Ssh, Telnet
from satbed.clients.iperf3 import Iperf3
from satbed.clients.nuttcp import NuttcpTcp, NuttcpUdp
from satbed.clients.ping import Ping
from satbed.clients.saratoga import Saratoga
from satbed.clients.ssh import Rsync, Scp, Sftp
from satbed.errors import SatbedError

REGISTRY: dict[str, type[Client]] = {cls.name: cls for cls in (
    Ping, Ftp, Scp, Sftp, Rsync, Wget, NuttcpTcp, NuttcpUdp, Iperf3, Saratoga, Telnet, Ssh)}


def get(name: str) -> Client:
    """The adapter for a client name. Instantiating checks its tools, so a
    missing one fails here, before any testbed is built."""
    try:
        cls = REGISTRY[name]
    except KeyError:
        raise SatbedError(f"unknown client {name!r} (known: {', '.join(sorted(REGISTRY))})") from None
    return cls()


__all__ = ["Client", "ClientContext", "REGISTRY", "get"]
