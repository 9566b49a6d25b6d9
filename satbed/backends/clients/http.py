"""wget over HTTP from a per-run lighttpd. wget only pulls, so the server
runs on the sending host and wget on the receiving one: the bytes flow the
way --direction says either way."""

from __future__ import annotations

from satbed.backends.clients.base import ClientContext
from satbed.backends.clients.transfer import Run, TransferClient, ip

PORT = 80

CONFIG = """\
# satbed per-run lighttpd configuration
# Bound as root, then chrooted into the document root and serving as
# www-data: it reaches the payload whatever modes the directories above have
# (a run directory under /root or pytest's 0700 tmp). No server.errorlog: a
# log file would be opened after the drop; errors go to stderr, into
# logs/wget-lighttpd.txt.
server.chroot = "{root}"
server.document-root = "/"
server.upload-dirs = ( "/" )
server.username = "www-data"
server.groupname = "www-data"
server.bind = "{ip}"
server.port = {port}
server.max-keep-alive-requests = 0
mimetype.assign = ( "" => "application/octet-stream" )
"""


class Wget(TransferClient):
    name = "wget"
    tools = ("lighttpd", "wget")

    def transfer(self, ctx: ClientContext, t: Run) -> dict:
        server, client = ctx.sender, ctx.receiver
        root = t.mkdir("www")
        payload = t.payload(t.path("www", "payload.bin"))
        received = t.expect(t.path("received", "payload.bin"))
        conf = t.path("lighttpd.conf")
        with open(conf, "w", encoding="ascii") as f:
            f.write(CONFIG.format(root=root, ip=ip(server), port=PORT))
        # -D: foreground, so we own the process.
        t.server(server, "lighttpd", [self.tool("lighttpd"), "-D", "-f", conf], PORT)
        connect_ms = t.connect_ms(client, ip(server), PORT)
        seconds, _ = t.client(client, [self.tool("wget"), "--no-proxy", "--no-verbose", "--tries=1",
                                       f"--output-document={received}",
                                       f"http://{ip(server)}:{PORT}/payload.bin"], env=t.env())
        return t.verify(payload, received, seconds, tcp_connect_ms=connect_ms,
                        server_host=server.name, client_host=client.name)
