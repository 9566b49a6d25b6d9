"""The path's health during a transfer: the PEPs and the emulators are
checked before the client starts, every few seconds while it runs, and
after it ends. A dead PEP or emulator ends the transfer within seconds and is
named as the failure, on either side, instead of the client it stranded
(which would otherwise fail only at its own timeout, minutes later)."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator, Sequence

from satbed.backends.pepnodes import unhealthy
from satbed.core import signals
from satbed.core.errors import SatbedError
from satbed.core.proc import last_line

# Each check runs every PEP's adapter in its node: a few processes and some
# milliseconds of CPU a call on a small VM, for every second of every cell of
# a matrix. Five seconds still names a dead PEP long before a client's own timeout.
INTERVAL_S = 5.0


class PathDown(SatbedError):
    """Raised in the main thread when the watcher finds the path broken."""


def problems(peps: Sequence, emulators: Sequence) -> str:
    """'' when every started PEP and emulator is up, else one line saying which are not."""
    found = [e.down() for e in emulators]
    found.append(unhealthy(list(peps)))
    return "; ".join(f for f in found if f)


@contextlib.contextmanager
def guarded(peps: Sequence, emulators: Sequence = (), interval: float = INTERVAL_S) -> Iterator[None]:
    down = problems(peps, emulators)
    if down:
        raise SatbedError(f"before the transfer: {down}")
    watcher = _Watcher(peps, emulators, interval)
    try:
        with watcher.running():
            yield
    except PathDown as e:
        raise SatbedError(f"during the transfer: {e}") from None
    except Exception as e:
        down = problems(peps, emulators)
        if down:
            raise SatbedError(f"{down} (the client then failed: {last_line(str(e))})") from e
        raise
    down = problems(peps, emulators)
    if down:
        raise SatbedError(f"after the transfer: {down}")


class _Watcher:
    """A thread that checks the path and interrupts the main thread with
    SIGUSR1 (turned into PathDown there) when something is down."""

    def __init__(self, peps: Sequence, emulators: Sequence, interval: float):
        self.peps, self.emulators, self.interval = peps, emulators, interval
        self.stop = threading.Event()
        self.reason = ""

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread() or not (self.peps or self.emulators):
            yield       # signals reach only the main thread: checked before and after only
            return
        main = threading.main_thread().ident

        def interrupt(signum, frame):
            raise PathDown(self.reason)

        with signals.handled(interrupt, signal.SIGUSR1):
            thread = threading.Thread(target=self._loop, args=(main,), name="satbed-path-watch", daemon=True)
            thread.start()
            try:
                yield
            finally:
                # Joined before SIGUSR1 is handed back: no late signal finds the previous handler.
                self.stop.set()
                thread.join()

    def _loop(self, main: int) -> None:
        # Asked every few seconds in every cell of a matrix (40 cells at once:
        # 16 adapter calls a second), so not the PEPs that run nothing.
        peps = [p for p in self.peps if not p.runs_nothing]
        while not self.stop.wait(self.interval):
            try:
                reason = problems(peps, self.emulators)
            except Exception:   # a check that cannot run is not a verdict
                continue
            if reason and not self.stop.is_set():
                self.reason = reason
                signal.pthread_kill(main, signal.SIGUSR1)
                return
