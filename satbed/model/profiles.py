"""Host TCP profiles as data: profiles/tcp/NAME.yaml (backends/profiles.py applies them per host inside
its namespace (sysctls of that namespace, and attributes on every route of
the host)). A setting the kernel cannot honour fails with one line naming it;
what was applied is returned for environment.json.

Keys (all optional; an absent key leaves the kernel's value):

  base: another profile whose settings this one starts from
  congestion_control: [bic, cubic]   the first this kernel offers (the list is the profile's own fallback)
  window_scaling, sack, timestamps, moderate_rcvbuf: true | false
  rmem, wmem: [min, default, max]    tcp_rmem / tcp_wmem; max bounds the largest window
  rto_min_ms, rto_max_ms: numbers    sysctls tcp_rto_min_us / tcp_rto_max_ms
  route: {initcwnd: 3, initrwnd: 10, window: 54750, rto_min: 200ms, quickack: true}
         route attributes (iproute2's words): initial windows in segments, the
         largest receive window advertised (bytes), minimum RTO, and delayed
         ACKs off (quickack)"""

from __future__ import annotations

import os
from dataclasses import dataclass, field


from satbed.core import yamlfile
from satbed.core.errors import SatbedError
from satbed.core.proc import REPO_ROOT

PROFILE_DIR = os.path.join(REPO_ROOT, "profiles", "tcp")
BOOL_SYSCTLS = {"window_scaling": "net.ipv4.tcp_window_scaling", "sack": "net.ipv4.tcp_sack",
                "timestamps": "net.ipv4.tcp_timestamps", "moderate_rcvbuf": "net.ipv4.tcp_moderate_rcvbuf"}
TRIPLE_SYSCTLS = {"rmem": "net.ipv4.tcp_rmem", "wmem": "net.ipv4.tcp_wmem"}
ROUTE_KEYS = ("initcwnd", "initrwnd", "window", "rto_min", "quickack")
KEYS = {"name", "description", "base", "congestion_control", "rto_min_ms", "rto_max_ms", "route",
        *BOOL_SYSCTLS, *TRIPLE_SYSCTLS}


@dataclass
class Profile:
    name: str
    description: str = ""
    congestion_control: list[str] = field(default_factory=list)
    sysctls: dict[str, str] = field(default_factory=dict)     # key -> value, in the order to apply
    route: dict[str, str] = field(default_factory=dict)       # iproute2 attribute -> value
    source: str = ""


def names() -> list[str]:
    if not os.path.isdir(PROFILE_DIR):
        return []
    return sorted(f[:-5] for f in os.listdir(PROFILE_DIR) if f.endswith(".yaml"))


def load(name: str, _seen: tuple[str, ...] = ()) -> Profile:
    path = os.path.join(PROFILE_DIR, name + ".yaml")
    if "/" in name or not os.path.isfile(path):
        raise SatbedError(f"unknown TCP profile {name!r} (known: {', '.join(names())})")
    if name in _seen:
        raise SatbedError(f"TCP profile {name}: base loops through {' -> '.join(_seen)}")
    doc = yamlfile.load(path, "TCP profile") or {}
    return parse(doc, name, path, (*_seen, name))


def parse(doc: object, name: str, source: str = "<data>", _seen: tuple[str, ...] = ()) -> Profile:
    def bad(msg: str) -> SatbedError:
        return SatbedError(f"TCP profile {source}: {msg}")

    if not isinstance(doc, dict):
        raise bad("must be a mapping")
    unknown = sorted(set(doc) - KEYS)
    if unknown:
        raise bad(f"unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(KEYS))})")
    prof = load(str(doc["base"]), _seen) if doc.get("base") else Profile(name)
    prof.name, prof.source = name, source
    prof.description = str(doc.get("description", prof.description))
    if "congestion_control" in doc:
        cc = doc["congestion_control"]
        cc = [cc] if isinstance(cc, str) else cc
        if not isinstance(cc, list) or not cc or not all(isinstance(c, str) for c in cc):
            raise bad("congestion_control must be a name or a list of names, first preferred")
        prof.congestion_control = list(cc)
    for key, sysctl in BOOL_SYSCTLS.items():
        if key in doc:
            if not isinstance(doc[key], bool):
                raise bad(f"{key} must be true or false")
            prof.sysctls[sysctl] = "1" if doc[key] else "0"
    for key, sysctl in TRIPLE_SYSCTLS.items():
        if key in doc:
            v = doc[key]
            if (not isinstance(v, list) or len(v) != 3 or not all(isinstance(x, int) and x > 0 for x in v)
                    or not v[0] <= v[1] <= v[2]):
                raise bad(f"{key} must be [min, default, max] bytes, ascending")
            prof.sysctls[sysctl] = " ".join(map(str, v))
    for key, sysctl, scale in (("rto_min_ms", "net.ipv4.tcp_rto_min_us", 1000), ("rto_max_ms", "net.ipv4.tcp_rto_max_ms", 1)):
        if key in doc:
            v = doc[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                raise bad(f"{key} must be a positive number of milliseconds")
            prof.sysctls[sysctl] = str(int(v * scale))
    if "route" in doc:
        r = doc["route"]
        if not isinstance(r, dict):
            raise bad(f"route must be a mapping of {', '.join(ROUTE_KEYS)}")
        for k, v in r.items():
            if k not in ROUTE_KEYS:
                raise bad(f"route: unknown attribute {k!r} (known: {', '.join(ROUTE_KEYS)})")
            if k == "quickack":
                if not isinstance(v, bool):
                    raise bad("route: quickack must be true or false")
                prof.route[k] = "1" if v else "0"
            elif k == "rto_min":
                prof.route[k] = f"{v}ms" if isinstance(v, (int, float)) else str(v)
            else:
                if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                    raise bad(f"route: {k} must be a positive integer")
                prof.route[k] = str(v)
    return prof
