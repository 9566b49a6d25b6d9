"""Interactive sessions, judged by what a typist feels: the time from a
keystroke to its echo. telnet (inetutils telnetd behind a socat listener) and
ssh (the per-run sshd) run on the ground, as the PI would, into the aircraft.
The remote program is cat on a pseudo-terminal, so every echo is the server
tty's echo of the key, as at a shell prompt, with no prompt text to confuse.

The client runs on a pseudo-terminal of ours. Both clients take that
terminal over once their session is up: ssh sends its modes to the server's
pty and then sets it raw, telnet turns local echo off when the server says it
will echo. Typing starts only after local echo is off, so an echo we see has
crossed the link and come back."""

from __future__ import annotations

import os
import select
import string
import termios
import time

from satbed.backends.clients.base import ClientContext
from satbed.backends.clients.ssh import SshServer
from satbed.backends.clients.transfer import Run, TransferClient, ip, percentiles
from satbed.backends.clients.processes import stop_gently
from satbed.core.errors import SatbedError
from satbed.backends.net import Host

TELNET_PORT = 23
WARMUP = b"@"           # typed until echoed: the session is up end to end
INTERRUPT = b"\x03"     # ends the remote cat (the remote tty turns it into SIGINT)


class _Keystrokes(TransferClient):
    keystrokes = 20
    gap_s = 0.05            # between an echo and the next key, as a typist would pause
    interactive = True

    def transfer(self, ctx: ClientContext, t: Run) -> dict:
        server, client = ctx.aircraft, ctx.ground
        args, port = self.start(ctx, t, server)
        connect_ms = t.connect_ms(client, ip(server), port)
        times = measure(t, client, args, self.keystrokes, self.gap_s,
                        setup_s=15 + 10 * ctx.rtt_ms / 1000, echo_s=5 + 5 * ctx.rtt_ms / 1000)
        stats = percentiles(times)
        return {"client": self.name, "direction": ctx.direction, "keystrokes": len(times),
                "tcp_connect_ms": connect_ms,
                **{f"keystroke_ms_{k}": v for k, v in stats.items()}}

    def start(self, ctx: ClientContext, t: Run, server: Host) -> tuple[list[str], int]:
        """Start the server; return the client command and the server port."""
        raise NotImplementedError


class Telnet(_Keystrokes):
    name = "telnet"
    tools = ("socat", "telnetd", "telnet")

    def start(self, ctx, t, server):
        # telnetd is an inetd service: socat plays inetd, handing each
        # accepted socket to a fresh telnetd as its stdin/stdout (nofork).
        # -E runs cat instead of login (no passwords); -h: no host banner.
        telnetd = f"{self.tool('telnetd')} -h -E /bin/cat"
        t.server(server, "socat", [self.tool("socat"), f"TCP-LISTEN:{TELNET_PORT},bind={ip(server)},reuseaddr,fork",
                                   f"EXEC:{telnetd},nofork"], TELNET_PORT)
        # -E: no escape character, so no key we type is taken by telnet itself.
        return [self.tool("telnet"), "-E", ip(server), str(TELNET_PORT)], TELNET_PORT


class Ssh(_Keystrokes):
    name = "ssh"
    tools = ("sshd", "ssh-keygen", "ssh")

    def start(self, ctx, t, server):
        sshd = SshServer(t, self.tool("ssh-keygen"), self.tool("sshd"), server, t.mkdir("ssh"))
        # -tt: a remote pty even though ours is not the controlling terminal;
        # -e none: no escape character.
        return [self.tool("ssh"), "-tt", "-e", "none", *sshd.options(), sshd.target, "cat"], sshd.port


def measure(t: Run, node, args: list[str], count: int, gap_s: float, setup_s: float, echo_s: float) -> list[float]:
    """Type `count` keys one at a time into the client; return each key's
    echo time in milliseconds."""
    master, slave = os.openpty()
    t.note("$ " + " ".join(args))
    try:
        proc = node.popen(args, stdin=slave, stdout=slave, stderr=slave, env=t.env(TERM="vt100"))
    finally:
        os.close(slave)
    seen = bytearray()
    times: list[float] = []
    try:
        # Keys typed before the session is up are buffered or lost: repeat
        # the warm-up key until one comes back.
        deadline = time.monotonic() + setup_s
        while termios.tcgetattr(master)[3] & termios.ECHO:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SatbedError(f"{t.name}: the session did not start within {setup_s:.0f} s (local echo "
                                  f"still on): {_last(seen) or 'no output'}")
            _read_until(master, seen, None, 0.05, len(seen))
        while WARMUP not in seen:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SatbedError(f"{t.name}: no echo within {setup_s:.0f} s of starting the session: "
                                  f"{_last(seen) or 'no output'}")
            os.write(master, WARMUP)
            _read_until(master, seen, WARMUP, min(1.0, deadline - time.monotonic()), len(seen))
        time.sleep(gap_s)
        _read_until(master, seen, None, 0.2, len(seen))     # drain stragglers of the warm-up
        for i in range(count):
            key = string.ascii_lowercase[i % 26].encode()
            mark = len(seen)
            start = time.perf_counter()
            os.write(master, key)
            if not _read_until(master, seen, key, echo_s, mark):
                raise SatbedError(f"{t.name}: keystroke {i + 1} not echoed within {echo_s:.0f} s")
            times.append((time.perf_counter() - start) * 1000)
            time.sleep(gap_s)
        os.write(master, INTERRUPT)
        try:
            proc.wait(timeout=echo_s)
        except Exception:   # subprocess.TimeoutExpired: stop it below
            pass
        _read_until(master, seen, None, 0.2, len(seen))
    finally:
        stop_gently(proc)
        if proc in node.procs:
            node.procs.remove(proc)
        os.close(master)
        t.note(seen.decode("utf-8", "replace"))
        t.note(f"[{os.path.basename(args[0])} exit {proc.returncode}] keystroke echo ms: "
               + " ".join(f"{x:.1f}" for x in times))
    return times


def _read_until(fd: int, buf: bytearray, want: bytes | None, timeout: float, start: int) -> bool:
    """Read from fd into buf until `want` appears after offset start (or, with
    want None, until the timeout); True when found."""
    deadline = time.monotonic() + max(0.0, timeout)
    while True:
        if want is not None and want in buf[start:]:
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:     # EIO: the client closed its side of the pty
            return want is not None and want in buf[start:]
        if not chunk:
            return False
        buf.extend(chunk)


def _last(buf: bytearray) -> str:
    lines = [ln.strip() for ln in buf.decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1] if lines else ""
