package itest

import (
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"satbed/pep/internal/netns"
)

// lateTCP builds a 20-byte TCP segment (no options, checksum filled in
// over the IPv4 pseudo-header) for a raw IPPROTO_TCP socket, whose kernel
// adds the IP header but not the TCP checksum.
func lateTCP(src, dst net.IP, sport, dport int, seq, ack uint32, flags byte, payload []byte) []byte {
	seg := make([]byte, 20+len(payload))
	binary.BigEndian.PutUint16(seg[0:], uint16(sport))
	binary.BigEndian.PutUint16(seg[2:], uint16(dport))
	binary.BigEndian.PutUint32(seg[4:], seq)
	binary.BigEndian.PutUint32(seg[8:], ack)
	seg[12] = 5 << 4
	seg[13] = flags
	binary.BigEndian.PutUint16(seg[14:], 65535)
	copy(seg[20:], payload)
	pseudo := append(append(append([]byte{}, src.To4()...), dst.To4()...), 0, syscall.IPPROTO_TCP, byte(len(seg)>>8), byte(len(seg)))
	var sum uint32
	for _, b := range [][]byte{pseudo, seg} {
		for i := 0; i < len(b); i += 2 {
			w := uint32(b[i]) << 8
			if i+1 < len(b) {
				w |= uint32(b[i+1])
			}
			sum += w
		}
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(seg[16:], ^uint16(sum))
	return seg
}

// countTuple installs a counter in ns for TCP packets sport -> dport and
// returns a function reading it.
func countTuple(t *testing.T, ns string, sport, dport int) func() int {
	t.Helper()
	for _, cmd := range [][]string{
		{"nft", "add", "table", "ip", "lateprobe"},
		{"nft", "add", "chain", "ip", "lateprobe", "pre", "{ type filter hook prerouting priority -400; }"},
		{"nft", "add", "rule", "ip", "lateprobe", "pre", "tcp", "sport", fmt.Sprint(sport), "tcp", "dport", fmt.Sprint(dport), "counter"},
	} {
		if out, err := netns.Exec(ns, cmd...); err != nil {
			t.Fatalf("%v: %v: %s", cmd, err, out)
		}
	}
	return func() int {
		out, err := netns.Exec(ns, "nft", "list", "table", "ip", "lateprobe")
		if err != nil {
			t.Fatal(err)
		}
		return nftPackets(out, fmt.Sprintf("tcp dport %d", dport))
	}
}

// injectLate sends, from client B's namespace, what a WAN peer still emits
// after the PEP tore a split flow down: in-flight data, a retransmitted FIN
// and a RST, with sequence numbers of its own (the WAN leg's), not the
// LAN leg's.
func injectLate(t *testing.T, b *bed, sport, dport int) {
	t.Helper()
	src, dst := net.ParseIP(netns.AddrB).To4(), net.ParseIP(netns.AddrA).To4()
	const seq, ack = 0x80000000, 0x12345678
	segs := [][]byte{
		lateTCP(src, dst, sport, dport, seq, ack, 0x18, []byte("late data")), // PSH|ACK
		lateTCP(src, dst, sport, dport, seq+9, ack, 0x11, nil),               // FIN|ACK
		lateTCP(src, dst, sport, dport, seq+10, 0, 0x04, nil),                // RST
	}
	err := netns.Do(b.chain.ClientB, func() error {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_TCP)
		if err != nil {
			return err
		}
		defer syscall.Close(fd)
		to := &syscall.SockaddrInet4{}
		copy(to.Addr[:], dst)
		for _, s := range segs {
			if err := syscall.Sendto(fd, s, 0, to); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestLateWANPacketsDropped: once pepd has reset a split pair (no
// TIME_WAIT socket left), packets the WAN peer still sends for that flow
// match no proxy socket. Routed on, they reached the LAN host with the WAN
// leg's sequence numbers (tcptrace saw a 4.26 GB "stream"); the PEP must
// drop them, and a new connection on the same 4-tuple must still be split.
func TestLateWANPacketsDropped(t *testing.T) {
	needsBed(t)
	const port, cport = 5010, 47011
	b := newBed(t, testOpts, "pepd")
	ln := b.listen(t, port)
	go echoServer(ln)
	dialFrom := func() *net.TCPConn {
		var c *net.TCPConn
		err := netns.Do(b.chain.ClientA, func() error {
			d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(netns.AddrA), Port: cport}}
			conn, err := d.Dial("tcp4", net.JoinHostPort(netns.AddrB, fmt.Sprint(port)))
			if err != nil {
				return err
			}
			c = conn.(*net.TCPConn)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	seen := countTuple(t, b.chain.ClientA, port, cport)

	c := dialFrom()
	ping(t, c, "first")
	abort(c) // client reset: pepd aborts both legs, no TIME_WAIT anywhere
	waitStats(t, b.nodes[0], "the reset propagated", func(s snapshot) bool {
		return s.ResetsPropagated == 1 && s.ConnectionsActive == 0
	})
	before := seen()
	injectLate(t, b, port, cport)
	time.Sleep(500 * time.Millisecond)
	if n := seen() - before; n != 0 {
		t.Fatalf("%d late WAN packets of the torn-down flow reached the LAN host", n)
	}
	rules, err := netns.Exec(b.nodes[0].NS, "nft", "list", "table", "ip", "satbed_pep")
	if err != nil {
		t.Fatal(err)
	}
	if n := nftPackets(rules, "dport @split"); n != 3 {
		t.Fatalf("the @split drop rule counted %d packets, want the 3 injected:\n%s", n, rules)
	}

	c = dialFrom() // same 4-tuple: must be diverted and split again
	ping(t, c, "second")
	waitStats(t, b.nodes[0], "the reused tuple split again", func(s snapshot) bool { return s.ConnectionsSplit == 2 })
	abort(c)
	waitStats(t, b.nodes[0], "the second reset propagated", func(s snapshot) bool {
		return s.ResetsPropagated == 2 && s.ConnectionsActive == 0
	})

	// pepd gone, rules left (a crash): a SYN finds no listener and its
	// flow crosses unsplit, as across a bridge, although its tuple was
	// split a moment ago.
	pid := pidOf(b.nodes[0])
	b.nodes[0].Kill()
	// The listener outlives the pid by a moment (a SYN it still takes is
	// then reset): wait until the namespace has no TCP socket left.
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out, err := netns.Exec(b.nodes[0].NS, "ss", "-Htan")
		if err != nil {
			t.Fatal(err)
		}
		if !running(pid) && strings.TrimSpace(out) == "" {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("pepd (pid %s) or its sockets survived SIGKILL:\n%s", pid, out)
		}
	}
	c = dialFrom()
	ping(t, c, "unsplit")
	c.Close()
}
