"""Background traffic as data (a scenario's `traffic:` block): one or more groups,
each between two named hosts, with the group's workload (long-lived flows, finite
flows by Poisson arrivals or at a constant count, sizes, upload share).
backends/traffic.py runs it; analysis/traffic.py reads what it recorded."""

from __future__ import annotations

from dataclasses import asdict, dataclass
import math
import os
from satbed.core import units
from satbed.core.errors import SatbedError
from satbed.core.proc import REPO_ROOT

TABLE_DIR = os.path.join(REPO_ROOT, "clients", "trafficgen", "tables")


ARRIVALS = ("none", "poisson", "constant")


DEFAULT_PORT = 5301


def table_path(name: str) -> str:
    """A shipped table by name (surge-web) or a path, made absolute."""
    if os.sep not in name and not name.endswith(".cdf"):
        path = os.path.join(TABLE_DIR, name + ".cdf")
        if not os.path.isfile(path):
            known = sorted(f[:-4] for f in os.listdir(TABLE_DIR) if f.endswith(".cdf"))
            raise SatbedError(f"unknown size table {name!r} (shipped: {', '.join(known)}; or give a path)")
        return path
    path = os.path.abspath(name)
    if not os.path.isfile(path):
        raise SatbedError(f"size table {name!r} not found")
    return path


def parse_sizes(text: object) -> str:
    """A size distribution as trafficgen's -sizes takes it, sizes in bytes:
    100K | fixed:100K | exp:MEAN | pareto:SHAPE:MIN[:MAX] | table:NAME-OR-PATH."""
    if isinstance(text, int) and not isinstance(text, bool):
        return f"fixed:{units.parse_size(text)}"
    if not isinstance(text, str) or not text.strip():
        raise SatbedError(f"sizes {text!r}: want e.g. 100K, exp:1M, pareto:1.2:10K:50M or table:surge-web")
    kind, sep, rest = text.strip().partition(":")
    if not sep:
        kind, rest = "fixed", text.strip()
    args = rest.split(":")
    try:
        if kind == "fixed" and len(args) == 1:
            return f"fixed:{units.parse_size(args[0])}"
        if kind == "exp" and len(args) == 1:
            return f"exp:{units.parse_size(args[0])}"
        if kind == "pareto" and len(args) in (2, 3):
            shape = float(args[0])
            if not (shape > 0 and math.isfinite(shape)):
                raise ValueError
            sizes = [units.parse_size(a) for a in args[1:]]
            if len(sizes) == 2 and sizes[1] < sizes[0]:
                raise SatbedError(f"sizes {text!r}: the cap is below the minimum")
            return ":".join(["pareto", f"{shape:g}", *map(str, sizes)])
        if kind == "table" and rest:
            return f"table:{table_path(rest)}"
    except ValueError:
        pass
    except SatbedError as e:
        if str(e).startswith("sizes"):
            raise
        raise SatbedError(f"sizes {text!r}: {e}") from None
    raise SatbedError(f"sizes {text!r}: want BYTES, fixed:BYTES, exp:MEAN, pareto:SHAPE:MIN[:MAX] "
                      f"or table:NAME-OR-PATH")


@dataclass(frozen=True)
class TrafficGroup:
    """One generator pair: `client` opens flows to `server`."""
    server: str
    client: str
    long: int = 0                   # long-lived flows, open the whole run
    arrival: str = "none"           # finite flows: none, poisson or constant
    rate: float = 0.0               # poisson: arrivals per second; constant: the first
                                    # `concurrent` flows start as Poisson arrivals at it (0: at once)
    concurrent: int = 0             # constant: finite flows open at all times
    sizes: str = ""                 # trafficgen -sizes (see parse_sizes)
    upload_fraction: float = 0.0    # share of flows the client host sends
    port: int = DEFAULT_PORT
    max_active: int = 2000          # poisson: arrivals beyond it are skipped and counted

    @property
    def label(self) -> str:
        return f"{self.client}->{self.server}"


