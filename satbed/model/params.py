"""The parameters of a run, as one table: an experiment file's `fixed:`,
`axes:`, `variants:` and `reference:` name them, and `satbed run`'s flags
are generated from them (Param.flag). Each has a normaliser (raises
SatbedError or ValueError on a bad value) and a default."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from satbed.core.errors import SatbedError
from satbed.core.proc import REPO_ROOT
from satbed.core.units import parse_ber, parse_delay_ms, parse_loss, parse_rate, parse_size
from satbed.model import peps, scenario, topology
from satbed.model.link import Direction

EMULATORS = ("auto", "userspace", "tc", "bridge")
# A BER written as a percentage per packet (netem's `loss 0.001%`) and one per
# bit describe different links: at 1e-5 a 1500-byte frame is lost 1 time in
# 100,000 in the first, 11 times in 100 in the second.
BER_UNITS = ("bit", "packet")
CAPTURES = ("headers", "full", "none")
DIRECTIONS = ("download", "upload")


def _choice(*allowed: str) -> Callable[[Any], str]:
    def check(v: Any) -> str:
        v = str(v)
        if v not in allowed:
            raise SatbedError(f"{v!r} is not one of {', '.join(allowed)}")
        return v
    return check


def _pep(v: Any) -> str:
    peps.check(str(v))
    return str(v)


def _topology(v: Any) -> str:
    topology.find(str(v))
    return str(v)


def _rate(v: Any) -> int | float | str | None:
    if v is None:
        return None
    parse_rate(v)
    return v if isinstance(v, (int, float)) else str(v)


def _queue(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise SatbedError(f"queue must be a positive number of packets, got {v!r}")
    return v


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise SatbedError(f"expected true or false, got {v!r}")
    return v


def _time_limit(v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise SatbedError(f"time_limit must be a positive number of seconds or null, got {v!r}")
    return float(v)


def _seed(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise SatbedError(f"seed must be an integer, got {v!r}")
    return v


def _link(v: Any) -> dict:
    if not isinstance(v, dict):
        raise SatbedError(f"link must be a mapping of emulator fields, got {v!r}")
    known = {f.name for f in dataclasses.fields(Direction)}
    bad = sorted(set(v) - known)
    if bad:
        raise SatbedError(f"unknown link field {bad[0]!r} (known: {', '.join(sorted(known))})")
    out = dict(v)
    if isinstance(out.get("profile"), str) and not os.path.isabs(out["profile"]):
        # A repository path (profiles/link/...): satemu opens it from the
        # cell's own directory, where a relative name finds nothing.
        out["profile"] = os.path.join(REPO_ROOT, out["profile"])
    return out


def _scenario(v: Any) -> str | None:
    return None if v is None else scenario.find(str(v))


def seconds(v: str) -> float:
    """A command line's positive, finite number of seconds."""
    try:
        s = float(v)
    except ValueError:
        raise ValueError(f"not a number of seconds: {v!r}") from None
    if not 0 < s < math.inf:
        raise ValueError(f"must be a positive number of seconds: {v!r}")
    return s


@dataclass(frozen=True)
class Flag:
    """How a parameter appears among `satbed run`'s flags."""
    help: str
    type: Callable[[str], Any] = str      # the flag's text to the normaliser's input
    metavar: str | None = None
    group: str = ""                       # "link": the satellite link's group


@dataclass(frozen=True)
class Param:
    name: str
    normalise: Callable[[Any], Any]
    default: Any
    flag: Flag | None = None              # None: experiment files only

    @property
    def option(self) -> str:
        return "--" + self.name.replace("_", "-")


