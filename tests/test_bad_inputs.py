"""Bad input, as a demanding user types it: every case ends in one line on
stderr naming the problem, exit status 2, no traceback, and nothing left
behind (no testbed record owned by the command, no run directory)."""

from __future__ import annotations

import glob
import json
import os
import subprocess

import pytest

from satbed_testlib import REPO, needs_root

GH = os.path.join(REPO, "topologies", "globalhawk.yaml")

# Files the cases refer to as {name}: written into the test's directory.
FILES = {
    "nonutf8.yaml": b"fixed: {client: \xff\xfe}\n",
    "empty.yaml": b"",
    "list.yaml": b"- client: scp\n",
    "scalar.yaml": b"just words\n",
    "badyaml.yaml": b"fixed: {client: [scp\n",
    "unknownkey.yaml": b"fixed: {client: scp}\nflavour: spicy\n",
    "axes-map.yaml": b"axes: [client, scp]\n",
    "axes-empty.yaml": b"axes: {client: []}\n",
    "axes-scalar.yaml": b"axes: {client: scp}\n",
    "client.yaml": b"fixed: {client: bogus}\n",
    "pep.yaml": b"fixed: {client: scp, pep: bogus}\n",
    "reps0.yaml": b"repetitions: 0\nfixed: {client: scp}\n",
    "reps-neg.yaml": b"repetitions: -2\nfixed: {client: scp}\n",
    "reps-str.yaml": b"repetitions: many\nfixed: {client: scp}\n",
    "timeout-neg.yaml": b"timeout: -1\nfixed: {client: scp}\n",
    "rtt-neg.yaml": b"fixed: {client: scp, rtt: -5}\n",
    "rtt-inf.yaml": b"fixed: {client: scp, rtt: .inf}\n",
    "ber-big.yaml": b"fixed: {client: scp, ber: 2}\n",
    "ber-str.yaml": b"fixed: {client: scp, ber: lots}\n",
    "size-neg.yaml": b"fixed: {client: scp, size: -1M}\n",
    "size-huge.yaml": b"fixed: {client: scp, size: 1P}\n",
    "queue0.yaml": b"fixed: {client: scp, queue: 0}\n",
    "rate-str.yaml": b"fixed: {client: scp, rate: fast}\n",
    "link-type.yaml": b"fixed: {client: scp, link: {rate_bps: fast}}\n",
    "link-key.yaml": b"fixed: {client: scp, link: {colour: red}}\n",
    "link-list.yaml": b"fixed: {client: scp, link: [1, 2]}\n",
    "dir-bad.yaml": b"fixed: {client: scp, direction: sideways}\n",
    "topo-bad.yaml": b"fixed: {client: scp, topology: nowhere}\n",
    "seed-str.yaml": b"fixed: {client: scp, seed: abc}\n",
    "tl0.yaml": b"fixed: {client: scp, time_limit: 0}\n",
    "param-unknown.yaml": b"fixed: {client: scp, colour: red}\n",
    "bomb.yaml": b"a: &a [1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
                 b"c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
                 b"e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
                 b"g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\nfixed: {client: ping}\n",
    "huge.yaml": ("fixed: {client: ping}\naxes: {rtt: [" + ", ".join(str(i) for i in range(1000)) +
                  "], seed: [" + ", ".join(str(i) for i in range(1000)) + "]}\n").encode(),
    "corrupt/results.sqlite": b"this is not an sqlite database, whatever its name says\n",
    "emptydir/.keep": b"",
    # Topologies.
    "t-nolink.yaml": b"name: t\nsubnet: 10.9.0.0/24\nhosts:\n  a: {short: a, ip: 10.9.0.1/24}\n"
                     b"  b: {short: b, ip: 10.9.0.2/24}\ntransparent: {}\nlinks: []\n",
    "t-hostnolink.yaml": b"name: t\nsubnet: 10.9.0.0/24\nhosts:\n  a: {short: a, ip: 10.9.0.1/24}\n"
                         b"  b: {short: b, ip: 10.9.0.2/24}\n  c: {short: c, ip: 10.9.0.3/24}\n"
                         b"transparent: {}\nlinks: [[a.eth0, b.eth0]]\n",
    "t-dupip.yaml": b"name: t\nsubnet: 10.9.0.0/24\nhosts:\n  a: {short: a, ip: 10.9.0.1/24}\n"
                    b"  b: {short: b, ip: 10.9.0.1/24}\ntransparent: {}\nlinks: [[a.eth0, b.eth0]]\n",
    "t-netaddr.yaml": b"name: t\nsubnet: 10.9.0.0/24\nhosts:\n  a: {short: a, ip: 10.9.0.0/24}\n"
                      b"  b: {short: b, ip: 10.9.0.2/24}\ntransparent: {}\nlinks: [[a.eth0, b.eth0]]\n",
    "t-bcast.yaml": b"name: t\nsubnet: 10.9.0.0/24\nhosts:\n  a: {short: a, ip: 10.9.0.255/24}\n"
                    b"  b: {short: b, ip: 10.9.0.2/24}\ntransparent: {}\nlinks: [[a.eth0, b.eth0]]\n",
    "t-outside.yaml": b"name: t\nsubnet: 10.9.0.0/24\nhosts:\n  a: {short: a, ip: 10.8.0.1/24}\n"
                      b"  b: {short: b, ip: 10.9.0.2/24}\ntransparent: {}\nlinks: [[a.eth0, b.eth0]]\n",
    "t-selfloop.yaml": b"name: t\nsubnet: 10.9.0.0/24\nhosts:\n  a: {short: a, ip: 10.9.0.1/24}\n"
                       b"  b: {short: b, ip: 10.9.0.2/24}\ntransparent:\n"
                       b"  em: {short: em, kind: emulator, ports: [a, b]}\n"
                       b"links: [[a.eth0, b.eth0], [em.a, em.b]]\n",
    "t-portused.yaml": b"name: t\nsubnet: 10.9.0.0/24\nhosts:\n  a: {short: a, ip: 10.9.0.1/24}\n"
                       b"  b: {short: b, ip: 10.9.0.2/24}\n  c: {short: c, ip: 10.9.0.3/24}\n"
                       b"transparent: {}\nlinks: [[a.eth0, b.eth0], [c.eth0, b.eth0]]\n",
    "t-unknownnode.yaml": b"name: t\nsubnet: 10.9.0.0/24\nhosts:\n  a: {short: a, ip: 10.9.0.1/24}\n"
                          b"  b: {short: b, ip: 10.9.0.2/24}\ntransparent: {}\nlinks: [[a.eth0, zz.eth0]]\n",
    "t-unknownport.yaml": b"name: t\nsubnet: 10.9.0.0/24\nhosts:\n  a: {short: a, ip: 10.9.0.1/24}\n"
                          b"  b: {short: b, ip: 10.9.0.2/24}\ntransparent:\n"
                          b"  em: {short: em, kind: emulator, ports: [a, b]}\n"
                          b"links: [[a.eth0, em.x], [em.b, b.eth0]]\n",
    "t-badkind.yaml": b"name: t\nsubnet: 10.9.0.0/24\nhosts:\n  a: {short: a, ip: 10.9.0.1/24}\n"
                      b"  b: {short: b, ip: 10.9.0.2/24}\ntransparent:\n"
                      b"  em: {short: em, kind: toaster, ports: [a, b]}\n"
                      b"links: [[a.eth0, em.a], [em.b, b.eth0]]\n",
    "t-badip.yaml": b"name: t\nsubnet: 10.9.0.0/24\nhosts:\n  a: {short: a, ip: 10.9.0.300/24}\n"
                    b"  b: {short: b, ip: 10.9.0.2/24}\ntransparent: {}\nlinks: [[a.eth0, b.eth0]]\n",
    "t-nonutf8.yaml": b"name: t\xff\n",
    "t-list.yaml": b"- a\n- b\n",
    "t-dupshort.yaml": b"name: t\nsubnet: 10.9.0.0/24\nhosts:\n  a: {short: x, ip: 10.9.0.1/24}\n"
                       b"  b: {short: x, ip: 10.9.0.2/24}\ntransparent: {}\nlinks: [[a.eth0, b.eth0]]\n",
    "t-linkshape.yaml": b"name: t\nsubnet: 10.9.0.0/24\nhosts:\n  a: {short: a, ip: 10.9.0.1/24}\n"
                        b"  b: {short: b, ip: 10.9.0.2/24}\ntransparent: {}\nlinks: [[a.eth0, b.eth0, a.eth1]]\n",
    "passwd-copy": b"root:x:0:0:root:/root:/bin/bash\n",
}

