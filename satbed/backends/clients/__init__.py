"""Client adapters, found the way PEP adapters are: by looking, not by a list.
Every module in this package (and in each directory of SATBED_CLIENT_PATH, a
lab's own adapters) that defines a concrete `Client` subclass with a `name`
adds that client; two adapters with one name are refused."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import pkgutil
import stat

from satbed.backends.clients.base import Client, ClientContext
from satbed.core.errors import SatbedError

PATH_ENV = "SATBED_CLIENT_PATH"


def _adapters_in(module) -> list[type[Client]]:
    return [c for _, c in inspect.getmembers(module, inspect.isclass)
            if issubclass(c, Client) and not inspect.isabstract(c) and c.name and c.__module__ == module.__name__]


def discover() -> dict[str, type[Client]]:
    found: dict[str, type[Client]] = {}

    def add(cls: type[Client], where: str) -> None:
        if cls.name in found and found[cls.name] is not cls:
            raise SatbedError(f"two client adapters are named {cls.name!r} ({found[cls.name].__module__}, {where})")
        found[cls.name] = cls

    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for cls in _adapters_in(module):
            add(cls, module.__name__)
    for directory in filter(None, os.environ.get(PATH_ENV, "").split(os.pathsep)):
        for fname in sorted(os.listdir(directory)) if os.path.isdir(directory) else ():
            if not fname.endswith(".py"):
                continue
            path = os.path.join(os.path.abspath(directory), fname)
            try:
                regular = stat.S_ISREG(os.stat(path).st_mode)
            except OSError as e:
                raise SatbedError(f"client adapter {path}: {e.strerror}") from None
            if not regular:     # a FIFO named like an adapter would block the import forever
                raise SatbedError(f"client adapter {path}: not a regular file")
            spec = importlib.util.spec_from_file_location(f"satbed_client_{fname[:-3]}", path)
            module = importlib.util.module_from_spec(spec)
            try:
                spec.loader.exec_module(module)
            except Exception as e:  # a lab's file: one line, not a traceback
                raise SatbedError(f"client adapter {path}: {type(e).__name__}: {e}") from None
            for cls in _adapters_in(module):
                add(cls, path)
    return found


REGISTRY: dict[str, type[Client]] = discover()


def get(name: str) -> Client:
    """The adapter for a client name. Instantiating checks its tools, so a
    missing one fails here, before any testbed is built."""
    try:
        cls = REGISTRY[name]
    except KeyError:
        raise SatbedError(f"unknown client {name!r} (known: {', '.join(sorted(REGISTRY))})") from None
    try:
        return cls()
    except SatbedError:
        raise
    except Exception as e:  # a lab's adapter whose constructor fails: its fault, said in one line
        raise SatbedError(f"client adapter {name!r} ({cls.__module__}) failed to start: "
                          f"{type(e).__name__}: {e}") from None


__all__ = ["Client", "ClientContext", "REGISTRY", "discover", "get"]
