"""An experiment file made ready to run: its cells (satbed/model/experiment.py)
checked against this installation's clients and PEP images, each with its
expected time, time limit and CPU cost (satbed/execution/estimate.py).
`satbed matrix` then runs them (satbed/execution/supervisor.py), in batches
that share a testbed where they can (satbed/execution/batches.py)."""

from __future__ import annotations

from collections.abc import Collection

from satbed.backends import clients, docker
from satbed.core.errors import SatbedError
from satbed.execution.estimate import assess
from satbed.model import experiment, peps
from satbed.model.experiment import Experiment


def load(path: str, backend: str = "mininet", repetitions: int | None = None,
         variants: Collection[str] = ()) -> Experiment:
    """Read and validate an experiment file; every error is one line naming the file."""
    exp = experiment.load(path, clients.REGISTRY, backend, repetitions, variants)
    try:
        check_peps({c.params["pep"] for c in exp.cells}, backend)
        check_receive_buffers(exp)
    except SatbedError as e:
        raise SatbedError(f"{path}: {e}") from None
    return assess(exp)


def check_receive_buffers(exp: Experiment) -> None:
    """A receive buffer asked of a client tool that cannot take one in that
    direction fails the file, not each of its cells."""
    for cell in exp.cells:
        cfg = cell.run_config()
        if cfg.client_rcvbuf and cfg.direction not in clients.REGISTRY[cfg.client].rcvbuf_directions:
            raise SatbedError(f"workload.main.rcvbuf: {cfg.client} cannot ask for a receive buffer "
                              f"in a {cfg.direction} ({cell.label()})")


def check_peps(names: set[str], backend: str) -> None:
    """PEP images exist and declare the contract before any cell starts."""
    for name in sorted(names):
        peps.check_backend(name, backend)
        if peps.is_image(name):
            docker.pep_image(name)
