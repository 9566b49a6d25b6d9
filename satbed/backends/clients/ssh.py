"""The OpenSSH family: a per-run sshd on the aircraft (its own host key, one
authorized client key, no passwords), and scp, sftp and rsync-over-ssh on
the ground."""

from __future__ import annotations

import os
import shlex

from satbed.backends.clients.base import ClientContext
from satbed.backends.clients.transfer import Run, TransferClient, ip
from satbed.backends.net import Host

PORT = 22
# A physical test bed's machine (--backend ansible) runs its own sshd on 22,
# the one Ansible and the run's control connections use: the run's sshd
# takes this port there.
MACHINE_PORT = 2222
PRIVSEP_DIR = "/run/sshd"   # sshd refuses to start without it; its service unit makes it

CONFIG = """\
# satbed per-run sshd configuration
ListenAddress {ip}:{port}
HostKey {host_key}
PidFile none
AuthorizedKeysFile {authorized}
AuthenticationMethods publickey
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
# Run directories may sit under world-writable /tmp.
StrictModes no
UseDNS no
PrintMotd no
PrintLastLog no
MaxStartups 100
Subsystem sftp internal-sftp
# Debian's bash sources ~/.bashrc for commands sshd runs (scp -t, rsync
# --server) unless SHLVL is already 1 or more; root's bashrc would otherwise
# be timed as part of every transfer (here pyenv init, about 2 s).
SetEnv SHLVL=1
"""


class SshServer:
    """sshd in a node plus the client options that reach it."""

    def __init__(self, t: Run, keygen: str, sshd: str, server: Host, ssh_dir: str):
        self.t, self.server, self.dir = t, server, ssh_dir
        self.port = PORT if server.sandbox.local else MACHINE_PORT
        host_key = os.path.join(ssh_dir, "host_ed25519")
        self.client_key = os.path.join(ssh_dir, "id_ed25519")
        for key in (host_key, self.client_key):
            for old in (key, key + ".pub"):
                if os.path.exists(old):
                    os.unlink(old)
            t.client(server, [keygen, "-q", "-t", "ed25519", "-N", "", "-C", "satbed", "-f", key], timeout=30)
        authorized = os.path.join(ssh_dir, "authorized_keys")
        with open(self.client_key + ".pub", encoding="ascii") as src, open(authorized, "w", encoding="ascii") as dst:
            dst.write(src.read())
        conf = os.path.join(ssh_dir, "sshd_config")
        with open(conf, "w", encoding="ascii") as f:
            f.write(CONFIG.format(ip=ip(server), port=self.port, host_key=host_key, authorized=authorized))
        os.makedirs(PRIVSEP_DIR, mode=0o755, exist_ok=True)
        # -D: stay in the foreground so we own it; -e: log to stderr (our log).
        t.server(server, "sshd", [sshd, "-D", "-e", "-f", conf], self.port)

    def options(self) -> list[str]:
        """Client options: this run's key only, the host key accepted and
        remembered in a per-run known_hosts, never a password prompt."""
        known = os.path.join(self.dir, "known_hosts")
        return ["-F", "/dev/null", "-i", self.client_key, "-o", "IdentitiesOnly=yes",
                "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                "-o", f"UserKnownHostsFile={known}", "-o", "GlobalKnownHostsFile=/dev/null",
                "-o", "LogLevel=ERROR", "-o", f"ConnectTimeout={int(10 + 3 * self.t.ctx.rtt_ms / 1000)}",
                "-p", str(self.port)]

    @property
    def target(self) -> str:
        return f"root@{ip(self.server)}"


class _SshTransfer(TransferClient):
    """Server on the aircraft, client on the ground; the direction picks
    which copy is the source."""

    extra_tools: tuple[str, ...] = ()

    def transfer(self, ctx: ClientContext, t: Run) -> dict:
        server, client = ctx.aircraft, ctx.ground
        sshd = SshServer(t, self.tool("ssh-keygen"), self.tool("sshd"), server, t.mkdir("ssh"))
        connect_ms = t.connect_ms(client, ip(server), sshd.port)
        if ctx.direction == "upload":
            payload = t.payload(t.path("ground", "payload.bin"))
            received = t.expect(t.path("aircraft", "payload.bin"))
        else:
            payload = t.payload(t.path("aircraft", "payload.bin"))
            received = t.expect(t.path("ground", "payload.bin"))
        remote = received if ctx.direction == "upload" else payload.path
        seconds, _ = t.client(client, self.command(ctx, t, sshd, remote, payload.path, received),
                              env=t.env())
        return t.verify(payload, received, seconds, tcp_connect_ms=connect_ms)

    def command(self, ctx: ClientContext, t: Run, sshd: SshServer, remote: str, source: str,
                dest: str) -> list[str]:
        raise NotImplementedError


class Scp(_SshTransfer):
    name = "scp"
    tools = ("sshd", "ssh-keygen", "scp")

    def command(self, ctx, t, sshd, remote, source, dest):
        # -O: the classic SCP protocol the study measured; OpenSSH 9 would
        # otherwise speak SFTP underneath, making scp and sftp the same.
        args = [self.tool("scp"), "-O", "-q", *_scp_port(sshd.options())]
        if ctx.direction == "upload":
            return [*args, source, f"{sshd.target}:{remote}"]
        return [*args, f"{sshd.target}:{remote}", dest]


class Sftp(_SshTransfer):
    name = "sftp"
    tools = ("sshd", "ssh-keygen", "sftp")

    def command(self, ctx, t, sshd, remote, source, dest):
        batch = t.path("ssh", "sftp-batch")
        with open(batch, "w", encoding="utf-8") as f:
            if ctx.direction == "upload":
                f.write(f"put {_quote(source)} {_quote(remote)}\n")
            else:
                f.write(f"get {_quote(remote)} {_quote(dest)}\n")
        return [self.tool("sftp"), "-b", batch, *_scp_port(sshd.options()), sshd.target]


class Rsync(_SshTransfer):
    name = "rsync"
    tools = ("sshd", "ssh-keygen", "ssh", "rsync")

    def command(self, ctx, t, sshd, remote, source, dest):
        shell = shlex.join([self.tool("ssh"), *sshd.options()])
        args = [self.tool("rsync"), "--stats", "--whole-file", "-e", shell]
        if ctx.time_limit_s:
            # Stopped by the limit, rsync would delete what arrived; keep it for the prefix check.
            args.append("--partial")
        if ctx.direction == "upload":
            return [*args, source, f"{sshd.target}:{remote}"]
        return [*args, f"{sshd.target}:{remote}", dest]


def _scp_port(options: list[str]) -> list[str]:
    """scp and sftp spell ssh's -p (port) as -P."""
    return ["-P" if o == "-p" else o for o in options]


def _quote(path: str) -> str:
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'
