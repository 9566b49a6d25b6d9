"""satbed: a network-emulation testbed for satellite links (control plane)."""

import importlib.util
import sys

__version__ = "0.1.0"


def _prefer_stdlib_distutils() -> None:
    """Mininet imports distutils.version. setuptools' import hook, which a .pth
    file installs at interpreter start, answers that with all of setuptools:
    0.3 s of CPU at the start of every satbed command and worker, about half
    of its imports. The standard library's distutils serves Mininet as well
    wherever this Python still has it (before 3.12); elsewhere the hook stays."""
    hook = sys.modules.get("_distutils_hack")
    if hook is None or "distutils" in sys.modules:
        return
    hook.remove_shim()
    if importlib.util.find_spec("distutils") is None:
        hook.add_shim()


_prefer_stdlib_distutils()