RUN = ("run", "--client", "ping", "--no-analysis")
CASES: list[tuple[str, ...]] = [
    # satbed run: clients, PEPs, sizes, directions, topologies
    ("run", "--client", "bogus"),
    ("run", "--client", ""),
    ("run", "--client", "../../bin/sh"),
    ("run", "--pep", "bogus"),
    ("run", "--pep", "../adapters/none"),
    ("run", "--pep", ""),
    ("run", "--client", "scp", "--size", "-1"),
    ("run", "--client", "scp", "--size", "abc"),
    ("run", "--client", "scp", "--size", "1.5.5M"),
    ("run", "--client", "scp", "--size", "1P"),
    ("run", "--client", "scp", "--size", "5T"),
    ("run", "--client", "scp", "--size", "nan"),
    ("run", "--client", "scp", "--size", ""),
    ("run", "--client", "scp", "--direction", "sideways"),
    ("run", "--client", "scp", "--direction", ""),
    ("run", "--topology", "nowhere"),
    ("run", "--topology", "/etc/passwd"),
    ("run", "--topology", "{tmp}/passwd-copy"),
    ("run", "--captures", "sometimes"),
    ("run", "--time-limit", "0"),
    ("run", "--time-limit", "-1"),
    ("run", "--time-limit", "nan"),
    ("run", "--time-limit", "inf"),
    ("run", "--time-limit", "soon"),
    # satbed run: --out
    (*RUN, "--out", "/proc/x"),
    (*RUN, "--out", "/etc/passwd"),
    (*RUN, "--out", "/dev/null/x"),
    (*RUN, "--out", "{tmp}/passwd-copy"),
    (*RUN, "--out", ""),
    # satbed run: the link
    (*RUN, "--rtt", "-1"),
    (*RUN, "--rtt", "inf"),
    (*RUN, "--rtt", "nan"),
    (*RUN, "--rtt", "abc"),
    (*RUN, "--rtt", "1e12"),
    (*RUN, "--rtt", ""),
    (*RUN, "--ber", "1"),
    (*RUN, "--ber", "-0.1"),
    (*RUN, "--ber", "2"),
    (*RUN, "--ber", "nan"),
    (*RUN, "--ber", "inf"),
    (*RUN, "--ber", "abc"),
    (*RUN, "--rate", "0"),
    (*RUN, "--rate", "-5mbit"),
    (*RUN, "--rate", "fast"),
    (*RUN, "--rate", "8furlongs"),
    (*RUN, "--rate", "1e20"),
    (*RUN, "--ceil", "abc"),
    (*RUN, "--rate", "8mbit", "--ceil", "1mbit"),
    (*RUN, "--queue", "0"),
    (*RUN, "--queue", "-1"),
    (*RUN, "--queue", "abc"),
    (*RUN, "--queue", "1e9"),
    (*RUN, "--emulator", "bogus"),
    (*RUN, "--backend", "bogus"),
    (*RUN, "--seed", "abc"),
    (*RUN, "--seed", "-1"),
    (*RUN, "--no-such-flag"),
    (*RUN, "--pep", "pepd", "--pep-options", "bogus=1"),
    (*RUN, "--pep", "pepd", "--pep-options", "noequals"),
    # satbed run: topologies that must not validate
    *[(*RUN, "--topology", "{tmp}/" + name) for name in sorted(FILES) if name.startswith("t-")],
    # satbed check-link
    ("check-link", "--probes", "0"),
    ("check-link", "--probes", "-1"),
    ("check-link", "--probes", "abc"),
    ("check-link", "--probes", "100000000"),
    ("check-link", "--seconds", "0"),
    ("check-link", "--seconds", "-1"),
    ("check-link", "--seconds", "100000"),
    ("check-link", "--rtt", "-1"),
    ("check-link", "--ber", "1"),
    ("check-link", "--rate", "fast"),
    # satbed matrix: files
    ("matrix", "{tmp}/missing.yaml"),
    ("matrix", "{tmp}"),
    ("matrix", "/dev/null"),
    *[("matrix", "{tmp}/" + name, "--out", "{out}/m") for name in sorted(FILES)
      if name.endswith(".yaml") and not name.startswith("t-")],
    # satbed matrix: options
    ("matrix", GH.replace("topologies/globalhawk", "experiments/quick"), "--jobs", "0", "--out", "{out}/m"),
    ("matrix", GH.replace("topologies/globalhawk", "experiments/quick"), "--jobs", "-1", "--out", "{out}/m"),
    ("matrix", GH.replace("topologies/globalhawk", "experiments/quick"), "--repetitions", "0", "--out", "{out}/m"),
    ("matrix", GH.replace("topologies/globalhawk", "experiments/quick"), "--repetitions", "-3", "--out", "{out}/m"),
    ("matrix", GH.replace("topologies/globalhawk", "experiments/quick"), "--out", "/proc/x"),
    ("matrix", GH.replace("topologies/globalhawk", "experiments/quick"), "--out", "/etc/passwd"),
    ("matrix", GH.replace("topologies/globalhawk", "experiments/quick"), "--out", "{tmp}/passwd-copy"),
    ("matrix", GH.replace("topologies/globalhawk", "experiments/quick"), "--estimate", "{tmp}/none.sqlite"),
    ("matrix", GH.replace("topologies/globalhawk", "experiments/quick"), "--estimate", "{tmp}/corrupt/results.sqlite"),
    ("matrix", GH.replace("topologies/globalhawk", "experiments/quick"), "--out", "{tmp}/corrupt"),
    # satbed report
    ("report", "{tmp}/nowhere"),
    ("report", "{tmp}/passwd-copy"),
    ("report", "{tmp}/corrupt"),
    ("report", "{tmp}/emptydir"),
    ("report", ""),
    ("report", "{tmp}/emptydir", "--window", "1", "0"),
    ("report", "{tmp}/emptydir", "--window", "-1", "1"),
    ("report", "{tmp}/emptydir", "--window", "one", "1"),
    ("report", "{tmp}/emptydir", "--window", "1"),
    # satbed leo-profile
    ("leo-profile", "--walker", "53:24/5/1", "--altitude", "550", "--terminal", "0,0", "--gateway", "0,1",
     "--out", "{out}/p.csv"),
    ("leo-profile", "--walker", "53:24/6/1", "--altitude", "nan", "--terminal", "0,0", "--gateway", "0,1",
     "--out", "{out}/p.csv"),
    ("leo-profile", "--walker", "53:24/6/1", "--altitude", "550", "--terminal", "0,0", "--gateway", "0,1",
     "--interval", "-15", "--out", "{out}/p.csv"),
    ("leo-profile", "--mahimahi", "{tmp}/passwd-copy", "--out", "{out}/p.csv"),
    ("leo-profile", "--measurements", "{tmp}/passwd-copy", "--out", "{out}/p.csv"),
    # other commands
    ("pep-check", "Not An Image!"),
    ("pep-check", ""),
    ("bogus-command",),
    (),
]


