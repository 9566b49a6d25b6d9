"""Client adapters: one per tool, all behind the contract in satbed.clients.base,
found by name in REGISTRY."""

from __future__ import annotations

from satbed.clients.base import Client, ClientContext
from satbed.clients.ping import Ping
from satbed.errors import SatbedError

REGISTRY: dict[str, type[Client]] = {cls.name: cls for cls in (Ping,)}


def get(name: str) -> Client:
    try:
        return REGISTRY[name]()
    except KeyError:
        raise SatbedError(f"unknown client {name!r} (known: {', '.join(sorted(REGISTRY))})") from None


__all__ = ["Client", "ClientContext", "REGISTRY", "get"]
