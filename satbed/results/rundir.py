"""A run directory as `satbed report` finds it, checked before anything is
drawn from it: its result.json and config.json whole JSON objects of a
format this satbed reads, their times times, its subdirectories directories.
A damaged or foreign directory is one line naming the file at fault."""

from __future__ import annotations

import math
import os

from satbed.core.errors import SatbedError
from satbed.core.files import read_json
from satbed.model.config import RESULT_FORMAT, RunConfig

SUBDIRS = ("captures", "emulator", "pep", "logs", "analysis")
TIME_KEYS = ("started", "finished")
LATEST_EPOCH_S = 1e11


def check(run_dir: str) -> dict:
    """The run's result.json, once the directory is found sound."""
    result = _object(os.path.join(run_dir, "result.json"), "run result")
    fmt = result.get("format", 1)       # runs written before the format was recorded
    if isinstance(fmt, bool) or not isinstance(fmt, int) or fmt < 1:
        raise SatbedError(f"{run_dir}/result.json: damaged (format {fmt!r})")
    if fmt > RESULT_FORMAT:
        raise SatbedError(f"{run_dir}/result.json: format {fmt}, newer than this satbed's ({RESULT_FORMAT}): "
                          f"use the satbed that wrote it")
    for k in TIME_KEYS:
        v = result.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                              or not 0 <= v <= LATEST_EPOCH_S):
            raise SatbedError(f"{run_dir}/result.json: damaged ({k} {v!r} is not a time)")
    config_path = os.path.join(run_dir, "config.json")
    if os.path.lexists(config_path):
        config = _object(config_path, "run configuration")
        try:
            RunConfig.from_dict(config)
        except SatbedError as e:
            raise SatbedError(f"{config_path}: damaged ({e})") from None
        except (TypeError, ValueError, KeyError, AttributeError) as e:
            raise SatbedError(f"{config_path}: damaged ({type(e).__name__}: {str(e)[:100]})") from None
    for name in SUBDIRS:
        path = os.path.join(run_dir, name)
        if os.path.lexists(path) and not os.path.isdir(path):
            raise SatbedError(f"{path}: a file where the run's {name} directory belongs")
    return result


def _object(path: str, what: str) -> dict:
    doc = read_json(path, what)
    if not isinstance(doc, dict):
        raise SatbedError(f"{path}: a damaged {what} (not a JSON object)")
    return doc
