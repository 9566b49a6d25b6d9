"""The one way satbed writes a file others read: whole or not at all (a
temporary file beside it, then rename), readable by everyone."""

from __future__ import annotations

import json
import os
import stat
import tempfile
from typing import Iterator

from satbed.core.errors import SatbedError


def write_text(path: str | os.PathLike, text: str) -> None:
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix="." + os.path.basename(path) + ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)    # mkstemp makes 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_json(path: str | os.PathLike, doc: object) -> None:
    write_text(path, json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")


def read_regular(path: str | os.PathLike, what: str, limit: int) -> bytes:
    """A regular file's bytes, at most limit of them, or one SatbedError line
    naming the path. A FIFO, a socket or a device is refused before it is
    read (reading a FIFO blocks until a writer comes, a device may never end)."""
    path = os.fspath(path)
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise SatbedError(f"{path}: a directory, not a {what}")
        if not stat.S_ISREG(st.st_mode):
            raise SatbedError(f"{path}: not a regular file (a FIFO, socket or device): refused as {what}")
        # O_NONBLOCK: should the path have become a FIFO since the stat, open does not wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        raise SatbedError(f"{path}: no such {what}") from None
    except OSError as e:
        raise SatbedError(f"{path}: cannot read the {what}: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SatbedError(f"{path}: not a regular file, not a {what}")
        try:
            data = f.read(limit + 1)
        except OSError as e:
            raise SatbedError(f"{path}: cannot read the {what}: {e.strerror}") from None
    if len(data) > limit:
        raise SatbedError(f"{path}: a {what} larger than {limit} bytes: refused")
    return data


def read_json(path: str | os.PathLike, what: str, limit: int = 64 << 20) -> object:
    """A JSON file satbed or a tool wrote, or one SatbedError line saying it is damaged."""
    data = read_regular(path, what, limit)
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise SatbedError(f"{os.fspath(path)}: a damaged {what} (not JSON: {str(e)[:100]})") from None


def jsonl_records(path: str | os.PathLike) -> Iterator[dict]:
    """The records of a JSON-lines file that a program of the testbed wrote
    while running: a line that is not a JSON object (the torn last line of a
    killed process) is skipped, not fatal. OSError is the caller's."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(rec, dict):
                yield rec