@dataclass(frozen=True)
class TrafficSpec:
    groups: tuple[TrafficGroup, ...]
    duration_s: float | None = None     # None: until stopped
    seed: int = 1

    GROUP_KEYS = ("server", "client", "long", "arrival", "rate", "concurrent", "sizes", "upload_fraction",
                  "port", "max_active")

    @classmethod
    def from_dict(cls, doc: object, source: str = "traffic") -> "TrafficSpec":
        """Validate a `traffic:` mapping: {duration, seed, groups: [...]}, or
        one group's keys at the top level. One clear error line on bad input."""
        def bad(msg: str) -> SatbedError:
            return SatbedError(f"{source}: {msg}")

        if not isinstance(doc, dict):
            raise bad("traffic must be a mapping")
        top = {"duration", "seed", "groups"}
        if "groups" in doc:
            unknown = set(doc) - top
            raw_groups = doc["groups"]
            if not isinstance(raw_groups, list) or not raw_groups:
                raise bad("groups must be a non-empty list")
        else:
            unknown = set(doc) - top - set(cls.GROUP_KEYS)
            raw_groups = [{k: v for k, v in doc.items() if k in cls.GROUP_KEYS}]
        if unknown:
            raise bad(f"unknown key(s): {', '.join(sorted(map(str, unknown)))}")
        duration = doc.get("duration")
        if duration is not None and (not _number(duration) or not duration > 0):
            raise bad(f"duration must be a positive number of seconds, got {duration!r}")
        seed = doc.get("seed", 1)
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63:
            raise bad(f"seed must be a non-negative integer, got {seed!r}")
        groups = []
        for i, g in enumerate(raw_groups, 1):
            where = f"group {i}" if len(raw_groups) > 1 else "traffic"
            groups.append(_group(g, lambda msg, w=where: bad(f"{w}: {msg}")))
        return cls(tuple(groups), float(duration) if duration is not None else None, seed)

    def to_dict(self) -> dict:
        return {"duration": self.duration_s, "seed": self.seed, "groups": [asdict(g) for g in self.groups]}


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _group(g: object, bad) -> TrafficGroup:
    if not isinstance(g, dict):
        raise bad("must be a mapping")
    unknown = set(g) - set(TrafficSpec.GROUP_KEYS)
    if unknown:
        raise bad(f"unknown key(s): {', '.join(sorted(map(str, unknown)))}")
    for key in ("server", "client"):
        if not isinstance(g.get(key), str) or not g.get(key):
            raise bad(f"needs a {key} host name")
    if g["server"] == g["client"]:
        raise bad(f"server and client are the same host ({g['server']})")
    long = g.get("long", 0)
    if not isinstance(long, int) or isinstance(long, bool) or not 0 <= long <= 10000:
        raise bad(f"long must be an integer in 0..10000, got {long!r}")
    arrival = g.get("arrival", "none")
    if arrival not in ARRIVALS:
        raise bad(f"arrival must be one of {', '.join(ARRIVALS)}, got {arrival!r}")
    rate, concurrent = g.get("rate", 0), g.get("concurrent")
    if arrival == "poisson" and (not _number(rate) or not 0 < rate <= 1e5):
        raise bad(f"poisson arrivals need rate (flows/s) in (0, 100000], got {rate!r}")
    if arrival == "constant" and (not _number(rate) or not 0 <= rate <= 1e5):
        raise bad(f"a constant count's ramp-up rate (flows/s) must be in [0, 100000], got {rate!r}")
    if arrival == "none" and rate:
        raise bad("rate is for poisson arrivals or a constant count's ramp-up")
    # concurrent 0: the group makes no flows (a sweep's point without competition).
    if arrival == "constant" and (not isinstance(concurrent, int) or isinstance(concurrent, bool)
                                  or not 0 <= concurrent <= 10000):
        raise bad(f"constant arrivals need concurrent (flows) in 0..10000, got {concurrent!r}")
    if arrival != "constant" and concurrent:
        raise bad("concurrent is for constant arrivals only")
    if arrival == "none" and long == 0:
        raise bad("no flows: give long, or arrival poisson/constant")
    sizes = ""
    if arrival != "none":
        if "sizes" not in g:
            raise bad("finite flows need sizes (e.g. 100K, exp:1M, pareto:1.2:10K:50M, table:surge-web)")
        try:
            sizes = parse_sizes(g["sizes"])
        except SatbedError as e:
            raise bad(str(e)) from None
    elif g.get("sizes"):
        raise bad("sizes are for finite flows (arrival poisson or constant)")
    up = g.get("upload_fraction", 0.0)
    if not _number(up) or not 0 <= up <= 1:
        raise bad(f"upload_fraction must be in [0, 1], got {up!r}")
    port = g.get("port", DEFAULT_PORT)
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise bad(f"port must be in 1..65535, got {port!r}")
    max_active = g.get("max_active", 2000)
    if not isinstance(max_active, int) or isinstance(max_active, bool) or max_active < 1:
        raise bad(f"max_active must be a positive integer, got {max_active!r}")
    return TrafficGroup(g["server"], g["client"], long, arrival, float(rate), concurrent or 0, sizes, float(up),
                        port, max_active)


TRAFFIC_DIR = "traffic"
