"""Signal dispositions changed for a block only. satbed.cli.main runs
in-process too (tests, a lab's scripts): whatever it or the code under it
changes (SIGTERM unwinding like Ctrl-C, SIGINT held off during a teardown)
must be what the caller had again once it returns or raises, or the caller
and every child it starts later inherit it (an ignored SIGINT survives exec)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

Handler = Callable[[int, FrameType | None], object] | int


@contextmanager
def handled(handler: Handler, *signums: int) -> Iterator[None]:
    """Each of signums goes to handler (a function, SIG_IGN or SIG_DFL) inside
    the block; each gets its previous disposition back when the block returns
    or raises. Python handles signals in the main thread only: elsewhere the
    block runs with the dispositions unchanged (none could be set there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: list[tuple[int, Handler | None]] = []
    try:
        # Inside the try: a signal between two changes still undoes the first.
        for s in signums:
            previous.append((s, signal.signal(s, handler)))
        yield
    finally:
        for s, old in reversed(previous):
            # None: a handler installed outside Python, which Python cannot put back; the default is nearest.
            signal.signal(s, signal.SIG_DFL if old is None else old)
