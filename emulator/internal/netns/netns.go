//go:build linux

// Package netns builds the three-namespace chain used by satemu's
// integration tests and benchmark:
//
//	sender ns (10.99.99.2/24) <-veth-> emulator ns (no IP) <-veth-> receiver ns (10.99.99.254/24)
//
// and runs code or commands inside those namespaces.
package netns

import (
	"os/exec"

	"satbed/internal/ns"
)

// Addresses of the end hosts.
const (
	SenderIP   = "10.99.99.2"
	ReceiverIP = "10.99.99.254"
)

// Chain is a built namespace chain. Names share a random prefix so parallel
// runs do not collide.
type Chain struct {
	Prefix                       string
	Sender, Emulator, Recv       string // namespace names
	SenderIf, EmuA, EmuB, RecvIf string // interface names
}

// Root reports whether the process can build namespaces.
func Root() bool { return ns.Root() }

func run(args ...string) error {
	_, err := ns.Run(args[0], args[1:]...)
	return err
}

// New builds a chain; on error everything already created is removed.
func New() (*Chain, error) {
	p, err := ns.Prefix()
	if err != nil {
		return nil, err
	}
	c := &Chain{Prefix: p, Sender: p + "s", Emulator: p + "e", Recv: p + "r",
		SenderIf: p + "sa", EmuA: p + "ea", EmuB: p + "eb", RecvIf: p + "rb"}
	if err := c.build(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Chain) build() error {
	steps := [][]string{
		{"ip", "netns", "add", c.Sender},
		{"ip", "netns", "add", c.Emulator},
		{"ip", "netns", "add", c.Recv},
		{"ip", "link", "add", c.SenderIf, "netns", c.Sender, "type", "veth", "peer", "name", c.EmuA, "netns", c.Emulator},
		{"ip", "link", "add", c.EmuB, "netns", c.Emulator, "type", "veth", "peer", "name", c.RecvIf, "netns", c.Recv},
	}
	// No IPv6 anywhere: link-local addresses, DAD and router solicitations
	// would add frames of their own (and the emulator ns must stay silent).
	for _, name := range []string{c.Sender, c.Emulator, c.Recv} {
		steps = append(steps,
			[]string{"ip", "netns", "exec", name, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"},
			[]string{"ip", "netns", "exec", name, "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"},
			[]string{"ip", "-n", name, "link", "set", "lo", "up"})
	}
	for _, x := range []struct{ ns, ifc string }{{c.Sender, c.SenderIf}, {c.Emulator, c.EmuA}, {c.Emulator, c.EmuB}, {c.Recv, c.RecvIf}} {
		steps = append(steps,
			[]string{"ip", "netns", "exec", x.ns, "sysctl", "-qw", "net.ipv6.conf." + x.ifc + ".disable_ipv6=1"},
			[]string{"ip", "netns", "exec", x.ns, "ethtool", "-K", x.ifc, "tso", "off", "gso", "off", "gro", "off", "tx", "off"},
			[]string{"ip", "-n", x.ns, "link", "set", x.ifc, "up"})
	}
	steps = append(steps,
		[]string{"ip", "-n", c.Sender, "addr", "add", SenderIP + "/24", "dev", c.SenderIf},
		[]string{"ip", "-n", c.Recv, "addr", "add", ReceiverIP + "/24", "dev", c.RecvIf})
	for _, s := range steps {
		if err := run(s...); err != nil {
			return err
		}
	}
	return nil
}

// Close deletes the namespaces (which deletes the veths) and reports the
// first failure.
func (c *Chain) Close() error {
	var first error
	for _, name := range []string{c.Sender, c.Emulator, c.Recv} {
		if err := ns.Delete(name); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Command returns a command that runs inside namespace name.
func Command(name string, cmd string, args ...string) *exec.Cmd {
	return ns.Command(name, cmd, args...)
}

// Do runs f inside namespace name; see ns.Do.
func Do(name string, f func() error) error { return ns.Do(name, f) }