# What the error about a file must name beyond the file: the key at fault.
FILE_NAMED = {
    "unknownkey.yaml": "flavour", "axes-map.yaml": "axes", "axes-empty.yaml": "axes.client",
    "axes-scalar.yaml": "axes.client", "client.yaml": "bogus", "pep.yaml": "bogus", "reps0.yaml": "repetitions",
    "reps-neg.yaml": "repetitions", "reps-str.yaml": "repetitions", "timeout-neg.yaml": "timeout",
    "rtt-neg.yaml": "fixed.rtt", "rtt-inf.yaml": "fixed.rtt", "ber-big.yaml": "fixed.ber", "ber-str.yaml": "lots",
    "size-neg.yaml": "-1M", "size-huge.yaml": "1P", "queue0.yaml": "fixed.queue", "rate-str.yaml": "fast",
    "link-type.yaml": "rate_bps", "link-key.yaml": "colour", "link-list.yaml": "fixed.link",
    "dir-bad.yaml": "sideways", "topo-bad.yaml": "nowhere", "seed-str.yaml": "fixed.seed",
    "tl0.yaml": "time_limit", "param-unknown.yaml": "colour", "nonutf8.yaml": "UTF-8", "badyaml.yaml": "line",
}
# Arguments that are context, not the offence: an error need not repeat them.
CONTEXT = {"run", "matrix", "report", "check-link", "--client", "ping", "--no-analysis", "--out", "{out}/m"}


