"""Helpers the test modules share. Integration tests build real namespaces: they need root.

A module of its own, not conftest: tests/analysis has a conftest too, and
`from conftest import` would reach whichever was imported first."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

ROOT_REASON = "needs root for network namespaces"
# tests/conftest.py marks every test carrying this skip as a `testbed` test.
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason=ROOT_REASON)


def satbed(*args: str, timeout: float = 600, check: bool = False,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the satbed command as a user would (env: variables to add)."""
    env = {**os.environ, "PYTHONPATH": REPO, **(env or {})}
    return subprocess.run(["/usr/bin/python3", "-m", "satbed", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, check=check, cwd=REPO)


def root_links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return {line.split(":")[1].strip() for line in out.splitlines()}


# Image builds, one at a time machine-wide: xdist workers (or checkouts) that need
# the images at once wait for the first build, then find them current.
IMAGES_LOCK = "/run/lock/satbed-tests-images.lock"


@contextlib.contextmanager
def images_lock() -> Iterator[None]:
    with open(IMAGES_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
