"""Bad input without a testbed: the commands that need no root and build
nothing (`matrix --estimate`, `report`, `run`'s arguments up to a validated
configuration, the loaders), driven in-process through satbed.cli.main, the
one guard every command goes through.

Whatever the input: no traceback, exit status 0 or 2, an error is one line on
stderr naming what is wrong, and nothing is left in the working directory.

The property tests are derandomized and bounded (EXAMPLES each) so this file
runs in well under a minute on a 2-core machine. For a lab's longer run,
e.g. overnight:  SATBED_FUZZ_EXAMPLES=20000 python3 -m pytest tests/test_fuzz_inputs.py
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sqlite3
import tempfile

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import satbed_testlib  # noqa: F401  (puts the repository on sys.path)
from satbed import cli
from satbed.core import crash
from satbed.execution import fidelity
from satbed.results.store import CellRow, Store

EXAMPLES = int(os.environ.get("SATBED_FUZZ_EXAMPLES", "40"))
PROFILE = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
QUICK = os.path.join(satbed_testlib.REPO, "experiments", "quick.yaml")


def satbed_main(argv: list[str], validate_only: bool = False) -> tuple[int, str]:
    """(exit status, stderr) of `satbed ARGV` in this process. validate_only:
    `run` up to its validated configuration (cli.run_config), never built."""
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            if validate_only:
                def body() -> int:
                    cli.run_config(cli.build_parser().parse_args(argv))
                    return 0
                rc = crash.guarded(body)
            else:
                rc = cli.main(argv)
        except SystemExit as e:        # argparse's usage errors
            rc = e.code if isinstance(e.code, int) else 2
    return rc, err.getvalue()


def assert_one_line(rc: int, err: str, *named: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert "Traceback" not in err, err
    assert rc in (0, 2), f"exit {rc}: {err}"
    if rc == 2:
        assert len(lines) == 1 and lines[0].startswith("satbed"), err
        for text in named:
            assert text in lines[0], f"{text!r} not named in {lines[0]!r}"


@pytest.fixture()
def store(tmp_path):
    s = Store(str(tmp_path / "m" / "results.sqlite"))
    s.close()
    return str(tmp_path / "m" / "results.sqlite")


# ---------------------------------------------------------------- the cases found by hand

# file name -> (contents, text the error must name)
FILE_CASES = {
    "self.yaml": (b"a: &a [*a]\nfixed: {client: ping}\n", "*a"),
    "deep.yaml": (b"fixed: " + b"[" * 3000 + b"]" * 3000 + b"\n", "nested deeper"),
    "deepmap.yaml": (b"fixed:\n" + b"".join(b"  " * i + b"k:\n" for i in range(1, 60)), "nested deeper"),
    "reps-float.yaml": (b"repetitions: 2.0\nfixed: {client: ping}\n", "repetitions"),
    "timeout-nan.yaml": (b"timeout: .nan\nfixed: {client: scp}\n", "timeout"),
    "timeout-inf.yaml": (b"timeout: .inf\nfixed: {client: scp}\n", "timeout"),
    "size-true.yaml": (b"fixed: {client: scp, size: true}\n", "fixed.size"),
    "dupkey.yaml": (b"fixed: {client: scp}\nfixed: {client: ftp}\n", "'fixed' given twice"),
    "dupinner.yaml": (b"fixed: {client: scp, ber: 0, ber: 1e-5}\n", "'ber' given twice"),
    "outage0.yaml": (b"fixed: {client: scp, link: {outage: {period_s: 0, down_s: 0}}}\n", "outage.period_s"),
    "outage-key.yaml": (b"fixed: {client: scp, link: {outage: {every: 10}}}\n", "'every'"),
    "outage-down.yaml": (b"fixed: {client: scp, link: {outage: {period_s: 5, down_s: 9}}}\n", "outage.down_s"),
    "ge-p.yaml": (b"fixed: {client: scp, link: {gilbert_elliott: {p: 2, r: 0.5}}}\n", "gilbert_elliott.p"),
    "ge-str.yaml": (b"fixed: {client: scp, link: {gilbert_elliott: {p: x}}}\n", "gilbert_elliott.p"),
    "profile-bad.yaml": (b"fixed: {client: scp, link: {profile: '{tmp}/bad-profile.csv'}}\n", "t_s"),
    "queue-sup.yaml": (b"fixed: {client: scp, topology: '{tmp}/t-queue.yaml'}\n", "queue"),
    "side0.yaml": (b"fixed: {client: scp, topology: '{tmp}/t-side0.yaml'}\n", "side"),
    "sc-host.yaml": (b"topology: spoofing\nworkload: {main: {client: tcp, between: [h1, h9]}}\n", "h9"),
    "sc-node.yaml": (b"topology: spoofing\nlinks: {nosuch: {rate: 1mbit}}\n", "links.nosuch"),
    "sc-pep.yaml": (b"topology: spoofing\npeps: {h5: pepd}\n", "peps.h5"),
    "sc-prof.yaml": (b"topology: spoofing\nprofiles: {h7: reno-sack-1500}\n", "profiles.h7"),
    "sc-traffic.yaml": (b"topology: spoofing\nworkload: {main: {client: tcp, between: [h1, h5]}, traffic: "
                        b"{groups: [{server: h3, client: hx, arrival: constant, rate: 1, concurrent: 1, sizes: exp:1K}]}}\n", "hx"),
    "sc-tcpprof.yaml": (b"topology: spoofing\nprofiles: {h1: no-such-profile}\n", "no-such-profile"),
}
AUX = {
    "bad-profile.csv": b"t_s,ber\n5,0\n1,0\n",
    "t-queue.yaml": open(os.path.join(satbed_testlib.REPO, "topologies", "spoofing.yaml"), "rb").read()
    .replace(b"queue: 40", "queue: '4²'".encode()),
    "t-side0.yaml": open(os.path.join(satbed_testlib.REPO, "topologies", "spoofing.yaml"), "rb").read()
    .replace(b"kind: pep", b"kind: pep, side: 0"),
}


@pytest.mark.parametrize("name", sorted(FILE_CASES))
def test_bad_file_is_refused_before_the_first_cell(name, tmp_path, store):
    for aux, data in AUX.items():
        (tmp_path / aux).write_bytes(data)
    data, named = FILE_CASES[name]
    (tmp_path / name).write_bytes(data.replace(b"{tmp}", str(tmp_path).encode()))
    rc, err = satbed_main(["matrix", str(tmp_path / name), "--estimate", store])
    assert rc == 2, err
    assert_one_line(rc, err, name, named)


def test_the_topology_fixtures_really_changed():
    # Guards the two cases above from passing on an unchanged topology.
    assert b"4\xc2\xb2" in AUX["t-queue.yaml"] and b"side: 0" in AUX["t-side0.yaml"]


def test_fifo_is_refused_without_waiting(tmp_path, store):
    os.mkfifo(tmp_path / "fifo.yaml")
    rc, err = satbed_main(["matrix", str(tmp_path / "fifo.yaml"), "--estimate", store])
    assert_one_line(rc, err, "fifo.yaml", "not a regular file")
    assert rc == 2


def test_ber_that_damages_every_frame_is_estimated(tmp_path, store):
    (tmp_path / "e.yaml").write_text("fixed: {client: scp, size: 1M, ber: 0.5}\n")
    rc, err = satbed_main(["matrix", str(tmp_path / "e.yaml"), "--estimate", store])
    assert (rc, err) == (0, "")


@pytest.mark.parametrize("executor", [[], ["--executor", "slurm"]], ids=["beside-cells", "across-nodes"])
def test_fidelity_of_a_ping_matrix_is_refused(tmp_path, monkeypatch, executor):
    # Both checks compare the first cell's goodput, which ping has not; refused before anything runs.
    monkeypatch.setattr(cli, "require_root", lambda: None)
    monkeypatch.setattr(fidelity, "require_root", lambda: None)

    def started(*args, **kw):
        raise AssertionError("the ping matrix got as far as running cells")
    monkeypatch.setattr(fidelity, "spawn", started)
    monkeypatch.setattr(fidelity.SlurmExecutor, "nodes", started)
    (tmp_path / "p.yaml").write_text("fixed: {client: ping}\n")
    rc, err = satbed_main(["matrix", str(tmp_path / "p.yaml"), "--fidelity", "--out", str(tmp_path / "m"), *executor])
    assert rc == 2
    assert_one_line(rc, err, "fidelity needs a transfer client")


@pytest.mark.parametrize("argv,named", [
    (["run", "--client", "ping", "--rate", "8MB/s"], "64mbit"),
    (["run", "--client", "ping", "--rate", "1kB"], "8kbit"),
    (["run", "--client", "ping", "--emulator", "bridge", "--ceil", "10mbit"], "--ceil"),
    (["run", "--client", "ping", "--emulator", "bridge", "--queue", "20"], "--queue"),
    (["run", "--client", "ping", "--queue", "²"], "²"),
    (["run", "--scenario", "spoofing", "--set", "workload.traffic.groups.²=1"], "²"),
    (["run", "--scenario", "spoofing", "--set", "links.nosuch.ber=1e-5"], "links.nosuch"),
    (["run", "--scenario", "spoofing", "--set", "profiles.h9=reno-sack-1500"], "profiles.h9"),
    (["run", "--scenario", "spoofing", "--set", "peps.h3.name=pepd"], "peps.h3"),
])
def test_run_arguments_refused_with_the_offender_named(argv, named):
    rc, err = satbed_main(argv, validate_only=True)
    assert rc == 2, err
    assert_one_line(rc, err, named)


def test_set_on_a_link_the_file_gives_through_link_keeps_that_link():
    """spoofing.yaml gives its satellite link `sat` through link: (1544 kbit/s,
    500 ms): --set links.sat.ber changes that link's BER and nothing else."""
    args = cli.build_parser().parse_args(["run", "--scenario", "spoofing", "--set", "links.sat.ber=1e-5"])
    sat = cli.run_config(args).links["sat"]
    for d in (sat.a_to_b, sat.b_to_a):
        assert (d.rate_bps, d.delay_ms, d.ber) == (1544000, 250.0, 1e-5)
    assert sat.backend == "userspace"
    args = cli.build_parser().parse_args(["run", "--scenario", "spoofing", "--set", "links.sat.rtt=600"])
    assert cli.run_config(args).links["sat"].rtt_ms == 600


