"""The one exception type the CLI turns into a single clear error line."""

from __future__ import annotations

import sys
from typing import Callable


class SatbedError(Exception):
    """A user-facing failure: bad input, missing tool, failed transfer.

    Its text is one line whatever it quotes: a newline in a user's key or
    value, or in a tool's output, is shown escaped."""

    def __str__(self) -> str:
        return super().__str__().replace("\r", "\\r").replace("\n", "\\n")


def error_line(e: SatbedError) -> int:
    """Say a SatbedError as the CLI does (one line on stderr); exit status 2."""
    print(f"satbed: error: {e}", file=sys.stderr)
    return 2


def one_line_errors(body: Callable[[], int]) -> int:
    """A command's body, with a SatbedError said in one line (exit status 2)
    instead of a traceback: the entry points other than the CLI use it."""
    try:
        return body()
    except SatbedError as e:
        return error_line(e)
