//go:build linux

package rawsock

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"satbed/emulator/internal/netns"
)

// vethPair creates a namespace holding an up veth pair and returns the
// namespace and interface names.
func vethPair(t *testing.T) (ns, x, y string) {
	t.Helper()
	if !netns.Root() {
		t.Skip("raw socket test needs root (CAP_NET_RAW, CAP_NET_ADMIN); skipping")
	}
	var rb [2]byte
	if _, err := rand.Read(rb[:]); err != nil {
		t.Fatal(err)
	}
	p := "t" + hex.EncodeToString(rb[:])
	ns, x, y = p+"k", p+"x", p+"y"
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", args, err, out)
		}
	}
	run("ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	run("ip", "-n", ns, "link", "add", x, "type", "veth", "peer", "name", y)
	for _, i := range []string{x, y} {
		run("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf."+i+".disable_ipv6=1")
		run("ip", "-n", ns, "link", "set", i, "up")
	}
	return ns, x, y
}

func openIn(t *testing.T, ns, name string, ring bool) *Socket {
	t.Helper()
	var s *Socket
	err := netns.Do(ns, func() error {
		var err error
		s, err = Open(name, Options{QdiscBypass: true, Ring: ring})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Ring() != ring {
		t.Fatalf("Ring() = %v, want %v", s.Ring(), ring)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func testFrame(i byte, size int) []byte {
	f := make([]byte, size)
	copy(f, []byte{0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x88, 0xb5}) // local MACs, experimental EtherType
	for j := 14; j < size; j++ {
		f[j] = i
	}
	return f
}

// Both receive paths (recvmmsg, TPACKET_V3 ring) must behave alike.
var paths = []struct {
	name string
	ring bool
}{{"socket", false}, {"tpacket", true}}

func TestSocketBridgesAndIgnoresOutgoing(t *testing.T) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) { testBridgesAndIgnoresOutgoing(t, p.ring) })
	}
}

func testBridgesAndIgnoresOutgoing(t *testing.T, ring bool) {
	ns, x, y := vethPair(t)
	sx, sy := openIn(t, ns, x, ring), openIn(t, ns, y, ring)
	if sx.MTU != 1500 {
		t.Errorf("MTU %d", sx.MTU)
	}
	want := testFrame(7, 100)
	if err := sx.Write(want); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	if err := sy.SetReadDeadline(time.Now().Add(2 * time.Second)); err != nil {
		t.Fatal(err)
	}
	n, age, err := sy.Read(buf)
	if err != nil || !bytes.Equal(buf[:n], want) {
		t.Fatalf("read %d bytes %v: %x", n, err, buf[:n])
	}
	if age < 0 || age > time.Second {
		t.Errorf("age %v", age)
	}
	// The sender's own socket must not see the frame it sent.
	_ = sx.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, _, err := sx.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("sender saw its own frame (%d bytes, %v)", n, err)
	}
}

// TestReadFailsWhenTheInterfaceGoes: both paths report the interface's
// removal as a read error (satemu then exits and is restarted on the new
// port); a ring that only stayed empty left a swapped PEP's chain dead.
func TestReadFailsWhenTheInterfaceGoes(t *testing.T) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			ns, x, _ := vethPair(t)
			sx := openIn(t, ns, x, p.ring)
			done := make(chan error, 1)
			go func() {
				buf := make([]byte, 2048)
				for {
					if _, _, err := sx.Read(buf); err != nil {
						done <- err
						return
					}
				}
			}()
			if out, err := exec.Command("ip", "-n", ns, "link", "del", x).CombinedOutput(); err != nil {
				t.Fatalf("ip link del: %v: %s", err, out)
			}
			select {
			case err := <-done:
				if !errors.Is(err, unix.ENETDOWN) {
					t.Fatalf("read error %v, want ENETDOWN", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("read still waiting 10 s after the interface was deleted")
			}
		})
	}
}

func TestSocketBatches(t *testing.T) {
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) { testBatches(t, p.ring) })
	}
}

func testBatches(t *testing.T, ring bool) {
	ns, x, y := vethPair(t)
	sx, sy := openIn(t, ns, x, ring), openIn(t, ns, y, ring)
	var frames [][]byte
	for i := 0; i < 100; i++ {
		frames = append(frames, testFrame(byte(i), 60+i*10))
	}
	if n, err := sx.WriteBatch(frames); n != len(frames) || err != nil {
		t.Fatalf("WriteBatch sent %d: %v", n, err)
	}
	bufs := make([][]byte, 32)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	sizes := make([]int, 32)
	ages := make([]time.Duration, 32)
	_ = sy.SetReadDeadline(time.Now().Add(2 * time.Second))
	got := 0
	for got < len(frames) {
		n, err := sy.ReadBatch(bufs, sizes, ages)
		if err != nil {
			t.Fatalf("after %d frames: %v", got, err)
		}
		for i := 0; i < n; i++ {
			if !bytes.Equal(bufs[i][:sizes[i]], frames[got]) {
				t.Fatalf("frame %d differs", got)
			}
			got++
		}
	}
	// A frame larger than the buffers is dropped and counted.
	if err := sx.Write(testFrame(1, 1500)); err != nil {
		t.Fatal(err)
	}
	small := [][]byte{make([]byte, 100)}
	_ = sy.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := sy.ReadBatch(small, sizes, ages); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("oversized frame delivered: %d %v", n, err)
	}
	if sy.Truncated() != 1 {
		t.Errorf("truncated = %d, want 1", sy.Truncated())
	}
}
