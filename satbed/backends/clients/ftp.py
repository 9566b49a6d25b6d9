"""FTP as the study ran it: vsftpd on the aircraft, NcFTP on the ground
(ncftpget for download, ncftpput for upload), anonymous login, passive mode."""

from __future__ import annotations

import os
import pwd

from satbed.backends.clients.base import ClientContext
from satbed.backends.clients.transfer import Run, TransferClient, ip
from satbed.core.errors import SatbedError

PORT = 21
PASV_PORTS = (40000, 40099)
ANON_USER = "ftp"   # Debian's vsftpd package creates it

CONFIG = """\
# satbed per-run vsftpd configuration
listen=YES
listen_ipv6=NO
listen_address={ip}
listen_port={port}
background=NO
anonymous_enable=YES
no_anon_password=YES
ftp_username={user}
anon_root={root}
local_enable=NO
write_enable={upload}
anon_upload_enable={upload}
anon_mkdir_write_enable=NO
anon_umask=022
pasv_enable=YES
pasv_min_port={pasv_min}
pasv_max_port={pasv_max}
connect_from_port_20=NO
secure_chroot_dir={empty}
xferlog_enable=YES
vsftpd_log_file={xferlog}
syslog_enable=NO
seccomp_sandbox=NO
isolate_network=NO
use_sendfile=YES
"""


class Ftp(TransferClient):
    name = "ftp"
    tools = ("vsftpd", "ncftpget", "ncftpput")
    # ncftpget -B: without it NcFTP raises a data socket's buffer below 64 KB
    # to 64 KB itself, so no host setting holds its window lower.
    rcvbuf_directions = ("download",)

    def transfer(self, ctx: ClientContext, t: Run) -> dict:
        server, client = ctx.aircraft, ctx.ground
        upload = ctx.direction == "upload"
        # Anonymous FTP is chrooted to a root it may not write (vsftpd
        # refuses a writable one); uploads land in incoming/, which it may.
        root = t.mkdir("root")
        os.chmod(root, 0o555)
        incoming = t.mkdir("root", "incoming")
        os.chown(incoming, *_ids(ANON_USER))
        if upload:
            payload = t.payload(t.path("ground", "payload.bin"))
            received = t.expect(os.path.join(incoming, "payload.bin"))
        else:
            payload = t.payload(os.path.join(root, "payload.bin"))
            received = t.expect(t.path("ground", "payload.bin"))

        # vsftpd's own empty directory is made by its package's tmpfiles at
        # boot, which a container node never ran: an empty root-owned one per run.
        empty = t.mkdir("vsftpd-empty")
        os.chmod(empty, 0o555)
        conf = t.path("vsftpd.conf")
        with open(conf, "w", encoding="ascii") as f:
            f.write(CONFIG.format(ip=ip(server), port=PORT, user=ANON_USER, root=root, empty=empty,
                                  upload="YES" if upload else "NO", pasv_min=PASV_PORTS[0],
                                  pasv_max=PASV_PORTS[1], xferlog=ctx.path("logs", "ftp-xfer.log")))
        t.server(server, "vsftpd", [self.tool("vsftpd"), conf], PORT)
        connect_ms = t.connect_ms(client, ip(server), PORT)
        if upload:
            args = [self.tool("ncftpput"), "-V", "-d", "/dev/stdout", "-P", str(PORT), ip(server), "/incoming",
                    payload.path]
        else:
            args = [self.tool("ncftpget"), "-V", "-d", "/dev/stdout", "-P", str(PORT),
                    *(["-B", str(ctx.rcvbuf)] if ctx.rcvbuf else []), ip(server),
                    os.path.dirname(received), "/payload.bin"]
        seconds, _ = t.client(client, args, env=t.env())
        return t.verify(payload, received, seconds, tcp_connect_ms=connect_ms)


def _ids(user: str) -> tuple[int, int]:
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise SatbedError(f"ftp: no user {user!r} for anonymous FTP (the vsftpd package creates it)") from None
    return pw.pw_uid, pw.pw_gid
