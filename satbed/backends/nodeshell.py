"""`satbed cli --backend docker`: Mininet's CLI for container nodes.

Mininet's CLI drives its own shells in namespaces; container nodes run
commands through their sandbox instead, so this is the same language on
satbed's nodes: `NODE COMMAND...` runs COMMAND in NODE (host names among the
arguments become their addresses: `clientA ping clientB`), `nodes`, `links`,
`exit`. The terminal is the command's own (interactive tools work); Ctrl-C
goes to the command, not to the shell.
"""

from __future__ import annotations

import cmd
import shlex
import signal

from satbed.core import signals
from satbed.core.errors import SatbedError
from satbed.backends.net import Host
from satbed.backends.testbed import Testbed


class NodeShell(cmd.Cmd):
    prompt = "satbed> "

    def __init__(self, tb: Testbed):
        super().__init__()
        self.tb = tb
        self.intro = (f"satbed testbed {tb.prefix} up on containers: {', '.join(tb.nodes)}. "
                      "Try `clientA ping clientB`; `nodes`, `links`, `exit`.")

    def emptyline(self) -> bool:
        return False

    def do_nodes(self, _: str) -> None:
        """nodes: each node, its container and image"""
        for name, node in self.tb.nodes.items():
            sb = node.sandbox
            ip = f" {node.ip}" if isinstance(node, Host) else ""
            print(f"{name:<9} {getattr(sb, 'name', '')} {getattr(sb, 'image', '')}{ip}")

    def do_links(self, _: str) -> None:
        """links: the veth pairs"""
        for link in self.tb.links:
            print(f"{link.a.node.name}.{link.a.port} ({link.a.name}) = {link.b.node.name}.{link.b.port} ({link.b.name})")

    def do_exit(self, _: str) -> bool:
        """exit: tear the testbed down"""
        return True

    do_quit = do_exit

    def do_EOF(self, _: str) -> bool:
        print()
        return True

    def default(self, line: str) -> None:
        try:
            words = shlex.split(line)
        except ValueError as e:
            print(f"*** {e}")
            return
        node = self.tb.nodes.get(words[0])
        if node is None or len(words) < 2:
            print(f"*** unknown command or node: {words[0]} (nodes: {', '.join(self.tb.nodes)})")
            return
        args = [str(self.tb.hosts[w].ip.ip) if w in self.tb.hosts else w for w in words[1:]]
        # The command gets Ctrl-C (runc passes it on); the shell waits for it.
        with signals.handled(signal.SIG_IGN, signal.SIGINT):
            try:
                proc = node.popen(args, stdin=None, stdout=None, stderr=None)
                proc.wait()
                node.procs.remove(proc)
            except SatbedError as e:
                print(f"*** {e}")
