package relay

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// loopPair returns both ends of one loopback TCP connection.
func loopPair(t *testing.T) (dialed, accepted *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	a, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(); a.Close() })
	return d, a
}

type rig struct {
	client, server *net.TCPConn // the end hosts
	pair           *Pair
	done           chan string
}

// newRig builds client <-> [A relay B] <-> server on loopback.
func newRig(t *testing.T) *rig { return newRigPipe(t, 65536) }

// newRigPipe is newRig with pipes of size bytes.
func newRigPipe(t *testing.T, size int) *rig {
	t.Helper()
	client, a := loopPair(t)
	b, server := loopPair(t)
	pool := NewPipePool(size, 4)
	t.Cleanup(pool.Close)
	r := &rig{client: client, server: server, pair: NewPair(a, b, pool), done: make(chan string, 1)}
	go func() {
		reason, _ := r.pair.Run()
		r.done <- reason
	}()
	return r
}

// eventually waits up to 5 s for cond, checking every 5 ms: tests wait for
// the event, not for a guessed delay.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not within 5s", what)
		}
	}
}

func (r *rig) reason(t *testing.T) string {
	t.Helper()
	select {
	case s := <-r.done:
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("relay did not finish")
		return ""
	}
}

func randBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBulkBothWays(t *testing.T) {
	r := newRig(t)
	up := randBytes(t, 8<<20)
	down := randBytes(t, 3<<20)
	serverGot := make(chan [32]byte, 1)
	go func() {
		h := sha256.New()
		io.Copy(h, r.server)
		var sum [32]byte
		copy(sum[:], h.Sum(nil))
		serverGot <- sum
		r.server.Write(down)
		r.server.Close()
	}()
	go func() {
		r.client.Write(up)
		r.client.CloseWrite()
	}()
	got, err := io.ReadAll(r.client)
	if err != nil {
		t.Fatal(err)
	}
	if <-serverGot != sha256.Sum256(up) {
		t.Fatal("upload corrupted")
	}
	if !bytes.Equal(got, down) {
		t.Fatalf("download corrupted: %d bytes, want %d", len(got), len(down))
	}
	if reason := r.reason(t); reason != ReasonClosed {
		t.Fatalf("reason = %s", reason)
	}
	a2b, b2a := r.pair.Bytes()
	if a2b != int64(len(up)) || b2a != int64(len(down)) {
		t.Fatalf("counters %d/%d, want %d/%d", a2b, b2a, len(up), len(down))
	}
}

// TestBulkThenTail: with the default 1 MiB pipes, a bulk transfer and
// then a few bytes without FIN, answered each time: nothing waits for a
// full pipe.
func TestBulkThenTail(t *testing.T) {
	r := newRigPipe(t, 1<<20)
	bulk := randBytes(t, 8<<20)
	go r.client.Write(bulk)
	h := sha256.New()
	r.server.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.CopyN(h, r.server, int64(len(bulk))); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(h.Sum(nil), func() []byte { s := sha256.Sum256(bulk); return s[:] }()) {
		t.Fatal("bulk corrupted")
	}
	for i := 0; i < 3; i++ {
		start := time.Now()
		if _, err := r.client.Write([]byte("tail")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4)
		r.server.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(r.server, buf); err != nil || string(buf) != "tail" {
			t.Fatalf("tail %d: %q, %v", i, buf, err)
		}
		if _, err := r.server.Write([]byte("ok")); err != nil {
			t.Fatal(err)
		}
		r.client.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(r.client, buf[:2]); err != nil || string(buf[:2]) != "ok" {
			t.Fatalf("answer %d: %q, %v", i, buf[:2], err)
		}
		// Loose: a loaded host adds its own delay.
		if el := time.Since(start); el > time.Second {
			t.Errorf("exchange %d took %v", i, el)
		}
	}
	r.client.Close()
	r.server.Close()
	r.reason(t)
}

// TestHalfClose: the client's FIN reaches the server, which still answers
// afterwards; the answer and then the server's FIN reach the client.
func TestHalfClose(t *testing.T) {
	r := newRig(t)
	if _, err := r.client.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	if err := r.client.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	req, err := io.ReadAll(r.server)
	if err != nil || string(req) != "request" {
		t.Fatalf("server read %q, %v", req, err)
	}
	// The relay marks half-close right after forwarding the FIN, which
	// the server may see first.
	eventually(t, "pair marked half-closed", func() bool { _, ok := r.pair.HalfClosed(); return ok })
	if _, err := r.server.Write([]byte("reply after half-close")); err != nil {
		t.Fatal(err)
	}
	r.server.Close()
	resp, err := io.ReadAll(r.client)
	if err != nil || string(resp) != "reply after half-close" {
		t.Fatalf("client read %q, %v", resp, err)
	}
	if reason := r.reason(t); reason != ReasonClosed {
		t.Fatalf("reason = %s", reason)
	}
}

func abort(c *net.TCPConn) {
	c.SetLinger(0)
	c.Close()
}

