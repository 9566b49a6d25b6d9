import sys

try:
    from satbed.cli import main
except KeyboardInterrupt:   # Ctrl-C while Python loads: nothing was started yet
    print("satbed: interrupted", file=sys.stderr)
    raise SystemExit(130) from None

raise SystemExit(main())
