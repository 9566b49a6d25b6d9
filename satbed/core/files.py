"""The one way satbed writes a file others read: whole or not at all (a
temporary file beside it, then rename), readable by everyone."""

from __future__ import annotations

import json
import os
import tempfile


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
