"""The PEPs satbed knows: an adapter per executable in pep/adapters/ (the one
contract every PEP plugs in through), or an image reference for the Docker backend."""

from __future__ import annotations
import re
import os
from satbed.core.errors import SatbedError
from satbed.core.proc import REPO_ROOT

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
