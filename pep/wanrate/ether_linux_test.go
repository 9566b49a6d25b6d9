//go:build linux

package wanrate

import (
	"crypto/sha256"
	"io"
	"log"
	"net"
	"testing"
	"time"

	"satbed/emulator/rawsock"
	"satbed/internal/ns"
)

// etherPair makes a namespace with a veth pair, each end a bridge port (as
// a PEP's WAN port is), and opens an EtherLink on each end.
func etherPair(t *testing.T) (*EtherLink, *EtherLink, string, string, string) {
	t.Helper()
	if !ns.Root() {
		t.Skip("needs root (namespaces, raw sockets); skipping")
	}
	p, err := ns.Prefix()
	if err != nil {
		t.Fatal(err)
	}
	n, x, y := p+"w", p+"x", p+"y"
	run := func(args ...string) {
		t.Helper()
		if out, err := ns.Run(args[0], args[1:]...); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	run("ip", "netns", "add", n)
	t.Cleanup(func() { ns.Delete(n) })
	run("ip", "-n", n, "link", "add", x, "type", "veth", "peer", "name", y)
	for i, dev := range []string{x, y} {
		br := []string{p + "a", p + "b"}[i]
		run("ip", "-n", n, "link", "add", br, "type", "bridge")
		run("ip", "-n", n, "link", "set", dev, "master", br)
		run("ip", "-n", n, "link", "set", dev, "up")
		run("ip", "-n", n, "link", "set", br, "up")
	}
	var a, b *EtherLink
	if err := ns.Do(n, func() error {
		var err error
		if a, err = OpenEther(x); err != nil {
			return err
		}
		b, err = OpenEther(y)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return a, b, n, x, y
}

// TestEtherLink: tunnel frames cross a veth between two bridge ports, and
// the kernel filter keeps every other EtherType away from the tunnel.
func TestEtherLink(t *testing.T) {
	a, b, n, x, _ := etherPair(t)
	defer a.Close()
	defer b.Close()
	// A foreign frame (IPv4 EtherType) first: b must not return it.
	var raw *rawsock.Socket
	if err := ns.Do(n, func() error {
		var err error
		raw, err = rawsock.Open(x, rawsock.Options{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	foreign := make([]byte, 60)
	copy(foreign, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 9, 0x08, 0x00})
	if err := raw.Write(foreign); err != nil {
		t.Fatal(err)
	}
	f := &Frame{Type: TData, Stream: 3, Offset: 77, Payload: []byte("over the wire")}
	enc, _ := Append(nil, f)
	if err := a.Send(enc, Broadcast); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	nr, from, err := b.Recv(buf)
	if err != nil {
		t.Fatal(err)
	}
	if from != a.src {
		t.Errorf("from %x, want %x", from, a.src)
	}
	var g Frame
	if err := Decode(buf[:nr], &g); err != nil || string(g.Payload) != "over the wire" || g.Offset != 77 {
		t.Fatalf("got %+v, %v", g, err)
	}
}

// TestEtherTunnel: a whole transfer through two tunnels on bridge ports.
func TestEtherTunnel(t *testing.T) {
	a, b, _, _, _ := etherPair(t)
	lg := log.New(io.Discard, "", 0)
	cfg := Config{RateBPS: 50_000_000, RTT: time.Millisecond, Accept: dialAccept, Log: lg}
	pr := &pair{a: New(a, cfg), b: New(b, cfg)}
	defer pr.a.Close()
	defer pr.b.Close()
	if !pr.a.WaitPeer(5 * time.Second) {
		t.Fatal("peers did not meet over Ethernet")
	}
	data := randBytes(4<<20, 9)
	got := make(chan [32]byte, 1)
	dst := server(t, func(c *net.TCPConn) {
		h := sha256.New()
		io.Copy(h, c)
		c.Close()
		got <- [32]byte(h.Sum(nil))
	})
	client, result := pr.split(t, dst)
	client.Write(data)
	client.CloseWrite()
	io.Copy(io.Discard, client)
	if <-got != sha256.Sum256(data) {
		t.Fatal("SHA-256 differs")
	}
	if r := <-result; r != "closed" {
		t.Fatalf("relay ended %q", r)
	}
}
