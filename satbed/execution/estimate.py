"""How long and how costly a cell is expected to be: a model for
scheduling, the ETA and the per-cell time limit, and an estimate of a
whole matrix's wall time from cells measured before."""

from __future__ import annotations

import math
import os

from satbed.backends import clients
from satbed.backends.clients.base import stall_limit
from satbed.core.errors import SatbedError
from satbed.execution.admission import Admission, Calibration
from satbed.model.config import RunConfig
from satbed.model.experiment import Cell, Experiment
from satbed.results.store import CellRow, Store

SETUP_S = 8                 # building and removing one testbed, measured on 2 cores
ANALYSIS_S_PER_MB = 0.12    # tcptrace metrics of four header captures, per MB transferred
LOADED_SETUP_S = 15         # a testbed's build in a full Global Hawk matrix on 2 cores: at most 8.3 s seen
WARMUP_RTTS = 20            # handshakes and slow start: an SSH login through pepd at 600 ms and BER 1e-5
                            # took up to 14.4 s to its first byte
WARMUP_EXTRA_S = 5          # the load meter's window


MATHIS_C = 3.0
MSS_BITS = 1448 * 8


def expected_goodput(cfg: RunConfig) -> float:
    """A model for scheduling, not a result: the link rate less frame loss,
    and for end-to-end TCP (no PEP) the Mathis form MSS/RTT x C/sqrt(p),
    which is what makes TCP at 600 ms and BER 1e-5 crawl. C is fitted to this
    testbed (the kernel's default congestion control with SACK), not Reno's
    1.22: at BER 1e-7 and 300 ms FTP moved 3.34 Mbit/s (C = 3.0), at 600 ms
    1.6-3.0 Mbit/s (C = 1.4-2.7); at BER 1e-5 C hardly matters (the time
    limit ends those cells). The higher C keeps the admission's cost of such
    cells from being underestimated."""
    rate = cfg.link.rate_bps or 1e9
    per = cfg.link.a_to_b.drop_rate()
    goodput = 0.95 * rate * (1 - per)
    cls = clients.REGISTRY.get(cfg.client)
    if cls is not None and cls.tcp and cfg.pep == "none" and per > 0 and cfg.link.rtt_ms > 0:
        goodput = min(goodput, MATHIS_C * MSS_BITS / (cfg.link.rtt_ms / 1000 * math.sqrt(per)))
    return goodput


def estimate_seconds(cfg: RunConfig) -> float:
    """A rough wall time for one cell: setup, handshakes, the transfer at the
    modelled goodput (at most the time limit) and the capture's analysis. The
    ETA corrects the estimates from the cells that finished."""
    if cfg.client == "ping":
        return SETUP_S + 3 + 10 * cfg.link.rtt_ms / 1000
    goodput = expected_goodput(cfg)
    # A BER that damages (nearly) every frame moves nothing: such a transfer
    # runs until its time limit or the clients' stall limit stops it.
    transfer = cfg.size_bytes * 8 / goodput if goodput > 0 else math.inf
    if cfg.time_limit_s:
        transfer = min(transfer, cfg.time_limit_s)
    if not math.isfinite(transfer):
        transfer = client_limit({"rtt": cfg.link.rtt_ms, "size": cfg.size_bytes, "time_limit": cfg.time_limit_s},
                                cfg.link.rate_bps)
    analysis = ANALYSIS_S_PER_MB * min(cfg.size_bytes, transfer * goodput / 8) / 1e6
    return SETUP_S + cfg.main_delay_s + 5 * cfg.link.rtt_ms / 1000 + transfer + analysis


def default_timeout(cfg: RunConfig) -> float:
    """Generous but finite: how long the transfer may run (client_limit),
    plus setup, teardown and the analysis of the capture."""
    params = {"rtt": cfg.link.rtt_ms, "size": cfg.size_bytes, "time_limit": cfg.time_limit_s}
    return 180 + client_limit(params, cfg.link.rate_bps) + cfg.size_bytes / 2e6


