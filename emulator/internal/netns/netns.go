//go:build linux

// Package netns builds the three-namespace chain used by satemu's
// integration tests and benchmark:
//
//	sender ns (10.99.99.2/24) <-veth-> emulator ns (no IP) <-veth-> receiver ns (10.99.99.254/24)
//
// and runs code or commands inside those namespaces.
package netns

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
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
func Root() bool { return os.Geteuid() == 0 }

func run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// New builds a chain; on error everything already created is removed.
func New() (*Chain, error) {
	var rb [2]byte
	if _, err := rand.Read(rb[:]); err != nil {
		return nil, err
	}
	p := "t" + hex.EncodeToString(rb[:])
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
	for _, ns := range []string{c.Sender, c.Emulator, c.Recv} {
		steps = append(steps,
			[]string{"ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"},
			[]string{"ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"},
			[]string{"ip", "-n", ns, "link", "set", "lo", "up"})
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
	for _, ns := range []string{c.Sender, c.Emulator, c.Recv} {
		if _, err := os.Stat("/run/netns/" + ns); err != nil {
			continue
		}
		if err := run("ip", "netns", "del", ns); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Command returns a command that runs inside namespace ns.
func Command(ns string, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

// Do runs f on an OS thread switched into namespace ns. Sockets f creates
// stay in ns after it returns, so they can be used from any goroutine.
func Do(ns string, f func() error) error {
	fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("netns %s: %w", ns, err)
	}
	defer unix.Close(fd)
	errc := make(chan error, 1)
	// A fresh goroutine whose thread is discarded afterwards (it exits
	// locked), so no other goroutine ever runs in the wrong namespace.
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		errc <- f()
	}()
	err = <-errc
	if err != nil {
		return fmt.Errorf("in netns %s: %w", ns, err)
	}
	return nil
}