def test_estimate_with_no_jobs_is_refused(store):
    rc, err = satbed_main(["matrix", QUICK, "--estimate", store, "--jobs", "0"])
    assert rc == 2
    assert_one_line(rc, err, "--jobs")


def test_pep_check_refuses_an_option_for_an_image():
    rc, err = satbed_main(["pep-check", "--", "--rm"])
    assert rc == 2
    assert_one_line(rc, err, "--rm")


def _store_with(path: str, **row) -> None:
    s = Store(path)
    s.put(CellRow("h1", "quick", {"client": "scp", "pep": "none", "ber": 0, "rtt": 0, "size": 1 << 20},
                  {}, 0, "ok", seconds=10.0, metrics={"seconds": 5.0}))
    for k, v in row.items():
        s.db.execute(f"UPDATE cells SET {k} = ?", (v,))
    s.db.commit()
    s.close()


@pytest.mark.parametrize("damage,named", [
    ({"metrics": "{not json"}, "metrics"),
    ({"params": "[1, 2]"}, "params"),
    ({"started": 1e300}, "started"),
    ({"status": "exploded"}, "status"),
    ({"seconds": "soon"}, "seconds"),
])
def test_damaged_store_is_named_by_estimate_and_report(tmp_path, damage, named):
    db = str(tmp_path / "m" / "results.sqlite")
    _store_with(db, **damage)
    for argv in (["matrix", QUICK, "--estimate", db], ["report", str(tmp_path / "m")]):
        rc, err = satbed_main(argv)
        assert rc == 2, err
        assert_one_line(rc, err, db, named)