# Cores a cell keeps busy. First measured per process over whole runs on this
# 2-core VM (30 MB, 8 Mbit/s HTB, buffered captures; setup excluded): scp and
# ftp 0.16 cores at 7.6 Mbit/s, rsync 0.19, saratoga 0.28 (its sender paces
# each frame), a pepd pair 0.06 more at 6.3 Mbit/s, and a cell whose TCP
# crawls at BER 1e-5 0.03. Nearly all of it is per-packet work (every hop's
# wake-ups, the emulator's departures), so it scales with the goodput. Since
# then a cell runs on one core and satemu reads slow links from plain sockets
# (no ring timer): the costliest Global Hawk cell, scp through pepd at 7 Mbit/s,
# went from 33.3 to 16.2 CPU-s in its control group (43.3 to 15.2 of what
# spinners beside it lost), so every per-Mbit figure is halved; the meter
# checks the model against the measured load (docs/benchmarks/matrix.md).
IDLE_CORES = 0.03
CORES_PER_MBIT = {"saratoga": 0.019, "rsync": 0.013}
CORES_PER_MBIT_DEFAULT = 0.011
PEP_CORES_PER_MBIT = 0.005


def cell_cost(cfg: RunConfig) -> float:
    """Cores one cell keeps busy at its modelled goodput (see CORES_PER_MBIT)."""
    if cfg.client == "ping":
        return IDLE_CORES
    per_mbit = CORES_PER_MBIT.get(cfg.client, CORES_PER_MBIT_DEFAULT)
    if cfg.pep != "none" or any(p.name != "none" for p in cfg.peps.values()):
        per_mbit += PEP_CORES_PER_MBIT
    return IDLE_CORES + per_mbit * expected_goodput(cfg) / 1e6 + background_cost(cfg)


def warmup_seconds(cfg: RunConfig) -> float:
    """How long after its start a cell's steady cost may not show in the
    measured load yet (admission.Admission.load): its testbed's build, which
    a full matrix stretches to several times SETUP_S, the traffic's head
    start, the handshakes and the transfer's slow start, in round trips."""
    return LOADED_SETUP_S + cfg.main_delay_s + WARMUP_RTTS * cfg.link.rtt_ms / 1000 + WARMUP_EXTRA_S


def background_cost(cfg: RunConfig) -> float:
    """Background traffic can fill the fastest emulated link: model it as a
    TCP transfer at that rate (unshaped links count as 100 Mbit/s)."""
    if not cfg.traffic:
        return 0.0
    rates = [link.rate_bps or 100e6 for link in (cfg.link, *cfg.links.values())]
    return CORES_PER_MBIT_DEFAULT * max(rates) / 1e6



def assess(exp: Experiment) -> Experiment:
    """Each cell's expected wall time, time limit (the file's, else
    default_timeout) and CPU cost, from its configuration."""
    for cell in exp.cells:
        cfg = cell.run_config()
        cell.estimate_s = estimate_seconds(cfg)
        cell.timeout_s = float(exp.timeout) if exp.timeout else default_timeout(cfg)
        cell.cost = cell_cost(cfg)
        cell.warmup_s = warmup_seconds(cfg)
    return exp


def fmt_s(s: float) -> str:
    s = int(s)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


# Clients without measurements borrow the transfer behaviour of a similar one.
SIMILAR = {"sftp": "scp", "rsync": "scp", "nuttcp-tcp": "ftp", "wget": "ftp", "iperf3": "ftp"}


def client_limit(params: dict, rate_bps: float | None) -> float:
    """How long a transfer may run: the time limit, else the clients' own
    stall limit (ClientContext.transfer_timeout)."""
    stall = stall_limit(params["size"], params["rtt"], rate_bps)
    return min(stall, params["time_limit"]) if params.get("time_limit") else stall


