import os
import signal
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

try:
    status = main()
except KeyboardInterrupt:   # a Ctrl-C as main() began or returned: nothing of it is left running
    status = 130
if status == 130:
    # main() hands back the dispositions it was given; this process only ends
    # now, and a further Ctrl-C has nothing left to stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Interrupted, and everything is torn down by now. CPython 3.11 marks a
    # Ctrl-C that lands inside eval() of a string (namedtuple and dataclasses
    # build classes so, during an import) as unhandled even once caught, and
    # would end the process by SIGINT instead of this status.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(130)
raise SystemExit(status)
