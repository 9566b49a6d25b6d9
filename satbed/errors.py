"""The one exception type the CLI turns into a single clear error line."""


class SatbedError(Exception):
    """A user-facing failure: bad input, missing tool, failed transfer."""
