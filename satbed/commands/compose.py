"""`satbed compose`: the standing test bed of docker-compose.yml (backends/compose.py)
driven from the command line: up, swap PEPs, change the link live, status, down."""

from __future__ import annotations

import argparse
import json
import sys
import time

from satbed.backends.compose import Standing
from satbed.core.errors import SatbedError
from satbed.core.units import parse_ber, parse_delay_ms, parse_rate


def _link_params(args: argparse.Namespace) -> dict:
    """Control-socket parameters (both directions) from link options."""
    p: dict = {}
    if args.rate is not None:
        p["rate_bps"] = parse_rate(args.rate)
        p["ceil_bps"] = parse_rate(args.ceil) if args.ceil else p["rate_bps"]
    elif args.ceil is not None:
        p["ceil_bps"] = parse_rate(args.ceil)
    if args.rtt is not None:
        p["delay_ms"] = parse_delay_ms(args.rtt, "RTT") / 2
    if args.ber is not None:
        p["ber"] = parse_ber(args.ber)
    if getattr(args, "queue", None) is not None:
        if args.queue < 1:
            raise SatbedError(f"--queue must be at least 1 packet, got {args.queue}")
        p["queue_packets"] = args.queue
    if getattr(args, "outage", None) is not None:
        p["outage"] = _outage(args.outage)
    return p


def _outage(text: str) -> dict | None:
    if text == "off":
        return None
    parts = text.split(":")
    try:
        vals = [float(x) for x in parts]
    except ValueError:
        vals = []
    if len(vals) not in (2, 3) or not all(v >= 0 for v in vals) or vals[0] <= 0 or vals[1] > vals[0]:
        raise SatbedError(f"--outage {text!r}: give PERIOD_S:DOWN_S[:OFFSET_S] (down <= period) or off")
    return {"period_s": vals[0], "down_s": vals[1], "offset_s": vals[2] if len(vals) == 3 else 0.0}


def _compose_link_vars(args: argparse.Namespace) -> dict[str, str]:
    out = {}
    if args.rate is not None:
        out["RATE_BPS"] = str(parse_rate(args.rate))
        out["CEIL_BPS"] = str(parse_rate(args.ceil)) if args.ceil else out["RATE_BPS"]
    elif args.ceil is not None:
        out["CEIL_BPS"] = str(parse_rate(args.ceil))
    if args.rtt is not None:
        out["RTT_MS"] = f"{parse_delay_ms(args.rtt, 'RTT'):g}"
    if args.ber is not None:
        out["BER"] = f"{parse_ber(args.ber):g}"
    return out


def _fmt_link(link: dict) -> str:
    d = link.get("a_to_b") if isinstance(link, dict) else None
    if not d:
        return str(link.get("error", "unknown")) if isinstance(link, dict) else "unknown"
    text = (f"{d['rate_bps'] / 1e6:g} Mbit/s (ceil {d['ceil_bps'] / 1e6:g}), RTT {2 * d['delay_ms']:g} ms, "
            f"BER {d['ber']:g}, queue {d['queue_packets']} packets")
    if d.get("outage"):
        o = d["outage"]
        text += f", outage {o['down_s']:g} s every {o['period_s']:g} s"
    return text


def print_status(st: dict) -> None:
    for name, node in st["nodes"].items():
        line = f"{name:<9} {node['state']:<8} {node.get('image', '')}"
        if "pep_options" in node:
            line += f"  options: {node['pep_options'] or '-'}"
        stats = node.get("stats")
        if stats:
            line += (f"  split {stats.get('connections_split')}, active {stats.get('connections_active')}"
                     if "error" not in stats else f"  stats: {stats['error']}")
        print(line)
    bad = [k for k, ok in st.get("links", {}).items() if not ok]
    print(f"wiring    {'all ' + str(len(st.get('links', {}))) + ' links wired' if not bad else 'UNWIRED: ' + ', '.join(bad)}")
    if "link" in st:
        print(f"link      {_fmt_link(st['link'])}")


def print_settled(res: dict) -> None:
    print_status(res)
    p = res["path"]
    split = ", ".join(f"{n} {v}" for n, v in p["split"].items())
    rtt = f"ping {p['rtt_ms']:.1f} ms, " if p.get("rtt_ms") is not None else ""
    print(f"path      clientA -> clientB: {rtt}{p['tcp_bytes'] >> 10} KiB over TCP intact; split: {split}")


