"""The guard at the top of every entry point: whatever goes wrong ends in
one line on stderr, never a traceback in front of the user.

- SatbedError (bad input, a missing tool, a failed transfer): its one line,
  exit status 2.
- KeyboardInterrupt: left to the caller, whose handling (status 130, the
  teardown already done) is the command's own.
- Anything else is a bug in satbed: one line saying so and where the
  traceback was saved, exit status 70 (EX_SOFTWARE). SATBED_DEBUG=1 prints
  the traceback as well, for whoever fixes it.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable

from satbed.core.errors import SatbedError, error_line

BUG_EXIT = 70           # sysexits.h EX_SOFTWARE: an internal error
DEBUG_ENV = "SATBED_DEBUG"


def debugging() -> bool:
    # Read here, not through Settings: the guard must work when the settings themselves are broken.
    return os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "yes", "true")


def save_traceback(exc: BaseException, where: str | None = None) -> str | None:
    """Write the traceback to a file (in `where` when given and writable, else
    the temporary directory); its path, or None when nothing could be written."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    header = f"satbed {' '.join(sys.argv)}\n{time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n\n"
    for directory in filter(None, (where, tempfile.gettempdir())):
        try:
            fd, path = tempfile.mkstemp(prefix="satbed-bug-", suffix=".txt", dir=directory)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(header + text)
            return path
        except OSError:
            continue
    return None


def bug_line(exc: BaseException, where: str | None = None) -> int:
    """Say an unexpected exception as a bug, in one line; exit status 70."""
    sys.stdout.flush()
    path = save_traceback(exc, where)
    if debugging():
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    what = f"{type(exc).__name__}: {exc}".replace("\r", "\\r").replace("\n", "\\n")[:300]
    saved = f"traceback in {path}" if path else "the traceback could not be saved"
    print(f"satbed: internal error (a bug in satbed, please report it): {what}; {saved}"
          f"{'' if debugging() else f' (or rerun with {DEBUG_ENV}=1)'}", file=sys.stderr)
    return BUG_EXIT


def guarded(body: Callable[[], int], where: Callable[[], str | None] = lambda: None) -> int:
    """body(), with every exception but KeyboardInterrupt and SystemExit said
    in one line: SatbedError exit 2, anything else a bug (exit 70).
    where: the directory the traceback of a bug belongs in (a run's), if any."""
    try:
        return body()
    except SatbedError as e:
        return error_line(e)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as e:  # the last line of defence: never a traceback
        return bug_line(e, where())
