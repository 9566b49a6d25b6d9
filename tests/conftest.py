"""Shared fixtures and the test tiers; helpers live in satbed_testlib.

Tiers: each test is marked `testbed`, `docker`, `slow`, `serial` or `leftovers` here, from what
it already declares (its skip conditions, its fixtures), so `make check` can
deselect what builds a testbed and `make test` can spread the rest over xdist
workers. Under CI (SATBED_CI=1) a skip whose reason is not on SKIPS_ALLOWED fails
the test: a skip there means something `make test` should have installed or
started is missing."""

from __future__ import annotations

import fcntl
import os
import re
import time

import pytest

import satbed_testlib  # noqa: F401  (puts the repository on sys.path)
from satbed_testlib import ROOT_REASON, root_links

from satbed.backends import docker

# Fixtures that build a testbed (module-scoped ones shared by a file's tests).
TESTBED_FIXTURES = {"rtt_runs", "testbed", "images", "fixture_image", "hostile_image", "bed", "slurm_cluster"}
# Module-scoped fixtures that build a testbed and run on it (seconds to minutes).
SHARED_TESTBEDS = {"rtt_runs", "runs", "testbed", "bed", "slurm_cluster"}
DOCKER_FIXTURES = {"images", "fixture_image", "hostile_image", "bed", "slurm_cluster"}
DOCKER_MODULES = {"test_docker.py", "test_confinement.py", "test_ansible.py"}

# Tests that run `satbed clean`, which takes every dead owner's testbed, not only
# their own: each holds SERIAL_LOCK alone while it runs (any xdist worker).
SERIAL = (
    "test_kills.py::test_sigkill_then_clean",
    "test_testbed.py::test_sigkilled_run_is_cleaned",
    "test_testbed.py::test_clean_removes_stale_sockets_and_half_written_records_only",
    "test_docker.py::test_clean_removes_the_containers_of_a_killed_run",
    "test_confinement.py::test_clean_leaves_alone_what_a_record_cannot_prove_is_its_runs",
    "test_confinement.py::test_control_directories_go_with_their_record",
    "test_matrix.py::test_a_resumed_matrix_adopts_cells_a_killed_matrix_left_running",
    "test_matrix.py::test_interrupted_run_stops_cleanly_and_resumes",
    "test_matrix.py::test_an_interrupted_batch_resumes_at_its_first_undone_cell",
    "test_ansible.py::test_clean_reaches_the_machines",
    "test_ansible.py::test_bad_inventories_say_one_line",
)

# Tests that interrupt a run and look for what it left without cleaning: they
# hold SERIAL_LOCK shared (beside each other), so no serial test's clean removes
# a leftover before they have seen it.
LEFTOVERS = (
    "test_kills.py::test_double_ctrl_c",
    "test_testbed.py::test_sigterm_tears_down",
)

# Testbed tests over about a minute each on 2 cores (pytest --durations).
SLOW = (
    "test_ansible.py::",
    "test_slurm.py::",
    "test_matrix.py::test_smoke_runs_in_parallel_resumes_and_reports",
    "test_confinement.py::test_a_hostile_pep",
)

# The longest units of work, longest first (`make test`'s --durations on 2 cores):
# xdist starts them first, so none is left to finish alone at the end.
# The fresh clone comes second: it needs no image, so one worker runs it while
# the other builds the images the Docker units after it wait for.
FIRST = (
    "test_ansible.py",                                  # the five-container bed, its playbooks, a matrix
    "test_frontdoor.py::test_a_fresh_clone",            # the README's `make experiment`
    "test_slurm.py",                                    # a slurmctld and two slurmd containers, a node killed
    "test_docker.py::test_compose_swaps",
    "test_confinement.py::test_a_hostile_pep",
    "test_docker.py::test_run_and_matrix",
    "test_docker.py::test_goodput",
    "test_clients.py",                                  # every client on one 100 ms testbed
    "test_split_runs.py",
    "test_traffic.py",
    "test_matrix.py::test_smoke",
    "test_docker.py",
    "test_kills.py",
)

# Where serial and leftovers tests (any worker's, any checkout's) take turns:
# one test's clean must not take another's killed run before that test has looked.
SERIAL_LOCK = "/run/lock/satbed-tests-serial.lock"

# Skips that are a property of the machine, not something missing: each is one
# half of a pair whose other half runs here, or needs a build satbed does not ship.
SKIPS_ALLOWED = (
    r"SATBED_PEPSAL_BIN does not point at a PEPsal build",
    r"SATBED_SCPS_BIN does not point at an SCPS gateway build",
    r"this machine lets PEPsal raise its open-file hard limit",
    r"this kernel has netem",
    r"an SCPS gateway is installed here",
    r"this machine has a pepsal image",
    r"kernel offers no bbr",
)