// expectReset reads from c until an error and requires ECONNRESET.
func expectReset(t *testing.T, c *net.TCPConn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	_, err := io.Copy(io.Discard, c)
	// A clean EOF first is fine only if the reset follows: a write then
	// fails once the peer's RST has arrived.
	for end := time.Now().Add(3 * time.Second); err == nil && time.Now().Before(end); {
		if _, err = c.Write([]byte("x")); err == nil {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("want reset, got %v", err)
	}
}

func TestResetPropagation(t *testing.T) {
	tests := []struct {
		name   string
		run    func(t *testing.T, r *rig)
		reason string
	}{
		{"server resets", func(t *testing.T, r *rig) {
			r.client.Write([]byte("hello"))
			buf := make([]byte, 5)
			io.ReadFull(r.server, buf)
			abort(r.server)
			expectReset(t, r.client)
		}, ReasonResetB},
		{"client resets", func(t *testing.T, r *rig) {
			r.server.Write([]byte("hello"))
			buf := make([]byte, 5)
			io.ReadFull(r.client, buf)
			abort(r.client)
			expectReset(t, r.server)
		}, ReasonResetA},
		{"client resets after its FIN", func(t *testing.T, r *rig) {
			r.client.CloseWrite()
			io.ReadAll(r.server)
			eventually(t, "pair marked half-closed", func() bool { _, ok := r.pair.HalfClosed(); return ok })
			abort(r.client)
			expectReset(t, r.server)
		}, ReasonResetA},
		{"server resets while client still sending", func(t *testing.T, r *rig) {
			go func() {
				chunk := make([]byte, 1<<16)
				for {
					if _, err := r.client.Write(chunk); err != nil {
						return
					}
				}
			}()
			eventually(t, "data relayed", func() bool { aToB, _ := r.pair.Bytes(); return aToB > 0 })
			abort(r.server)
			expectReset(t, r.client)
		}, ReasonResetB},
	}
	tests = append(tests, struct {
		name   string
		run    func(t *testing.T, r *rig)
		reason string
	}{"client resets while the server stalls", func(t *testing.T, r *rig) {
		// The relay is blocked writing to a full server socket and not
		// reading the client: the reset must still be noticed promptly.
		for _, c := range []*net.TCPConn{r.client, r.server, r.pair.A, r.pair.B} {
			c.SetReadBuffer(64 << 10)
			c.SetWriteBuffer(64 << 10)
		}
		chunk := make([]byte, 64<<10)
		for {
			r.client.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
			if _, err := r.client.Write(chunk); err != nil {
				break
			}
		}
		start := time.Now()
		abort(r.client)
		select {
		case reason := <-r.done:
			r.done <- reason
		case <-time.After(2 * time.Second):
			t.Fatal("reset not noticed within 2s while the destination was full")
		}
		t.Logf("noticed after %v", time.Since(start))
		expectReset(t, r.server)
	}, ReasonResetA})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t)
			tt.run(t, r)
			if reason := r.reason(t); reason != tt.reason {
				t.Fatalf("reason = %s, want %s", reason, tt.reason)
			}
		})
	}
}

// TestBackpressure: with a server that does not read, the client can push
// only about the sum of the socket buffers and one pipe before its writes
// block; nothing accumulates in the relay. Then everything arrives intact.
func TestBackpressure(t *testing.T) {
	r := newRig(t)
	const buf = 64 << 10
	for _, c := range []*net.TCPConn{r.client, r.server, r.pair.A, r.pair.B} {
		c.SetReadBuffer(buf)
		c.SetWriteBuffer(buf)
	}
	payload := randBytes(t, 32<<20)
	written := 0
	for written < len(payload) {
		r.client.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
		n, err := r.client.Write(payload[written:min(written+buf, len(payload))])
		written += n
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// Four sockets with (doubled) 64 KB buffers and one 64 KB pipe; allow
	// generous slack for loopback skb accounting.
	const bound = 4 << 20
	if written >= bound {
		t.Fatalf("client wrote %d bytes with a stalled server; want < %d", written, bound)
	}
	// The relay must come to rest once every buffer on the way is full. A
	// VM's stolen CPU can leave it still draining when the client's deadline
	// passes, so it is given seconds to settle, judged on 200 ms of calm.
	moved, _ := r.pair.Bytes()
	for end := time.Now().Add(10 * time.Second); ; {
		time.Sleep(200 * time.Millisecond)
		again, _ := r.pair.Bytes()
		if again == moved {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("relay kept moving data into a full socket: %d -> %d", moved, again)
		}
		moved = again
	}
	t.Logf("stalled after %d bytes written, %d relayed", written, moved)

	r.client.SetWriteDeadline(time.Time{})
	go func() {
		r.client.Write(payload[written:])
		r.client.CloseWrite()
	}()
	h := sha256.New()
	if _, err := io.Copy(h, r.server); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(h.Sum(nil), func() []byte { s := sha256.Sum256(payload); return s[:] }()) {
		t.Fatal("payload corrupted after backpressure")
	}
	r.server.Close()
	if reason := r.reason(t); reason != ReasonClosed {
		t.Fatalf("reason = %s", reason)
	}
}

func TestAbortResetsBoth(t *testing.T) {
	r := newRig(t)
	r.pair.Abort("idle_timeout", nil)
	expectReset(t, r.client)
	expectReset(t, r.server)
	if reason := r.reason(t); reason != "idle_timeout" {
		t.Fatalf("reason = %s", reason)
	}
}

// TestIdlePairHoldsNoPipe: pipes go back to the pool when a direction
// waits for data, so idle connections cost no descriptors.
func TestIdlePairHoldsNoPipe(t *testing.T) {
	r := newRig(t)
	for i := 0; i < 3; i++ {
		r.client.Write([]byte("ping"))
		buf := make([]byte, 4)
		io.ReadFull(r.server, buf)
		r.server.Write(buf)
		io.ReadFull(r.client, buf)
	}
	eventually(t, "idle pair returns its pipes", func() bool { return r.pair.pool.InUse() == 0 })
	r.client.Close()
	r.server.Close()
	r.reason(t)
	if n := r.pair.pool.InUse(); n != 0 {
		t.Fatalf("%d pipes held after the pair ended", n)
	}
}
