"""Subprocess helpers: every external command runs with a timeout and fails
with one clear line instead of a traceback."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from typing import Sequence

from satbed.core.errors import SatbedError

# Where `make build` puts our Go binaries.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN_DIR = os.path.join(REPO_ROOT, "bin")


def require_root() -> None:
    if os.geteuid() != 0:
        raise SatbedError("satbed needs root (network namespaces, veth, tc): run it with sudo or as root")


def require_tools(*names: str) -> None:
    missing = [n for n in names if shutil.which(n) is None]
    if missing:
        raise SatbedError(f"missing tool(s): {', '.join(missing)} (run `make deps` to install them)")


def our_binary(name: str) -> str:
    path = os.path.join(BIN_DIR, name)
    if not os.access(path, os.X_OK):
        raise SatbedError(f"missing binary {path} (run `make build`)")
    return path


def run(args: Sequence[str], timeout: float = 30, check: bool = True,
        input: str | None = None) -> subprocess.CompletedProcess:
    """Run a command in the root namespace."""
    try:
        cp = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, input=input)
    except FileNotFoundError:
        raise SatbedError(f"missing tool: {args[0]}") from None
    except subprocess.TimeoutExpired:
        raise SatbedError(f"command timed out after {timeout:g}s: {' '.join(args)}") from None
    if check and cp.returncode != 0:
        raise SatbedError(f"command failed ({cp.returncode}): {' '.join(args)}: {last_line(cp.stderr or cp.stdout)}")
    return cp


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


# A CLI may end a failure with a pointer to its help ("See 'docker run --help'."
# or "Run 'docker run --help' for more information"), which says nothing of why.
_HELP_POINTER = re.compile(r"^(See|Run) '[\w -]*--help'")


def cli_reason(text: str) -> str:
    """A command-line tool's own reason for a failure: its last line that is
    not a pointer to its help."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip() and not _HELP_POINTER.match(ln.strip())]
    return lines[-1] if lines else last_line(text)