def _has_root_skip(item: pytest.Item) -> bool:
    return any(m.kwargs.get("reason") == ROOT_REASON for m in item.iter_markers("skipif"))


# tryfirst: xdist's worker turns an item's xdist_group into its node id in this
# same hook; run after it, the groups below were silently ignored.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        nodeid = item.nodeid.split("tests/", 1)[-1]
        module = nodeid.split("::", 1)[0]
        fixtures = set(getattr(item, "fixturenames", ()))
        testbed = _has_root_skip(item) or bool(fixtures & TESTBED_FIXTURES)
        if testbed:
            item.add_marker(pytest.mark.testbed)
        if fixtures & DOCKER_FIXTURES or (testbed and module in DOCKER_MODULES):
            item.add_marker(pytest.mark.docker)
        if any(nodeid.startswith(s) for s in SLOW):
            item.add_marker(pytest.mark.slow)
        if any(nodeid.startswith(s) for s in SERIAL):
            item.add_marker(pytest.mark.serial)
        if any(nodeid.startswith(s) for s in LEFTOVERS):
            item.add_marker(pytest.mark.leftovers)
        # A module-scoped testbed fixture is built once per xdist worker that runs
        # one of its tests: one worker takes them all, so it is built once (the
        # five Ansible machines, the 100 ms testbed, the 600 ms runs). The Docker
        # modules' `images` fixtures only check the images (a build takes a lock,
        # satbed_testlib.images_lock): their tests spread over the workers.
        if set(_module_fixtures(item)) & SHARED_TESTBEDS:
            item.add_marker(pytest.mark.xdist_group(module))
    # Longest work first (--dist loadgroup hands out units in collection order):
    # a long group started last would finish alone after the rest.
    items.sort(key=_rank)


def _module_fixtures(item: pytest.Item) -> list[str]:
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs if info else {}
    return [name for name, d in defs.items()
            if d and d[-1].scope == "module" and d[-1].baseid.endswith(item.nodeid.split("::")[0])]


def _rank(item: pytest.Item) -> int:
    """0 for the longest units: the groups and the slow tests, in FIRST's order;
    then the other testbed tests; then the rest (seconds each)."""
    nodeid = item.nodeid.split("tests/", 1)[-1]
    group = item.get_closest_marker("xdist_group")
    name = group.args[0] if group else nodeid
    for i, first in enumerate(FIRST):
        if name.startswith(first):
            return i
    return len(FIRST) + (0 if item.get_closest_marker("testbed") else 1)


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if not os.environ.get("SATBED_CI") or not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report)
    if not any(re.search(pattern, reason) for pattern in SKIPS_ALLOWED):
        report.outcome = "failed"
        report.longrepr = (f"skipped under SATBED_CI, and the reason is not on tests/conftest.py's "
                           f"SKIPS_ALLOWED: {reason}")


@pytest.fixture(autouse=True)
def _machine_turn(request: pytest.FixtureRequest):
    """A `serial` test holds SERIAL_LOCK alone for its whole run, a `leftovers`
    test holds it shared; other tests do not touch it."""
    if request.node.get_closest_marker("serial"):
        mode = fcntl.LOCK_EX
    elif request.node.get_closest_marker("leftovers"):
        mode = fcntl.LOCK_SH
    else:
        yield
        return
    with open(SERIAL_LOCK, "a") as lock:
        fcntl.flock(lock, mode)
        yield


@pytest.fixture
def globalhawk():
    from satbed.model import topology
    return topology.load("globalhawk")


def _owner_alive(name: str) -> bool:
    cp = docker.docker("inspect", "--format", f'{{{{index .Config.Labels "{docker.LABEL}.owner"}}}}', name,
                       check=False)
    owner = cp.stdout.strip()
    return owner.isdigit() and os.path.exists(f"/proc/{owner}")


@pytest.fixture
def no_leftovers():
    """Nothing this test made is left: satbed containers that appeared
    during it and whose owner is gone (others' live runs are theirs), and
    root-namespace links with a run prefix. Another worker's run may end
    during the test and remove its containers a moment after its owner
    exits: a dead owner's container is given 30 s to go."""
    links_before = root_links()
    before = set(docker.containers())
    yield
    deadline = time.monotonic() + 30
    while (left := [c for c in set(docker.containers()) - before if not _owner_alive(c)]) \
            and time.monotonic() < deadline:
        time.sleep(1)
    assert left == []
    assert {ln for ln in root_links() - links_before if ln.startswith("sb")} == set()
