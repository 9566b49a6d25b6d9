"""satbed's command line. Every failure the user can cause ends in one line
on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
from collections.abc import Callable
from typing import Any

import yaml
from mininet.cli import CLI
from mininet.log import setLogLevel

from analysis import outage
from analysis import report as run_report
from analysis.tsg import Window
from satbed import __version__, worker
from satbed.backends import ansible, clients, docker, records
from satbed.backends.ansible import INVENTORY_ENV
from satbed.backends.nodeshell import NodeShell
from satbed.backends.testbed import Testbed, clean, running
from satbed.commands import compose, leo
from satbed.core import crash, signals
from satbed.core.errors import SatbedError
from satbed.core.proc import require_root
from satbed.core.settings import Settings
from satbed.execution import cellgroup, checklink, estimate, fidelity, matrix, pepcheck, runner, supervisor
from satbed.execution.slurm import SlurmExecutor
from satbed.model import experiment, params, scenario, topology
from satbed.model.config import RunConfig
from satbed.model.link import LinkConfig
from satbed.report import globalhawk, page, summary
from satbed.results import keep, rundir
from satbed.results.store import MEASURED, UNAVAILABLE


def _terminate(signum, frame):
    # SIGTERM unwinds like Ctrl-C, so every finally: teardown runs.
    raise SystemExit(128 + signum)


def link_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("satellite link")
    g.add_argument("--rate", help="sustained rate each way, e.g. 8mbit (default: the study's HTB, "
                                  "8mbit ceil 10mbit cburst 128k)")
    g.add_argument("--ceil", help="HTB ceil (default: the rate)")
    g.add_argument("--rtt", default="0", help="round-trip delay in ms (split evenly), default 0")
    g.add_argument("--ber", default="0", help="bit-error rate on both directions, default 0")
    g.add_argument("--loss", default="0", help="per-packet loss probability on both directions, default 0")
    g.add_argument("--queue", type=int, default=None, help="bottleneck queue in packets (default 1000)")
    g.add_argument("--emulator", default="auto", choices=("auto", "userspace", "tc", "bridge"),
                   help="auto: tc where the kernel has netem, else userspace")
    g.add_argument("--seed", type=int, default=1, help="seed for errors and file contents")


def _flag_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """A parameter's flag text parser, its ValueError argparse's one line."""
    if parse is str:
        return str

    def flag(v: str) -> Any:
        try:
            return parse(v)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    flag.__name__ = getattr(parse, "__name__", "value")
    return flag


def link_from(args: argparse.Namespace):
    extra = {"queue_packets": args.queue} if args.queue is not None else {}
    return LinkConfig.symmetric(rate=args.rate, rtt_ms=args.rtt, ber=args.ber, loss=args.loss, ceil=args.ceil,
                                backend=args.emulator, seed=args.seed, **extra)


def run_config(args: argparse.Namespace) -> RunConfig:
    """`satbed run`'s configuration through the one parameter table and the
    path a matrix cell takes (params.resolve, experiment.run_config):
    defaults, then the scenario's values, then its --set paths, then the
    flags actually typed (a flag not typed is absent from args)."""
    typed = {k: getattr(args, k) for k in params.PARAMS if hasattr(args, k)}
    scenario_params: dict = {}
    if args.scenario:
        if "topology" in typed:
            raise SatbedError("--scenario names its own topology; drop --topology")
        scenario_params = scenario.load(args.scenario).params
    elif args.set:
        raise SatbedError("--set changes a scenario: give --scenario too")
    paths: dict = {}
    for item in args.set or []:
        path, eq, text = item.partition("=")
        if not eq or "." not in path:
            raise SatbedError(f"--set {item!r}: give PATH=VALUE, e.g. links.sat.ber=1e-5")
        try:
            paths[path] = yaml.safe_load(text)
        except yaml.YAMLError:
            raise SatbedError(f"--set {item!r}: the value is not valid YAML") from None
    values = params.resolve([("", scenario_params), ("--", paths), ("--", typed)], clients.REGISTRY,
                            base={**params.defaults(), "graphs": True})
    values["analyze"] = values["analyze"] and not args.no_analysis
    try:
        return experiment.run_config(values, 0, clients.REGISTRY)
    except SatbedError as e:
        # Cross-references (links.sat, profiles.h1) are the scenario file's: say which file.
        path = values.get("scenario")
        if path and not str(e).startswith(path):
            raise SatbedError(f"{path}: {e}") from None
        raise


def cmd_run(args: argparse.Namespace) -> int:
    cfg = run_config(args)
    run_dir, result = runner.run(cfg, args.out, backend=args.backend)
    if cfg.analyze and cfg.captures != "none":
        worker.analyze(run_dir, cfg)
    print(run_dir)
    summary = {k: result[k] for k in ("client", "goodput_bps", "integrity", "tcp_connect_ms",
                                      "rtt_ms_avg", "rtt_ms_max", "loss", "bytes", "seconds",
                                      "keystrokes", "keystroke_ms_avg", "keystroke_ms_p50",
                                      "time_limited", "prefix_integrity", "cpu_client_s", "cpu_server_s",
                                      "first_byte_s", "goodput_after_first_byte_bps")
               if k in result}
    print(json.dumps(summary, sort_keys=True))
    if result.get("time_limited"):
        print(f"satbed: time limit: {cfg.client} stopped after {result['seconds']:.0f} s with "
              f"{result['bytes']} of {result['bytes_expected']} bytes delivered (prefix integrity "
              f"{result['prefix_integrity']}); goodput is measured over the limit", file=sys.stderr)
    return 0 if result.get("integrity", "ok") in ("ok", "incomplete") else 1


def cmd_cli(args: argparse.Namespace) -> int:
    spec = topology.load(args.topology)
    if args.backend == "docker":
        tb = Testbed(spec)
        try:
            tb.start(backend=docker.DockerBackend())
            NodeShell(tb).cmdloop()
        finally:
            tb.stop()
        return 0


    with running(spec) as tb:
        print(f"satbed testbed {tb.prefix} up: {', '.join(tb.nodes)}. Try `clientA ping clientB`.")
        setLogLevel("output")     # the CLI prints through Mininet's log
        CLI(tb.mininet())
    return 0


def cmd_check_link(args: argparse.Namespace) -> int:
    out = checklink.check(link_from(args), seconds=args.seconds, probes=args.probes)
    if args.json:
        print(json.dumps(out, indent=2, sort_keys=True))
        return 0
    cfg = out["configured"]
    print(f"emulator backend: {out['emulator']}")
    if "udp_wire_bps" in out:
        print(f"rate: configured {cfg['rate_bps']:.0f} bit/s, UDP goodput {out['udp_goodput_bps']:.0f}, "
              f"on the wire {out['udp_wire_bps']:.0f}, expected after bit errors "
              f"{out['udp_wire_expected_bps']:.0f} ({100 * out['udp_wire_error']:+.2f}%)")
    print(f"RTT: configured {cfg['rtt_ms']:g} ms, idle avg {out['rtt_ms_avg']:.2f} p99 {out['rtt_ms_p99']:.2f}"
          + (f", loaded avg {out['rtt_loaded']['rtt_ms_avg']:.2f} p99 {out['rtt_loaded']['rtt_ms_p99']:.2f}"
             if "rtt_loaded" in out and "rtt_ms_avg" in out["rtt_loaded"] else ""))
    for size, p in out["per"].items():
        print(f"PER {size:>4} B: measured {p['per_measured']:.5f}, formula {p['per_expected']:.5f} "
              f"(95% {p['ci95'][0]:.5f}..{p['ci95'][1]:.5f}) {'ok' if p['inside_ci95'] else 'OUTSIDE'}")
    return 0


def cmd_matrix(args: argparse.Namespace) -> int:
    if args.jobs is not None and args.jobs < 1:
        raise SatbedError(f"--jobs must be at least 1, got {args.jobs}")
    if args.partition and args.executor != "slurm":
        raise SatbedError("--partition goes with --executor slurm")
    executor = SlurmExecutor(args.partition) if args.executor == "slurm" else None
    exp = matrix.load(args.file, args.backend, args.repetitions, args.variant or ())
    if args.fidelity and executor is not None:
        doc = fidelity.node_fidelity(exp, args.out, executor)
        return 0 if doc["agree"] else 1
    if args.fidelity:
        fidelity.fidelity(exp, args.out, args.jobs, backend=args.backend)
        return 0
    if args.estimate:
        est = estimate.wall_estimate(exp, args.estimate, args.jobs)
        print(json.dumps(est, sort_keys=True))
        return 0
    try:
        counts = supervisor.run_matrix(exp, args.out, args.jobs, args.backend, retry=args.retry,
                                       batch=not args.no_batch, executor=executor)
    except KeyboardInterrupt:
        print("satbed: interrupted; running cells stopped" + (", the Slurm array cancelled" if executor else
              ", testbeds removed") + "; run again to resume", file=sys.stderr)
        return 130
    rows = supervisor.rows_of(exp, args.out)
    print(summary.terminal_summary(rows, reference=exp.reference), file=sys.stderr)
    print(json.dumps(counts, sort_keys=True))
    # limited is a measurement (what arrived within the time limit); failed,
    # timed-out or interrupted cells are not, whichever run of the matrix left them.
    # Unavailable ones are no failure: their PEP is not installed here, and the
    # summary says so; a later run runs them.
    bad = [r for r in rows if r.status not in MEASURED and r.status != UNAVAILABLE]
    missing = sum(r.status == UNAVAILABLE for r in rows)
    if missing:
        print(f"satbed: {missing} of {len(rows)} cells unavailable here (see above); run the matrix again "
              "once their PEP is installed", file=sys.stderr)
    if bad:
        print(f"satbed: {len(bad)} of {len(rows)} cells did not measure (see above; "
              f"`satbed matrix {args.file} --out {args.out} --retry` reruns them)", file=sys.stderr)
        return 1
    return 0


def cmd_study_page(args: argparse.Namespace) -> int:
    """A study's page, its generated part rewritten from stored runs: the Global
    Hawk study's, or the page of a study plug-in (satbed/report/studies) named by --page."""
    # Results outside the working tree are named by their directory's name: the page is published.
    shown = [os.path.basename(os.path.normpath(d)) if os.path.relpath(d).startswith("..") else os.path.relpath(d)
             for d in args.dirs]
    command = " ".join(["satbed study-page", *shown, "--page", args.page])
    print(globalhawk.write_page(args.dirs, args.page, command))
    return 0


