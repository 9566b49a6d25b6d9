"""`/usr/bin/python3 -m analysis RUN_DIR`: analyse a run and write its HTML report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .report import analyze_run, write_report
from .tsg import Window


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m analysis",
                                 description="Run tcptrace on RUN_DIR/captures/*.pcap, store "
                                             "analysis.json, graphs and report.html.")
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--window", nargs=2, type=float, metavar=("START_S", "DURATION_S"),
                    help="zoomed time-sequence window in seconds from the run's first "
                         "captured packet, the same absolute time at every capture point "
                         "(default: config.json tsg_window, else around the first retransmission)")
    ap.add_argument("--report-only", action="store_true",
                    help="redraw the report from stored analysis files without re-running tcptrace")
    args = ap.parse_args(argv)
    run: Path = args.run_dir
    if not run.is_dir():
        print(f"error: not a run directory: {run}", file=sys.stderr)
        return 2
    window = Window(*args.window) if args.window else None
    if args.window and args.window[1] <= 0:
        print("error: window duration must be positive", file=sys.stderr)
        return 2
    if not args.report_only:
        # Graphs are drawn once, by write_report.
        analyze_run(run, graphs=False, window=window)
    print(write_report(run, window=window))
    return 0


if __name__ == "__main__":
    sys.exit(main())
