"""One run: build the testbed, start the link, the PEPs and the captures, run
the client, tear everything down, and leave a self-describing directory:

  RUN/config.json  RUN/environment.json  RUN/result.json
  RUN/captures/*.pcap  RUN/emulator/  RUN/pep/  RUN/logs/  RUN/analysis/  RUN/report.html

A batch (run_batch, for a matrix) runs many transfers on one testbed
(Session): each gets such a directory of its own, with its own captures,
and its window of what the shared emulator, PEPs and background traffic
recorded; the testbed's own files go to the batch's directory.
"""

from __future__ import annotations

import os
import time
from typing import Iterator

from satbed.backends import clients, records, watch
from satbed.backends.clients.transfer import keep_files_wanted
from satbed.backends.testbed import remove_run_files
from satbed.core import paths
from satbed.core.errors import SatbedError
from satbed.core.files import write_json
from satbed.execution.session import Session, Transfer, config_document, describe, safely, shielded, write_result
from satbed.execution.slices import counters_before, transfer_slices
from satbed.model import peps
from satbed.model.config import RESULT_FORMAT, RunConfig


def run(cfg: RunConfig, out: str, run_dir: str | None = None,
        backend: str = "mininet", payloads: PayloadCache | None = None) -> tuple[str, dict]:
    """Run one experiment; returns (run directory, result). Raises SatbedError
    after writing the result when the run fails. payloads: a matrix's
    payloads made by its earlier cells."""
    cfg.validate(clients.REGISTRY)
    for name in {cfg.pep, *(p.name for p in cfg.peps.values())}:
        peps.check_backend(name, backend)
    # Every tool gets absolute paths: sshd changes to /, vsftpd reads its
    # anon_root as given, and a matrix cell runs from the repository root.
    out = paths.results_dir(out)
    # The payload and the received copy sit in the run directory side by side.
    paths.require_space(out, 2 * cfg.size_bytes, f"a {cfg.size_bytes} byte transfer (--size)")
    session = Session(cfg, backend, payloads)
    if run_dir is None:
        run_dir = os.path.join(out, f"{time.strftime('%Y%m%d-%H%M%S')}-{cfg.slug()}-{session.tb.prefix}")
    run_dir = session.open(run_dir)
    result: dict = {"format": RESULT_FORMAT, "client": cfg.client, "pep": cfg.pep, "direction": cfg.direction,
                    "started": time.time(), "testbed_prefix": session.tb.prefix}
    transfer: Transfer | None = None
    failure: BaseException | None = None
    try:
        session.build()
        # The counters and captures cover the background traffic's start too.
        transfer = session.begin(cfg, run_dir, result)
        session.start_traffic()
        session.transfer(cfg, transfer, result)
    except BaseException as e:  # recorded, then re-raised after teardown
        failure = e
    finally:
        # A second Ctrl-C must not cut the teardown short: it is noted, and
        # the run ends as interrupted once everything is removed.
        with shielded() as late:
            if session.background is not None:
                result["traffic"] = safely(session.background.stop, result)
            if transfer is not None:
                session.end(transfer, result)
            session.stop(result)
            result["finished"] = time.time()
            if failure is None and late:
                failure = KeyboardInterrupt()
            if failure is not None:
                result["error"] = describe(failure)
            write_json(os.path.join(run_dir, "environment.json"), session.env)
            write_result(run_dir, result)
            if not keep_files_wanted():
                remove_run_files(run_dir)
    if failure is not None:
        if isinstance(failure, SatbedError):
            raise SatbedError(f"{failure} (run directory: {run_dir})") from None
        raise failure
    return run_dir, result