def test_foreign_and_newer_stores_are_refused(tmp_path):
    foreign = str(tmp_path / "foreign.sqlite")
    sqlite3.connect(foreign).execute("CREATE TABLE cells (hash TEXT, colour TEXT)").connection.commit()
    rc, err = satbed_main(["matrix", QUICK, "--estimate", foreign])
    assert_one_line(rc, err, foreign, "not a satbed results database")
    newer = str(tmp_path / "newer.sqlite")
    _store_with(newer)
    db = sqlite3.connect(newer)
    db.execute("PRAGMA user_version = 99")
    db.commit()
    db.close()
    rc, err = satbed_main(["matrix", QUICK, "--estimate", newer])
    assert_one_line(rc, err, newer, "format 99")
    os.mkdir(tmp_path / "dir.sqlite")
    rc, err = satbed_main(["matrix", QUICK, "--estimate", str(tmp_path / "dir.sqlite")])
    assert rc == 2


@pytest.mark.parametrize("files,named", [
    ({"result.json": "{"}, "result.json"),
    ({"result.json": "[1]"}, "result.json"),
    ({"result.json": '{"format": 99}'}, "format 99"),
    ({"result.json": '{"format": 2, "started": 1e300}'}, "started"),
    ({"result.json": '{"format": 2}', "config.json": '{"link": 5}'}, "config.json"),
    ({"result.json": '{"format": 2}', "captures": "a file"}, "captures"),
])
def test_damaged_run_directory_is_named(tmp_path, files, named):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    rc, err = satbed_main(["report", str(tmp_path)])
    assert rc == 2, err
    assert_one_line(rc, err, named)


