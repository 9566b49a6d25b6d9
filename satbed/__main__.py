import os
import sys

from satbed.core.crash import bug_line
from satbed.core.errors import SatbedError, error_line

try:
    from satbed.cli import main
except KeyboardInterrupt:   # Ctrl-C while Python loads: nothing was started yet
    print("satbed: interrupted", file=sys.stderr)
    raise SystemExit(130) from None
except SatbedError as e:    # a lab's client adapter that does not load, found at import
    raise SystemExit(error_line(e)) from None
except Exception as e:      # the guard in main() is not running yet
    raise SystemExit(bug_line(e)) from None

status = main()
if status == 130:
    # Interrupted, and everything is torn down by now. CPython 3.11 marks a
    # Ctrl-C that lands inside eval() of a string (namedtuple and dataclasses
    # build classes so, during an import) as unhandled even once caught, and
    # would end the process by SIGINT instead of this status.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(130)
raise SystemExit(status)
