#!/usr/bin/python3
"""The LEO fidelity benchmark (docs/benchmarks/leo.md): how closely satemu
plays a LEO link profile, from wire captures at both ends of the satellite
link (analysis/leo_fidelity.py says how).

    scripts/leo_fidelity.py --out DIR [--delay-seconds 60] [--rate-seconds 20] [--window 1]
    scripts/leo_fidelity.py --delay-run RUN --rate-run RUN [--window 1] [--out DIR]

The first form makes two runs of scenarios/leo.yaml, one after the other
(root, the worktree's bin/), then reads them:

- delay: `--client ping` for --delay-seconds over the leo-starlink
  profile (one echo a second, each frame matched between wan_a and wan_b);
- rate: `--client nuttcp-udp` offering 60 Mbit/s over a rate profile
  that `satbed leo-profile --mahimahi` makes from a packet-delivery trace
  this script writes (DIR/steps.trace: 12, 24, 48 and 6 Mbit/s of
  1500-byte opportunities, each for a quarter of --rate-seconds), so the
  shaper, not the sender, sets the rate.

The second form reads two stored runs. Either writes DIR/fidelity.json
(both readings, every window) and prints a summary; bad input is one line
and exit status 2."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from analysis import leo_fidelity  # noqa: E402  (the checkout's own packages, after its path)
from satbed.core.errors import SatbedError  # noqa: E402
from satbed.core.files import write_json  # noqa: E402

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SATBED = [os.path.join(HERE, "scripts", "satbed")]
STEPS_MBPS = (12, 24, 48, 6)     # each a whole number of 1500-byte opportunities per 2 ms
OFFERED = "60mbit"               # above every step: the shaper's queue stays full


def steps_trace(seconds: float) -> str:
    """A Mahimahi trace (one line per 1500-byte delivery opportunity, its
    millisecond) holding each of STEPS_MBPS for a quarter of seconds."""
    lines, quarter = [], int(seconds * 1000 / len(STEPS_MBPS))
    for i, mbps in enumerate(STEPS_MBPS):
        per_2ms = mbps * 1e6 * 0.002 / (1500 * 8)      # 12 Mbit/s: 2 every 2 ms
        for ms in range(i * quarter, (i + 1) * quarter, 2):
            n = int(per_2ms)
            lines += [str(ms + 2 * j // n) for j in range(n)]     # in order: the first ms's, then the second's
    return "\n".join(lines) + "\n"


def satbed(*args: str, timeout: float) -> str:
    """Run satbed; the run directory it names on its first line."""
    try:
        cp = subprocess.run([*SATBED, *args], capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise SatbedError(f"satbed {args[0]} did not finish within {timeout:g} s") from None
    if cp.returncode != 0:
        raise SatbedError(f"satbed {' '.join(args[:3])}: exit {cp.returncode}: "
                          f"{(cp.stderr.strip().splitlines() or ['no message'])[-1]}")
    return cp.stdout.splitlines()[0].strip() if cp.stdout.strip() else ""


def make_runs(out: str, delay_s: float, rate_s: float) -> tuple[str, str]:
    runs = os.path.join(out, "runs")
    delay_run = satbed("run", "--scenario", "leo", "--client", "ping", "--time-limit", f"{delay_s:g}",
                       "--no-analysis", "--out", runs, timeout=delay_s + 600)
    trace, profile = os.path.join(out, "steps.trace"), os.path.join(out, "steps.csv")
    with open(trace, "w", encoding="utf-8") as f:
        f.write(steps_trace(rate_s))
    subprocess.run([*SATBED, "leo-profile", "--mahimahi", trace, "--out", profile], capture_output=True,
                   text=True, timeout=120, check=True)
    # Bytes for the whole rate run at the offered rate: nuttcp-udp sends them at the link's rate.
    size = f"{int(60e6 / 8 * rate_s / 1e6)}M"
    rate_run = satbed("run", "--scenario", "leo", "--client", "nuttcp-udp", "--size", size,
                      "--set", f"links.sat.profile={profile}", "--set", f"links.sat.rate={OFFERED}",
                      "--no-analysis", "--out", runs, timeout=rate_s + 600)
    return delay_run, rate_run


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="where the runs and fidelity.json go")
    p.add_argument("--delay-seconds", type=float, default=60.0)
    p.add_argument("--rate-seconds", type=float, default=20.0)
    p.add_argument("--window", type=float, default=1.0, help="the rate's window in seconds (default 1)")
    p.add_argument("--delay-run", help="a stored ping run over a delay profile")
    p.add_argument("--rate-run", help="a stored run over a rate profile, its sender above the profile's rate")
    args = p.parse_args(argv)
    try:
        stored = [r for r in (args.delay_run, args.rate_run) if r]
        if stored and len(stored) != 2:
            raise SatbedError("give --delay-run and --rate-run together")
        if not stored and not args.out:
            raise SatbedError("give --out DIR (to make the runs) or --delay-run and --rate-run")
        for name in ("delay_seconds", "rate_seconds"):
            if not 4 <= getattr(args, name) <= 3600:
                raise SatbedError(f"--{name.replace('_', '-')} {getattr(args, name):g}: give 4 to 3600 s")
        if args.out:
            os.makedirs(args.out, exist_ok=True)
        delay_run, rate_run = stored or make_runs(args.out, args.delay_seconds, args.rate_seconds)
        doc = {"delay": leo_fidelity.delay_fidelity(delay_run),
               "rate": leo_fidelity.rate_fidelity(rate_run, args.window)}
    except (SatbedError, subprocess.CalledProcessError) as e:
        print(f"leo_fidelity: {e}", file=sys.stderr)
        return 2
    if args.out:
        write_json(os.path.join(args.out, "fidelity.json"), doc)
    d, r = doc["delay"], doc["rate"]
    for name, s in (*d["one_way"].items(), ("echo RTT", d["echo_rtt"])):
        print(f"delay {name}: {s['n']} frames, error median {s['p50_ms']} ms, |error| p99 {s['p99_abs_ms']} ms, "
              f"max {s['max_abs_ms']} ms")
    print(f"rate {r['direction']}: {r['windows']} windows of {r['window_s']:g} s ({r['windows_not_saturated']} not "
          f"saturated, {r['windows_link_down']} down, left out), |error| median {r['p50_abs_error']}, "
          f"max {r['max_abs_error']}, {r['within_target']} within {r['target']:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