def test_an_unexpected_error_is_a_bug_line_with_its_traceback_saved(monkeypatch, tmp_path):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.delenv(crash.DEBUG_ENV, raising=False)

    def broken(args):
        raise ZeroDivisionError("an example")
    monkeypatch.setattr(cli, "cmd_report", broken)
    rc, err = satbed_main(["report", str(tmp_path)])
    lines = err.strip().splitlines()
    assert rc == crash.BUG_EXIT and len(lines) == 1 and "Traceback" not in err
    assert "bug" in lines[0] and "ZeroDivisionError" in lines[0]
    saved = [p for p in os.listdir(tmp_path) if p.startswith("satbed-bug-")]
    assert len(saved) == 1 and "Traceback" in (tmp_path / saved[0]).read_text()
    monkeypatch.setenv(crash.DEBUG_ENV, "1")
    rc, err = satbed_main(["report", str(tmp_path)])
    assert rc == crash.BUG_EXIT and "Traceback" in err


# ---------------------------------------------------------------- properties

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40), st.floats(),
                    st.text(max_size=12), st.sampled_from(["8mbit", "8MB/s", "1e-5", "600", "²", "１", "1M",
                                                           "scp", "ping", "pepd", "none", "h1", "sat", ".nan"]))
PARAM_KEYS = ["client", "pep", "rtt", "ber", "loss", "size", "queue", "rate", "ceil", "link", "time_limit",
              "direction", "seed", "emulator", "captures", "topology", "links.sat.ber", "profiles.h1"]
LINK_FIELDS = ["rate_bps", "delay_ms", "ber", "queue_packets", "gilbert_elliott", "outage", "profile", "cburst_bytes"]
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.sampled_from(LINK_FIELDS + ["p", "r", "period_s", "down_s", "x"]), inner, max_size=3)),
    max_leaves=8)
experiments = st.fixed_dictionaries({}, optional={
    "fixed": st.dictionaries(st.sampled_from(PARAM_KEYS), values, max_size=4),
    "axes": st.dictionaries(st.sampled_from(PARAM_KEYS), st.lists(values, min_size=1, max_size=2), max_size=2),
    "repetitions": st.one_of(st.integers(-1, 3), st.floats(0, 3), st.text(max_size=3)),
    "timeout": scalars,
    "variants": st.lists(st.fixed_dictionaries({"name": st.text(min_size=1, max_size=4)},
                                               optional={"set": st.dictionaries(st.sampled_from(PARAM_KEYS), values,
                                                                                max_size=2)}), max_size=2)})
# Text around the YAML: what an editor or a careless paste does to a file.
mangle = st.sampled_from(["", "\nfixed: {}\n", "x: &a [*a]\n", "\n  - [", "\x00", "\ufeff", "a: 1\na: 2\n",
                          "fixed: " + "[" * 40 + "]" * 40 + "\n"])


@PROFILE
@given(experiments, mangle)
def test_matrix_estimate_of_any_file_is_cells_or_one_line(doc, tail):
    with tempfile.TemporaryDirectory() as d:
        db = os.path.join(d, "results.sqlite")
        Store(db).close()
        path = os.path.join(d, "e.yaml")
        with open(path, "w", encoding="utf-8") as f:
            f.write(yaml.safe_dump(doc, allow_unicode=True) + tail)
        before = set(os.listdir(d))
        rc, err = satbed_main(["matrix", path, "--estimate", db])
        assert_one_line(rc, err)
        assert set(os.listdir(d)) == before, "matrix --estimate left files behind"