# The client is checked against the names handed to normalise (the backends'
# adapters), so its normaliser here only makes it a string.
TABLE = (
    Param("client", str, "ping", Flag("ping, ftp, scp, sftp, rsync, saratoga, nuttcp-tcp, ...")),
    Param("pep", _pep, "none", Flag("a PEP adapter name from pep/adapters (none, pepd, ...), or with "
                                    "--backend docker any PEP image (lab/pep:1; pep/CONTRACT.md)")),
    Param("pep_options", str, "", Flag("key=value options passed to the PEP adapter")),
    Param("rtt", lambda v: parse_delay_ms(v, "rtt"), 0.0,
          Flag("round-trip delay in ms (split evenly), default 0", group="link")),
    Param("ber", parse_ber, 0.0, Flag("bit-error rate on both directions, default 0", group="link")),
    Param("ber_unit", _choice(*BER_UNITS), "bit",
          Flag("what the ber figure is a probability per: bit (default; a frame's loss grows with its "
               "length) or packet (the figure becomes per-packet loss, as netem's loss percentage reads it)",
               group="link")),
    Param("loss", parse_loss, 0.0, Flag("per-packet loss probability on both directions, whatever a packet's "
                                        "length (netem's loss: 1e-5 or 0.001%%), default 0", group="link")),
    Param("size", parse_size, 10 << 20, Flag("transfer size, e.g. 100M (K/M/G suffixes), default 10M")),
    Param("direction", _choice(*DIRECTIONS), "download",
          Flag("download (aircraft to ground, the default) or upload")),
    Param("rate", _rate, None, Flag("sustained rate each way, e.g. 8mbit (default: the study's HTB, "
                                    "8mbit ceil 10mbit cburst 128k)", group="link")),
    Param("ceil", _rate, None, Flag("HTB ceil (default: the rate)", group="link")),
    Param("queue", _queue, None, Flag("bottleneck queue in packets (default 1000)", int, group="link")),
    Param("emulator", _choice(*EMULATORS), "auto",
          Flag(f"{'|'.join(EMULATORS)}; auto (default): tc where the kernel has netem, else userspace",
               group="link")),
    Param("captures", _choice(*CAPTURES), "headers", Flag("headers (default), full or none")),
    Param("topology", _topology, "globalhawk", Flag("a topology (topologies/NAME.yaml or a path), "
                                                    "default globalhawk")),
    Param("analyze", _bool, True),
    Param("graphs", _bool, False),
    Param("time_limit", _time_limit, None,
          Flag("stop a transfer still running after S seconds and measure what it delivered", seconds, "S")),
    Param("seed", _seed, 1, Flag("seed for errors and file contents, default 1", int, group="link")),
    Param("link", _link, None),
    Param("scenario", _scenario, None),
    Param("variant", str, ""),
)
PARAMS: dict[str, Param] = {p.name: p for p in TABLE}


def defaults() -> dict:
    return {p.name: p.default for p in TABLE}


def normalise(where: str, key: str, value: Any, clients: Collection[str]) -> Any:
    """One parameter's value as a cell holds it; a dotted key is a path into
    the scenario file, kept as given. clients: the client names there are."""
    if "." in key:
        try:
            scenario.check_path(key)
        except SatbedError as e:
            raise SatbedError(f"{where}: {e}") from None
        return value
    if key not in PARAMS:
        raise SatbedError(f"{where}: unknown parameter (known: {', '.join(PARAMS)})")
    try:
        value = PARAMS[key].normalise(value)
        if key == "client" and value not in clients:
            raise SatbedError(f"unknown client {value!r} (known: {', '.join(sorted(clients))})")
        return value
    except SatbedError as e:
        raise SatbedError(f"{where}: {e}") from None
    except (TypeError, ValueError) as e:
        raise SatbedError(f"{where}: bad value {value!r}: {e}") from None


def resolve(layers: list[tuple[str, dict]], clients: Collection[str], base: dict | None = None) -> dict:
    """Parameters from the defaults (or base) and then each layer in order
    (the file, the variant, --set paths, the flags typed), each value
    normalised; a layer's label prefixes its errors ("fixed", "--")."""
    params = dict(defaults() if base is None else base)
    for label, values in layers:
        for k, v in values.items():
            where = f"--{k.replace('_', '-')}" if label == "--" else f"{label}.{k}" if label else k
            params[k] = normalise(where, k, v, clients)
    return params