def wall_estimate(exp: Experiment, store_paths: list[str], jobs: int | None = None) -> dict:
    """Estimate a matrix's wall time from measured cells (typically a smaller
    size): per (client, PEP, BER) the measured transfer seconds per byte,
    interpolated linearly in RTT (window- and loss-limited TCP both take time
    proportional to RTT), scaled to each cell's size and capped at the
    clients' stall limit; a stalled measurement counts as its limit (a lower
    bound). Plus the measured per-cell overhead (setup, handshakes, teardown,
    analysis), fitted as a + b x size. Cells run longest first under the
    admission, their costs calibrated by the measured cells' CPU
    (admission.Calibration) where the store kept it."""
    rows: list[CellRow] = []
    for p in store_paths:
        if not os.path.isfile(p):
            raise SatbedError(f"no results database {p}")
        with Store(p, read_only=True) as s:
            found = [r for r in s.cells() if r.seconds and r.params.get("client") != "ping"
                     and r.status in ("ok", "limited", "failed", "timeout")]
        for r in found:
            # Store checked each value's type; a measured cell needs these too.
            if any(k not in r.params for k in ("client", "pep", "ber", "rtt", "size")) or \
                    not isinstance(r.metrics.get("seconds", 0), (int, float)) or \
                    not isinstance(r.config.get("link", {}), dict):
                raise SatbedError(f"{p}: cell {r.hash!r}: damaged (a measured cell without its parameters)")
        rows += found
    if jobs is not None and jobs < 1:
        raise SatbedError(f"--jobs must be at least 1, got {jobs}")
    admit = Admission.for_host(jobs)
    points: dict[tuple, dict[float, list[float]]] = {}
    overheads: list[tuple[float, float]] = []
    for r in rows:
        p = r.params
        rate = r.config.get("link", {}).get("a_to_b", {}).get("rate_bps")
        if r.status == "ok":
            if not r.metrics.get("seconds"):
                continue
            per_byte = r.metrics["seconds"] / p["size"]
            overheads.append((p["size"], r.seconds - r.metrics["seconds"]))
        else:
            per_byte = client_limit(p, rate) / p["size"]
        points.setdefault((p["client"], p["pep"], p["ber"]), {}).setdefault(p["rtt"], []).append(per_byte)
    a, b = _fit(overheads)
    # The admission's costs, corrected as a matrix corrects them: by what the
    # measured cells of each kind took (their control groups' CPU seconds).
    calibration = Calibration()
    calibrated = sum(calibration.measured(r.params, model, r.cpu_s, r.seconds)
                     for r in rows if (model := stored_cost(r)) is not None)
    calibration.recost(exp.cells)

    def per_byte(cell: Cell) -> float | None:
        p = cell.params
        for client in (p["client"], SIMILAR.get(p["client"])):
            curve = points.get((client, p["pep"], p["ber"]))
            if curve:
                return _interpolate({k: sum(v) / len(v) for k, v in curve.items()}, p["rtt"])
        return None

    times: list[tuple[float, Cell]] = []
    stalled = modelled = 0
    for c in exp.cells:
        rate = c.config["link"]["a_to_b"]["rate_bps"]
        limit = client_limit(c.params, rate)
        pb = per_byte(c)
        if pb is None:
            modelled += 1
            transfer = c.estimate_s - SETUP_S
        else:
            transfer = pb * c.params["size"]
        if transfer >= limit:
            stalled += 1
            transfer = limit
        times.append((a + b * c.params["size"] + transfer, c))
    times.sort(key=lambda tc: -tc[0])
    wall = admit.simulate([c for _, c in times], [t for t, _ in times])
    return {"cells": len(exp.cells), "admission": admit.describe(), "cell_seconds": round(sum(t for t, _ in times)),
            "wall_seconds": round(wall), "wall": fmt_s(wall), "measured_cells": len(rows),
            "cells_expected_to_stall": stalled, "cells_without_measurement": modelled,
            "cells_measuring_cpu": calibrated,
            "overhead_s": {"base": round(a, 1), "per_mb": round(b * (1 << 20), 3)}}


def stored_cost(row: CellRow) -> float | None:
    """The model's cost of a stored cell, from its stored configuration;
    None where that no longer makes a RunConfig (a store from an older or
    newer satbed, or none kept)."""
    try:
        return cell_cost(RunConfig.from_dict(row.config))
    except (SatbedError, KeyError, TypeError, ValueError, AttributeError):
        return None


def _fit(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares a + b x; flat when x does not vary."""
    if not pairs:
        return 3 * SETUP_S, 0.0
    xs, ys = [x for x, _ in pairs], [y for _, y in pairs]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return my, 0.0
    b = max(0.0, sum((x - mx) * (y - my) for x, y in pairs) / var)
    return my - b * mx, b


def _interpolate(curve: dict[float, float], x: float) -> float:
    ks = sorted(curve)
    if x <= ks[0]:
        return curve[ks[0]]
    if x >= ks[-1]:
        return curve[ks[-1]]
    for lo, hi in zip(ks, ks[1:]):
        if lo <= x <= hi:
            return curve[lo] + (curve[hi] - curve[lo]) * (x - lo) / (hi - lo)
    return curve[ks[-1]]