def assert_names_the_offender(case: tuple[str, ...], line: str, args: list[str]) -> None:
    """The error names what is wrong: a value or option typed (or, for a file,
    the file and the key at fault), not only that something is."""
    for name, key in FILE_NAMED.items():
        if any(a.endswith("/" + name) for a in case):
            assert key in line, f"{key!r} not named in {line!r}"
            return
    typed = [a for c, a in zip(case, args) if c not in CONTEXT and a]
    if typed and not any(t in line or t.lstrip("-") in line for t in typed):
        # An empty value is shown quoted, a path as the user gave it.
        assert "''" in line or '""' in line, f"none of {typed} named in {line!r}"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    for name, data in FILES.items():
        p = d / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return d


def _ids() -> list[str]:
    return [" ".join(c)[:60] or "(no arguments)" for c in CASES]


def test_the_table_holds_at_least_a_hundred_cases():
    assert len(CASES) >= 100


@needs_root
@pytest.mark.parametrize("case", CASES, ids=_ids())
def test_bad_input_is_one_line_and_exit_2(case, files, tmp_path):
    args = [a.replace("{tmp}", str(files)).replace("{out}", str(tmp_path)) for a in case]
    p = subprocess.Popen(["/usr/bin/python3", "-m", "satbed", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=str(tmp_path),
                         env={**os.environ, "PYTHONPATH": REPO})
    try:
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert p.returncode == 2, f"exit {p.returncode}: {err[-2000:]}"
    assert len(lines) == 1, err[-2000:]
    assert "Traceback" not in err and lines[0].startswith("satbed"), err
    if case[:1] not in (("bogus-command",), ()):
        assert_names_the_offender(case, lines[0], args)
    # Nothing left: no testbed record of this command, no run or cell directory.
    for rec in glob.glob("/run/satbed/*.json"):
        try:
            with open(rec, encoding="utf-8") as f:
                assert json.load(f).get("owner_pid") != p.pid, f"record {rec} left behind"
        except (OSError, ValueError):
            pass
    made = [os.path.relpath(os.path.join(d, n), tmp_path) for d, dirs, names in os.walk(tmp_path)
            for n in dirs + names]
    kept = [m for m in made if m.startswith("runs" + os.sep) or m.startswith(os.path.join("m", "cells", ""))]
    # A run that failed after it began (a PEP refusing its options) keeps its
    # directory, with result.json saying what happened; nothing else may remain.
    for run_dir in {os.path.join(*m.split(os.sep)[:2]) for m in kept if m.startswith("runs" + os.sep)}:
        with open(os.path.join(tmp_path, run_dir, "result.json"), encoding="utf-8") as f:
            assert json.load(f).get("error"), f"{run_dir} kept without a recorded error"
    assert not [m for m in kept if not m.startswith("runs" + os.sep)], kept
