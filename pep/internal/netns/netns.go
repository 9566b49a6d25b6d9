// Package netns builds throw-away namespace chains for pepd's integration
// tests and benchmark:
//
//	clientA (10.99.99.2) - pepA [br0: lan, wan] - [pepB [br0: wan, lan]] - clientB (10.99.99.254)
//
// Every name carries a random prefix so parallel runs do not collide, and
// Close removes everything.
package netns

import (
	"fmt"
	"strings"

	"satbed/internal/ns"
)

// Addresses of the end hosts.
const (
	AddrA = "10.99.99.2"
	AddrB = "10.99.99.254"
)

// Chain is a built namespace chain.
type Chain struct {
	Prefix  string
	ClientA string
	ClientB string
	PEPs    []string // one or two PEP namespaces, A side first
	created []string
	ports   [][2]string // every veth end: namespace, device
}

// Bridge and port names inside each PEP namespace.
const (
	Bridge = "br0"
	LAN    = "lan"
	WAN    = "wan"
)

// Run executes a command in the root namespace; see ns.Run.
func Run(name string, args ...string) (string, error) { return ns.Run(name, args...) }

// Exec runs a command inside namespace name; see ns.Exec.
func Exec(name string, args ...string) (string, error) { return ns.Exec(name, args...) }

// New builds a chain with one or two PEP bridges.
func New(peps int) (c *Chain, err error) {
	if peps < 1 || peps > 2 {
		return nil, fmt.Errorf("peps must be 1 or 2, got %d", peps)
	}
	p, err := ns.Prefix()
	if err != nil {
		return nil, err
	}
	c = &Chain{Prefix: p, ClientA: p + "ca", ClientB: p + "cb"}
	for i := 0; i < peps; i++ {
		c.PEPs = append(c.PEPs, fmt.Sprintf("%sp%c", p, 'a'+i))
	}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	all := append([]string{c.ClientA, c.ClientB}, c.PEPs...)
	for _, ns := range all {
		if _, err := Run("ip", "netns", "add", ns); err != nil {
			return c, err
		}
		c.created = append(c.created, ns)
	}
	// `ip -n` avoids the cost of `ip netns exec` (a mount namespace per
	// call); commands that need exec are batched into one shell per
	// namespace.
	script := map[string][]string{}
	for _, pep := range c.PEPs {
		// A PEP has no address at all: no IPv6 link-local either.
		script[pep] = append(script[pep], "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1")
		if _, err := Run("ip", "-n", pep, "link", "add", Bridge, "type", "bridge"); err != nil {
			return c, err
		}
	}
	// Links: A.eth0-pepA.lan, pepA.wan-(pepB.wan | B.eth0), pepB.lan-B.eth0.
	type end struct{ ns, dev string }
	links := [][2]end{{{c.ClientA, "eth0"}, {c.PEPs[0], LAN}}}
	if peps == 1 {
		links = append(links, [2]end{{c.PEPs[0], WAN}, {c.ClientB, "eth0"}})
	} else {
		links = append(links, [2]end{{c.PEPs[0], WAN}, {c.PEPs[1], WAN}}, [2]end{{c.PEPs[1], LAN}, {c.ClientB, "eth0"}})
	}
	isPEP := map[string]bool{}
	for _, pep := range c.PEPs {
		isPEP[pep] = true
	}
	for _, l := range links {
		if _, err := Run("ip", "link", "add", "name", l[0].dev, "netns", l[0].ns, "type", "veth",
			"peer", "name", l[1].dev, "netns", l[1].ns); err != nil {
			return c, err
		}
		for _, e := range l {
			c.ports = append(c.ports, [2]string{e.ns, e.dev})
			// Offloads off: otherwise the stack and raw captures see
			// 64 KB super-frames or frames with partial checksums.
			script[e.ns] = append(script[e.ns], "ethtool -K "+e.dev+" tso off gso off gro off tx off")
			if isPEP[e.ns] {
				if _, err := Run("ip", "-n", e.ns, "link", "set", e.dev, "master", Bridge); err != nil {
					return c, err
				}
			}
		}
	}
	for _, ns := range all {
		if _, err := Exec(ns, "sh", "-ec", strings.Join(script[ns], "\n")); err != nil {
			return c, err
		}
	}
	for _, pep := range c.PEPs {
		for _, dev := range []string{"lo", LAN, WAN, Bridge} {
			if _, err := Run("ip", "-n", pep, "link", "set", dev, "up"); err != nil {
				return c, err
			}
		}
	}
	for ns, addr := range map[string]string{c.ClientA: AddrA, c.ClientB: AddrB} {
		if _, err := Run("ip", "-n", ns, "addr", "add", addr+"/24", "dev", "eth0"); err != nil {
			return c, err
		}
		for _, dev := range []string{"lo", "eth0"} {
			if _, err := Run("ip", "-n", ns, "link", "set", dev, "up"); err != nil {
				return c, err
			}
		}
	}
	return c, nil
}

// SetOffloads turns segmentation, receive and checksum offloads on or off
// on every port of the chain (New leaves them off, as the testbed does
// for capture fidelity; real PEP hardware runs with them on).
func (c *Chain) SetOffloads(on bool) error {
	v := "off"
	if on {
		v = "on"
	}
	for _, p := range c.ports {
		if _, err := Exec(p[0], "ethtool", "-K", p[1], "sg", v, "tx", v, "tso", v, "gso", v, "gro", v); err != nil {
			return fmt.Errorf("offloads %s on %s/%s: %w", v, p[0], p[1], err)
		}
	}
	return nil
}

// Close deletes the namespaces (and with them the veths and bridges).
func (c *Chain) Close() {
	for _, ns := range c.created {
		Run("ip", "netns", "del", ns)
	}
	c.created = nil
}

// Do runs f inside namespace name, so sockets f creates live there; see ns.Do.
func Do(name string, f func() error) error { return ns.Do(name, f) }