def cmd_keep(args: argparse.Namespace) -> int:
    """A matrix run kept for a study page (satbed/results/keep.py)."""
    print(json.dumps(keep.keep(args.src, args.dest)))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """A run directory gets its own report (redrawn from the stored captures
    and xplot files); a matrix directory gets the charts."""
    window = None
    if args.window is not None:
        if not args.window[1] > 0 or not args.window[0] >= 0:
            raise SatbedError("--window START_S DURATION_S: start >= 0 and duration > 0 seconds")
        window = Window(*args.window)
    if not os.path.isdir(args.dir):
        what = "not a directory" if os.path.lexists(args.dir) else "no such directory"
        raise SatbedError(f"{args.dir or repr(args.dir)}: {what} (give a run directory or a matrix's --out)")
    if os.path.lexists(os.path.join(args.dir, "result.json")):
        rundir.check(args.dir)      # a damaged or foreign run directory: one line naming the file
        # write_report analyses first when the stored analysis is missing or stale.
        print(run_report.write_report(args.dir, window=window))
        return 0
    if window is not None:
        raise SatbedError("--window applies to a run directory's report, not a matrix's")
    print(page.build(args.dir))
    outage_page = outage.study_page(args.dir)      # the outage study's page, when the matrix has its runs
    if outage_page is not None:
        print(outage_page)
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    require_root()
    done = []
    remote_error: SatbedError | None = None
    if args.backend == "ansible":
        # First, while the killed runs' directories (a PEP's state) are intact.
        live = {r.prefix for r in records.scan() if isinstance(r, records.RunRecord) and r.owner_alive()}
        try:
            done += ansible.clean(Settings.from_environ().inventory, live)
        except SatbedError as e:
            # A bad inventory must not keep this machine's leftovers: they are cleaned, then it is said.
            remote_error = e
    done += clean()
    done += [f"control group {g} removed" for g in cellgroup.remove_leftovers()]
    # Containers of runs killed before their record listed them.
    done += [f"container {c} removed" for c in docker.clean_orphans()]
    print("\n".join(done) if done else "nothing to clean")
    if remote_error is not None:
        raise SatbedError(f"the machines were not cleaned: {remote_error}")
    return 0