RUN_FLAGS = {"--client": ["ping", "scp", "bogus", ""], "--rate": ["8mbit", "8MB/s", "0", "1e20", "²", "8 mbit"],
             "--ceil": ["10mbit", "1kbit", "x"], "--rtt": ["600", "-1", "nan", "inf", "１"],
             "--ber": ["1e-5", "0.99", "1", "nan"], "--loss": ["0.001%", "1", "-0"],
             "--queue": ["20", "0", "²", "1e3"], "--emulator": ["bridge", "tc", "auto", "x"],
             "--size": ["1M", "true", "0", "1P", "１M"], "--seed": ["1", "-1", "x"],
             "--time-limit": ["5", "0", "inf"], "--scenario": ["spoofing", "outage", "nowhere"],
             "--set": ["links.sat.ber=1e-5", "links.sat.rtt=600", "links.inet.delay=5", "links.x.ber=0",
                       "workload.traffic.groups.0.concurrent=3", "workload.traffic.groups.9.rate=1",
                       "workload.traffic.groups.１.rate=1", "profiles.h1=reno-sack-1500", "peps.h2.name=none",
                       "topology.routers.r1.interfaces.wan.queue=20", "links.sat=[", "noequals", "a.b=c"],
             "--topology": ["globalhawk", "spoofing", "/dev/null", "nowhere"], "--direction": ["upload", "x"]}
run_args = st.lists(st.sampled_from(sorted(RUN_FLAGS)).flatmap(
    lambda flag: st.tuples(st.just(flag), st.sampled_from(RUN_FLAGS[flag]) | st.text(max_size=6))),
    max_size=4)


@PROFILE
@given(run_args)
def test_run_arguments_validate_or_are_one_line(pairs):
    argv = ["run", *[x for pair in pairs for x in pair]]
    with tempfile.TemporaryDirectory() as d:
        old = os.getcwd()
        os.chdir(d)
        try:
            rc, err = satbed_main(argv, validate_only=True)
        finally:
            os.chdir(old)
        assert_one_line(rc, err)
        assert os.listdir(d) == [], "validation left files behind"


@PROFILE
@given(st.sampled_from(["links.sat.ber", "links.sat.loss", "links.sat.queue", "links.sat.a_to_b.ber",
                        "links.inet.ber", "links.sat.emulator"]),
       st.sampled_from(["1e-5", "0", "0.5", "20", "x", "true", "-1"]))
def test_set_on_the_satellite_link_never_swaps_in_a_default_link(path, value):
    rc, err = satbed_main(["run", "--scenario", "spoofing", "--set", f"{path}={value}"], validate_only=True)
    assert_one_line(rc, err)
    if rc == 0:
        args = cli.build_parser().parse_args(["run", "--scenario", "spoofing", "--set", f"{path}={value}"])
        cfg = cli.run_config(args)
        if path.startswith("links.sat."):
            assert cfg.links["sat"].rtt_ms == 500 and cfg.links["sat"].a_to_b.rate_bps == 1544000


result_docs = st.dictionaries(st.sampled_from(["format", "started", "finished", "client", "error"]),
                              scalars, max_size=4)


@PROFILE
@given(st.one_of(st.binary(max_size=60), result_docs.map(lambda d: json.dumps(d).encode())),
       st.sampled_from(["valid", "missing", "bad"]))
def test_report_of_a_damaged_run_directory_is_one_line(result, damage):
    """result.json of any content beside a config.json that is damaged, so the
    report is refused before it would analyse (a sound run's analysis needs
    its captures, and is tested elsewhere)."""
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "result.json"), "wb") as f:
            f.write(result)
        if damage == "bad":
            with open(os.path.join(d, "config.json"), "w") as f:
                f.write('{"link": {"a_to_b": {"rate_bps": "fast"}}}')
        else:
            with open(os.path.join(d, "captures"), "w") as f:
                f.write("a file where a directory belongs")
        rc, err = satbed_main(["report", d])
        assert rc == 2, err
        assert_one_line(rc, err)


@PROFILE
@given(st.dictionaries(st.sampled_from(["params", "config", "metrics", "status", "started", "seconds",
                                        "repetition", "estimate", "goodput_bps"]),
                       st.one_of(scalars, values.map(json.dumps)), min_size=1, max_size=3))
def test_estimate_from_a_store_with_any_row_is_a_number_or_one_line(damage):
    with tempfile.TemporaryDirectory() as d:
        db = os.path.join(d, "results.sqlite")
        try:
            _store_with(db, **damage)
        except sqlite3.IntegrityError:      # the store's own constraints refuse it: no row to read
            return
        rc, err = satbed_main(["matrix", QUICK, "--estimate", db])
        assert_one_line(rc, err)