def run_batch(cfgs: list[RunConfig], run_dirs: list[str], session_dir: str,
              backend: str = "mininet", payloads: PayloadCache | None = None) -> Iterator[tuple[int, dict]]:
    """Transfers of one configuration on one testbed (a matrix batch): the
    testbed, its PEPs and the background traffic are built once from the
    first configuration and stay up; each transfer gets its own run
    directory, as self-describing as a single run's (config.json,
    environment.json, result.json, its own captures and router counters,
    and its window of the emulator's series, the PEPs' buffer trace and the
    background flows). Yields (index, result) as each is written.

    A failed transfer fails its own cell; a testbed that fails (at build, or
    a PEP or emulator found dead) fails every remaining cell with the
    reason. Ctrl-C/SIGTERM tears down and re-raises; the cells not yielded
    were not run."""
    first = cfgs[0]
    first.validate(clients.REGISTRY)
    for name in {first.pep, *(p.name for p in first.peps.values())}:
        peps.check_backend(name, backend)
    paths.require_space(session_dir, 2 * max(c.size_bytes for c in cfgs), "the batch's largest transfer")
    session = Session(first, backend, payloads)
    session.open(session_dir)
    testbed_result: dict = {"format": RESULT_FORMAT, "started": time.time(), "testbed_prefix": session.tb.prefix,
                            "cells": [os.path.basename(d) for d in run_dirs]}
    broken = ""         # why the testbed can take no more transfers
    index = 0
    try:
        try:
            session.build()
            session.start_traffic()
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:
            broken = f"testbed failed: {describe(e)}"
        for index, (cfg, run_dir) in enumerate(zip(cfgs, run_dirs)):
            if broken:
                result = _batch_result(cfg, session, index, len(cfgs))
                result["error"] = broken
                result["finished"] = time.time()
                os.makedirs(run_dir, exist_ok=True)
                write_result(run_dir, result)
                yield index, result
                continue
            result, failure = _batch_transfer(session, cfg, run_dir, index, len(cfgs))
            if isinstance(failure, (KeyboardInterrupt, SystemExit)):
                raise failure
            if isinstance(failure, watch.PathDown) or session.down():
                broken = f"testbed failed during cell {index + 1}: {session.down() or describe(failure)}"
            yield index, result
        index = len(cfgs)
    finally:
        with shielded():
            if session.background is not None:
                testbed_result["traffic"] = safely(session.background.stop, testbed_result)
            session.stop(testbed_result)
            testbed_result["finished"] = time.time()
            if broken:
                testbed_result["error"] = broken
            testbed_result["transfers_run"] = index
            write_json(os.path.join(session.dir, "environment.json"), session.env)
            write_result(session.dir, testbed_result)


def _batch_result(cfg: RunConfig, session: Session, index: int, count: int) -> dict:
    return {"format": RESULT_FORMAT, "client": cfg.client, "pep": cfg.pep, "direction": cfg.direction,
            "started": time.time(), "testbed_prefix": session.tb.prefix,
            "batch": {"index": index, "cells": count, "testbed_dir": session.dir,
                      "testbed_seed": session.cfg.seed}}


def _batch_transfer(session: Session, cfg: RunConfig, run_dir: str, index: int,
                    count: int) -> tuple[dict, BaseException | None]:
    """One transfer of a batch into run_dir; returns its result and what failed."""
    run_dir = paths.private_dir(os.path.abspath(run_dir))
    os.makedirs(os.path.join(run_dir, "logs"), exist_ok=True)
    result = _batch_result(cfg, session, index, count)
    failure: BaseException | None = None
    t: Transfer | None = None
    before = {}
    try:
        cfg.validate(clients.REGISTRY)
        doc = config_document(cfg, session.spec, session.plan)
        # What this cell shared: the testbed was built (and its emulator and
        # background traffic seeded) from the batch's first configuration.
        doc["batch"] = result["batch"]
        write_json(os.path.join(run_dir, "config.json"), doc)
        session.tb.record.run_dir = run_dir     # a killed batch's payloads go with `satbed clean`
        records.mark_run_dir(run_dir, session.tb.prefix)
        session.tb.record.save()
        _forget_tcp_metrics(session)
        before = counters_before(session)
        t = session.begin(cfg, run_dir, result)
        session.transfer(cfg, t, result)
    except BaseException as e:
        failure = e
    finally:
        with shielded() as late:
            if t is not None:
                session.end(t, result)
            t0, t1 = (t.started if t else time.time()), time.time()
            safely(lambda: transfer_slices(session, run_dir, before, t0, t1, result), result)
            result["finished"] = t1
            if failure is None and late:
                failure = KeyboardInterrupt()
            if failure is not None:
                result["error"] = describe(failure)
            write_json(os.path.join(run_dir, "environment.json"), {**session.env, "batch": result["batch"]})
            write_result(run_dir, result)
            if not keep_files_wanted():
                remove_run_files(run_dir)
    return result, failure


def _forget_tcp_metrics(session: Session) -> None:
    """A fresh testbed has no cached ssthresh or RTT: the main flow's hosts
    and the PEP nodes forget what the previous transfer left, so each
    transfer starts as a single run's does."""
    nodes = [session.tb.nodes[n] for n in (session.plan.a, session.plan.b, *session.plan.peps)]
    for node in nodes:
        node.run(["ip", "tcp_metrics", "flush", "all"], check=False)