# A Docker image reference (registry/name:tag or @digest): never an option docker would parse.
IMAGE_REF = re.compile(r"^[a-z0-9][a-z0-9._/-]*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[0-9a-f]{64})?$")


def cmd_pep_check(args: argparse.Namespace) -> int:
    if not IMAGE_REF.match(args.image) or len(args.image) > 255:
        raise SatbedError(f"pep-check: {args.image!r} is not an image reference (e.g. satbed/pep-pepd:latest)")
    report = pepcheck.check(args.image)
    print("\n".join(report.lines()))
    return 0 if report.passed else 1


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (the usage is one --help away)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="satbed", description="network-emulation testbed for satellite links")
    p.add_argument("--version", action="version", version=f"satbed {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)

    r = sub.add_parser("run", help="one experiment on a fresh testbed")
    link = r.add_argument_group("satellite link")
    for param in params.TABLE:
        if param.flag is None:
            continue
        # Absent unless typed: a scenario's values give way only to flags typed.
        (link if param.flag.group == "link" else r).add_argument(
            param.option, dest=param.name, default=argparse.SUPPRESS, help=param.flag.help,
            type=_flag_type(param.flag.type), metavar=param.flag.metavar)
    r.add_argument("--scenario", metavar="NAME", help="a scenario (scenarios/NAME.yaml or a path): topology, "
                                                      "links, PEPs, TCP profiles, workload; flags given beside it override it")
    r.add_argument("--set", action="append", metavar="PATH=VALUE",
                   help="with --scenario: change one value of the file, e.g. links.sat.ber=1e-5, "
                        "workload.traffic.groups.0.concurrent=50, topology.routers.r1.interfaces.wan.queue=20")
    r.add_argument("--no-analysis", action="store_true", help="skip tcptrace analysis and the report")
    r.add_argument("--out", default="runs", help="results directory (default ./runs)")
    r.add_argument("--backend", default="mininet", choices=("mininet", "docker", "ansible"),
                   help="testbed backend: namespaces (mininet), containers (docker; `make images` first) "
                        "or the machines of an inventory (ansible; docs/testbed/physical.md)")
    r.add_argument("--inventory", metavar="FILE", help="with --backend ansible: the Ansible inventory of the "
                                                       "test bed's machines (playbooks/inventory.example.yml)")
    r.set_defaults(fn=cmd_run)

    c = sub.add_parser("cli", help="bring the testbed up with Mininet's CLI")
    c.add_argument("--topology", default="globalhawk")
    c.add_argument("--backend", default="mininet", choices=("mininet", "docker"),
                   help="namespaces (mininet) or containers (docker; `make images` first)")
    c.set_defaults(fn=cmd_cli)

    compose.build_parser(sub)
    leo.build_parser(sub)

    cl = sub.add_parser("check-link", help="measure the live link against its configuration")
    cl.add_argument("--json", action="store_true")
    cl.add_argument("--seconds", type=int, default=10, help="UDP goodput measurement length")
    cl.add_argument("--probes", type=int, default=3000, help="UDP probes per frame size for PER")
    link_args(cl)
    cl.set_defaults(fn=cmd_check_link)

    m = sub.add_parser("matrix", help="run an experiment matrix (experiments/*.yaml) in parallel")
    m.add_argument("file", help="experiment file, e.g. experiments/quick.yaml")
    m.add_argument("--jobs", type=int, default=None, help="exactly N cells at once (default: as many as 90%% of the cores carry, by each cell's modelled CPU cost)")
    m.add_argument("--out", default="runs/matrix", help="results directory (default ./runs/matrix)")
    m.add_argument("--backend", default="mininet", choices=("mininet", "docker", "ansible"), help="testbed backend")
    m.add_argument("--inventory", metavar="FILE", help="with --backend ansible: the machines' Ansible inventory")
    m.add_argument("--retry", action="store_true", help="rerun failed and timed-out cells too")
    m.add_argument("--executor", default="local", choices=("local", "slurm"),
                   help="where cells run: child processes here (local), or the tasks of a Slurm job array on "
                        "the lab's nodes (slurm; --out on a filesystem the nodes share, docs/guide/slurm.md)")
    m.add_argument("--partition", default="", help="with --executor slurm: the Slurm partition (default: the "
                   "cluster's default)")
    m.add_argument("--variant", action="append", metavar="NAME",
                   help="only this variant's cells (repeatable; default: every variant of the file)")
    m.add_argument("--no-batch", action="store_true",
                   help="a testbed per cell (by default cells that differ only in size and repetition "
                        "share one, run as a batch)")
    m.add_argument("--repetitions", type=int, default=None, metavar="N",
                   help="runs per combination, overriding the file's repetitions:")
    m.add_argument("--fidelity", action="store_true",
                   help="benchmark: the first cell alone vs beside the other cells the matrix would run with it; "
                        "with --executor slurm: the first cell on two nodes, agreeing within 2%%")
    m.add_argument("--estimate", nargs="+", metavar="DB",
                   help="print the wall time estimate of FILE from cells measured in these results.sqlite")
    m.set_defaults(fn=cmd_matrix)

    rp = sub.add_parser("report", help="HTML report of a run directory, or charts and CSV of a matrix")
    rp.add_argument("dir", help="a run directory, or the --out directory of `satbed matrix`")
    rp.add_argument("--window", nargs=2, type=float, metavar=("START_S", "DURATION_S"),
                    help="run report: the zoomed time-sequence window, in seconds from the "
                         "run's first captured packet, drawn at that same time for every "
                         "capture point (default: around the first retransmission)")
    rp.set_defaults(fn=cmd_report, needs_root=False)

    sp = sub.add_parser("study-page", help="rewrite a study page's results (docs/studies/global-hawk.md, or a "
                        "study plug-in's page such as docs/studies/ack-reservation.md) from stored matrix runs")
    sp.add_argument("dirs", nargs="+", metavar="DIR", help="the --out directories of `satbed matrix` runs")
    sp.add_argument("--page", default="docs/studies/global-hawk.md", help="the page (its part below the marker "
                    "line is rewritten; figures go to a directory of the page's name)")
    sp.set_defaults(fn=cmd_study_page, needs_root=False)

    kp = sub.add_parser("keep", help="keep a matrix run for a study page: its results.sqlite without "
                        "tcptrace's per-connection lists, and its cells' revisions (satbed study-page reads both)")
    kp.add_argument("src", help="the --out directory of a `satbed matrix` run (only read)")
    kp.add_argument("dest", help="an empty directory to keep it in, e.g. docs/studies/STUDY/results/NAME")
    kp.set_defaults(fn=cmd_keep, needs_root=False)

    k = sub.add_parser("clean", help="remove what killed runs left behind")
    k.add_argument("--backend", default="mininet", choices=("mininet", "docker", "ansible"),
                   help="ansible: also on the machines of --inventory (processes, PEP rules, qdiscs); "
                        "namespaces and containers are cleaned whatever the backend")
    k.add_argument("--inventory", metavar="FILE", help="with --backend ansible: the machines' Ansible inventory")
    k.set_defaults(fn=cmd_clean)

    pc = sub.add_parser("pep-check", help="test a PEP container image against the image contract")
    pc.add_argument("image", help="e.g. satbed/pep-pepd:latest (see pep/CONTRACT.md)")
    pc.set_defaults(fn=cmd_pep_check)
    return p


def main(argv: list[str] | None = None) -> int:
    """The one guard: a SatbedError is one line and exit 2, Ctrl-C exit 130,
    anything else one line saying it is a bug, exit 70, its traceback saved
    (satbed/core/crash.py)."""
    with signals.handled(_terminate, signal.SIGTERM):
        try:
            return crash.guarded(lambda: _main(argv))
        except KeyboardInterrupt:
            # Everything is removed by now: a further Ctrl-C has nothing left to stop.
            with signals.handled(signal.SIG_IGN, signal.SIGINT):
                print("satbed: interrupted; testbed removed", file=sys.stderr)
            return 130


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "inventory", None):
        if args.backend != "ansible":
            raise SatbedError("--inventory goes with --backend ansible")
        # Read by the backend in this process and in every matrix cell.
        os.environ[INVENTORY_ENV] = os.path.abspath(args.inventory)
    if getattr(args, "needs_root", True):
        require_root()
    return args.fn(args)
