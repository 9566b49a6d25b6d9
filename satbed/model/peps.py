"""The PEPs satbed knows: an adapter per executable in pep/adapters/ (the one
contract every PEP plugs in through), or an image reference for the Docker backend."""

from __future__ import annotations
import re
import os
from satbed.core.errors import SatbedError
from satbed.core.proc import REPO_ROOT

ADAPTER_DIR = os.path.join(REPO_ROOT, "pep", "adapters")


def names() -> list[str]:
    if not os.path.isdir(ADAPTER_DIR):
        return []
    return sorted(f for f in os.listdir(ADAPTER_DIR)
                  if os.access(os.path.join(ADAPTER_DIR, f), os.X_OK)
                  and os.path.isfile(os.path.join(ADAPTER_DIR, f)))


def is_image(name: str) -> bool:
    """A PEP named by image reference (it has a / : or @) rather than adapter."""
    return any(c in name for c in "/:@")


def check(name: str) -> str:
    """The adapter of a PEP name; an image reference is checked by the Docker
    backend when it creates the PEP node."""
    if is_image(name):
        return name
    if name not in names():
        raise SatbedError(f"unknown PEP {name!r} (known: {', '.join(names())}, "
                          "or an image reference with --backend docker)")
    return os.path.join(ADAPTER_DIR, name)


def check_backend(name: str, backend: str) -> None:
    if is_image(name) and backend != "docker":
        raise SatbedError(f"PEP image {name} needs --backend docker (namespace nodes take an adapter name: "
                          f"{', '.join(names())})")


def slug(name: str) -> str:
    """A PEP name fit for a directory name (an image reference has / and :)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


# pepd on a satellite leg with bit errors: BBR (paced, model-based) keeps its
# rate where loss-based cubic collapses, much as SCPS's rate control did, and
# WAN buffers of 8 x BDP instead of 2: at 1e-5 (11 % of frames lost) a hole
# stalls the window's left edge for one RTT, a lost retransmission for two or
# more, and the receiver must hold everything sent meanwhile (docs/benchmarks/pepd.md
# has the numbers). Options the user gives win; at BER 0 the defaults stay.
BER_DEFAULTS = {"pepd": (("cc", ("cc",), "bbr"), ("buffer_factor", ("buffer_factor", "wan_buf"), "8"))}


def effective_options(name: str, options: str, ber: float) -> str:
    """The options a PEP runs with on a link leaving its side with this
    bit-error rate: the user's, plus the PEP's defaults for lossy links
    (BER_DEFAULTS) where the user set none of the keys that decide them."""
    if not ber > 0 or name not in BER_DEFAULTS:
        return options
    given = {kv.partition("=")[0] for kv in options.split()}
    added = [f"{key}={value}" for key, deciders, value in BER_DEFAULTS[name] if not given & set(deciders)]
    if not added:
        return options
    return " ".join([options.strip(), *added] if options.strip() else added)
