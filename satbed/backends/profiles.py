"""A host TCP profile (model/profiles.py) set inside the host's namespace:
sysctls of that namespace and attributes on every route of the host. A setting
the kernel cannot honour fails with one line naming it; what was applied is
returned for environment.json."""

from __future__ import annotations

import os

from satbed.backends.net import Host, allow_in_namespaces, _read_proc
from satbed.core.errors import SatbedError
from satbed.model.profiles import ROUTE_KEYS, Profile


def apply(profile: Profile, host: Host) -> dict:
    """Set the profile inside the host's namespace; returns what is in force."""
    def bad(setting: str, why: str) -> SatbedError:
        return SatbedError(f"TCP profile {profile.name} on {host.name}: {setting}: {why}")

    applied: dict = {"profile": profile.name, "source": profile.source}
    if profile.congestion_control:
        offered = _read_proc("/proc/sys/net/ipv4/tcp_available_congestion_control").split()
        usable = [cc for cc in profile.congestion_control if cc in offered]
        if not usable:
            raise bad("congestion_control", f"none of {', '.join(profile.congestion_control)} is offered "
                      f"by this kernel (available: {' '.join(offered)})")
        allow_in_namespaces(usable[0])
        host.sysctl("net.ipv4.tcp_congestion_control", usable[0])
    for key, value in profile.sysctls.items():
        if not os.path.exists("/proc/sys/" + key.replace(".", "/")):
            raise bad(key, "this kernel has no such setting")
        # Through the sandbox: a container node's /proc/sys is read-only to it.
        cp = host.sandbox.admin(host, ["sysctl", "-q", "-w", f"{key}={value}"])
        if cp.returncode != 0:
            raise bad(key, f"refused {value!r}: {cp.stderr.strip().splitlines()[-1] if cp.stderr.strip() else ''}")
    for key in ["net.ipv4.tcp_congestion_control", *profile.sysctls]:
        applied[key] = " ".join(host.run(["sysctl", "-n", key]).stdout.split())
        # sysctl exits 0 when the kernel refuses a write (a setting read-only
        # in a namespace): what the kernel kept is the test.
        if key in profile.sysctls and applied[key] != profile.sysctls[key]:
            raise bad(key, f"the kernel kept {applied[key]!r}, not {profile.sysctls[key]!r}")
    if profile.route:
        attrs = [w for k, v in profile.route.items() for w in (k, v)]
        routes = []
        for line in host.routes():
            words = _strip_attrs(line.split())
            cp = host.run(["ip", "route", "change", *words, *attrs], check=False)
            if cp.returncode != 0:
                raise bad("route " + " ".join(attrs), f"refused: {cp.stderr.strip()}")
        routes = host.routes()
        for line in routes:
            for k, v in profile.route.items():
                if k not in line.split():
                    raise bad(f"route {k} {v}", f"the kernel did not keep it ({line})")
        applied["routes"] = routes
    return applied


def _strip_attrs(words: list[str]) -> list[str]:
    """A route as `ip route` prints it, minus the attributes we set and the
    words `ip route change` does not take back (proto/scope stay)."""
    out, skip = [], 0
    for i, w in enumerate(words):
        if skip:
            skip -= 1
            continue
        if w in ROUTE_KEYS:
            skip = 1
            if w == "rto_min" and i + 1 < len(words) and words[i + 1] == "lock":
                skip = 2
            continue
        out.append(w)
    return out
