"""The one exception type the CLI turns into a single clear error line."""


class SatbedError(Exception):
    """A user-facing failure: bad input, missing tool, failed transfer.

    Its text is one line whatever it quotes: a newline in a user's key or
    value, or in a tool's output, is shown escaped."""

    def __str__(self) -> str:
        return super().__str__().replace("\r", "\\r").replace("\n", "\\n")