def build_parser(sub) -> None:
    c = sub.add_parser("compose", help="the standing testbed (docker-compose.yml): up, swap PEPs, link, status, down")
    c.add_argument("--project", default=None, help="compose project name (default $COMPOSE_PROJECT_NAME or satbed)")
    cs = c.add_subparsers(dest="action", required=True)

    def link_opts(p, live: bool) -> None:
        p.add_argument("--rate", help="rate each way, e.g. 8mbit")
        p.add_argument("--ceil", help="HTB ceil (default: the rate)")
        p.add_argument("--rtt", help="round-trip delay in ms")
        p.add_argument("--ber", help="bit-error rate")
        if live:
            p.add_argument("--queue", type=int, help="bottleneck queue in packets")
            p.add_argument("--outage", help="PERIOD_S:DOWN_S[:OFFSET_S], or off")

    up = cs.add_parser("up", help="bring it up (or bring it to these settings), wire it, check the path")
    up.add_argument("--pep", help="PEP image (or adapter name: pepd, none) for both PEP nodes")
    up.add_argument("--pep-a", help="PEP image for pepA only")
    up.add_argument("--pep-b", help="PEP image for pepB only")
    up.add_argument("--pep-options", default=None, help="key=value options for the PEPs")
    link_opts(up, live=False)
    up.add_argument("--json", action="store_true", help="print the result as JSON")
    sw = cs.add_parser("swap", help="replace the PEP image on one or both PEP nodes; hosts and emulator stay up")
    sw.add_argument("image", help="PEP image (satbed/pep-none:latest, lab/pep:1) or adapter name (pepd, none)")
    sw.add_argument("--side", choices=("a", "b", "both"), default="both")
    sw.add_argument("--pep-options", default="", help="key=value options for the new PEP (default none)")
    sw.add_argument("--json", action="store_true", help="print the result as JSON")
    st = cs.add_parser("status", help="images, wiring, link settings, PEP stats")
    st.add_argument("--json", action="store_true")
    lk = cs.add_parser("link", help="change the link live through the emulator's control socket")
    link_opts(lk, live=True)
    cs.add_parser("wire", help="rewire the chain and check the path (what docker/wire.sh does)")
    cs.add_parser("down", help="remove the containers (the veths go with them)")
    c.set_defaults(fn=main)


def main(args: argparse.Namespace) -> int:
    try:
        return _main(args)
    except KeyboardInterrupt:
        # Not a per-run testbed: nothing is torn down.
        print("satbed: interrupted; the standing testbed is left as it is (`satbed compose status`, "
              "`satbed compose wire` to finish wiring)", file=sys.stderr)
        return 130


def _main(args: argparse.Namespace) -> int:
    bed = Standing(args.project)
    if args.action == "up":
        if args.pep and (args.pep_a or args.pep_b):
            raise SatbedError("give --pep, or --pep-a/--pep-b, not both")
        started = time.monotonic()
        res = bed.up(args.pep_a or args.pep, args.pep_b or args.pep, args.pep_options, _compose_link_vars(args))
        res["seconds"] = round(time.monotonic() - started, 1)
        if args.json:
            print(json.dumps(res, sort_keys=True))
        else:
            print_settled(res)
            print(f"up in {res['seconds']:.0f} s (project {bed.project})")
    elif args.action == "swap":
        started = time.monotonic()
        res = bed.swap(args.image, args.side, args.pep_options)
        res["seconds"] = round(time.monotonic() - started, 1)
        if args.json:
            print(json.dumps(res, sort_keys=True))
        else:
            print_settled(res)
            print(f"swapped in {res['seconds']:.0f} s")
    elif args.action == "status":
        st = bed.status()
        if args.json:
            print(json.dumps(st, indent=2, sort_keys=True))
        else:
            print_status(st)
    elif args.action == "link":
        params = _link_params(args)
        if not params:
            raise SatbedError("nothing to change: give --rate, --ceil, --rtt, --ber, --queue or --outage")
        print(f"link      {_fmt_link(bed.set_link(params))}")
    elif args.action == "wire":
        res = bed.settle([])
        print_settled(res)
    elif args.action == "down":
        gone = bed.down()
        print(f"removed {len(gone)} container(s) of project {bed.project}")
    return 0
