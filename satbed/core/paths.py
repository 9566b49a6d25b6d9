"""Where results go: every directory satbed writes is made absolute once, at
the entry points (tools run with other working directories: sshd in /), and
checked before a testbed is built, so a bad --out is one line, not a
traceback halfway through a run."""

from __future__ import annotations

import os
import shutil

from satbed.core.errors import SatbedError

DISK_MARGIN_BYTES = 512 << 20       # captures, logs and the filesystem's own needs


def results_dir(path: str, what: str = "--out") -> str:
    """The absolute path of a directory satbed may write into, created if absent."""
    if not path or not path.strip():
        raise SatbedError(f"{what} must name a directory")
    path = os.path.abspath(path)
    try:
        os.makedirs(path, exist_ok=True)
    except FileExistsError:
        raise SatbedError(f"{what} {path} exists and is not a directory") from None
    except OSError as e:
        raise SatbedError(f"{what} {path}: cannot create the directory: {e.strerror}") from None
    if not os.path.isdir(path):
        raise SatbedError(f"{what} {path} is not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise SatbedError(f"{what} {path} is not writable")
    probe = os.path.join(path, f".satbed-write-test-{os.getpid()}")
    try:
        with open(probe, "w", encoding="ascii"):
            pass
        os.unlink(probe)
    except OSError as e:     # read-only mounts pass os.access as root
        raise SatbedError(f"{what} {path} is not writable: {e.strerror}") from None
    return path


def private_dir(path: str) -> str:
    """Create path as a run directory only its owner can enter, whatever the
    umask: it holds payloads and ssh keys. The servers that read from it
    (lighttpd, vsftpd) start as root and chroot into their document roots
    before dropping privileges, so 0700 does not lock them out; a lab shares
    results with chmod."""
    os.makedirs(path, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def require_space(path: str, needed_bytes: int, what: str) -> None:
    """One line when the filesystem holding path cannot take needed_bytes."""
    free = shutil.disk_usage(path).free
    if needed_bytes + DISK_MARGIN_BYTES > free:
        raise SatbedError(f"{what} needs {needed_bytes / 2**30:.1f} GiB but {path} has "
                          f"{free / 2**30:.1f} GiB free")
