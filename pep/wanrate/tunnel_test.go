package wanrate

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// memLink is one end of an in-process link: frames take delay to arrive,
// a fraction is lost, another fraction has a bit flipped (the CRC must
// catch it), and cut drops everything (a vanished peer).
type memLink struct {
	in, out chan memFrame
	addr    HWAddr
	p       *linkParams
	done    chan struct{}
	once    sync.Once
}

type memFrame struct {
	b    []byte
	at   time.Time
	from HWAddr
}

type linkParams struct {
	mu               sync.Mutex
	rng              *rand.Rand
	loss, corrupt    float64
	delay            time.Duration
	cut              atomic.Bool
	sent, lost, bent atomic.Int64
}

func memPair(p *linkParams) (*memLink, *memLink) {
	a2b, b2a := make(chan memFrame, 1<<16), make(chan memFrame, 1<<16)
	a := &memLink{in: b2a, out: a2b, addr: HWAddr{2, 0, 0, 0, 0, 1}, p: p, done: make(chan struct{})}
	b := &memLink{in: a2b, out: b2a, addr: HWAddr{2, 0, 0, 0, 0, 2}, p: p, done: make(chan struct{})}
	return a, b
}

func (l *memLink) Send(frame []byte, to HWAddr) error {
	p := l.p
	p.sent.Add(1)
	if p.cut.Load() {
		return nil
	}
	b := append([]byte(nil), frame...)
	p.mu.Lock()
	lose, bend := p.rng.Float64() < p.loss, p.rng.Float64() < p.corrupt
	bit := p.rng.IntN(len(b) * 8)
	p.mu.Unlock()
	if lose {
		p.lost.Add(1)
		return nil
	}
	if bend {
		p.bent.Add(1)
		b[bit/8] ^= 1 << (bit % 8)
	}
	select {
	case l.out <- memFrame{b, time.Now().Add(p.delay), l.addr}:
	case <-l.done:
	}
	return nil
}

func (l *memLink) Recv(buf []byte) (int, HWAddr, error) {
	select {
	case f := <-l.in:
		if d := time.Until(f.at); d > 0 {
			select {
			case <-time.After(d):
			case <-l.done:
				return 0, HWAddr{}, net.ErrClosed
			}
		}
		return copy(buf, f.b), f.from, nil
	case <-l.done:
		return 0, HWAddr{}, net.ErrClosed
	}
}

func (l *memLink) Overhead() int { return 14 }
func (l *memLink) MTU() int      { return 1500 }
func (l *memLink) Close() error  { l.once.Do(func() { close(l.done) }); return nil }

// dialAccept is the far end's Accept in tests: dial the stream's
// destination, or refuse it as pepd does when the server is not there.
func dialAccept(s *Stream) {
	c, err := net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(s.Dst))
	if err != nil {
		s.Refuse()
		return
	}
	s.Relay(c)
}

// pair is two tunnels joined by a memLink; B's streams dial the address
// the test's server listens on.
type pair struct {
	a, b   *Tunnel
	params *linkParams
}

func newPair(t *testing.T, loss, corrupt float64, delay time.Duration, rate int64, window int, adapt bool) *pair {
	return newPairFrame(t, loss, corrupt, delay, rate, window, adapt, 0)
}

func newPairFrame(t *testing.T, loss, corrupt float64, delay time.Duration, rate int64, window int, adapt bool, frame int) *pair {
	p := &linkParams{rng: rand.New(rand.NewPCG(1, 2)), loss: loss, corrupt: corrupt, delay: delay}
	la, lb := memPair(p)
	lg := log.New(io.Discard, "", 0)
	if testing.Verbose() {
		lg = log.New(log.Writer(), "wanrate: ", log.Lmicroseconds)
	}
	cfg := Config{RateBPS: rate, RTT: 2 * delay, Window: window, Adapt: adapt, Accept: dialAccept, Log: lg, FrameBytes: frame}
	pr := &pair{a: New(la, cfg), b: New(lb, cfg), params: p}
	t.Cleanup(func() { pr.a.Close(); pr.b.Close() })
	if !pr.a.WaitPeer(5*time.Second) || !pr.b.WaitPeer(5*time.Second) {
		t.Fatal("peers did not meet")
	}
	return pr
}

// split accepts one client connection on a local listener and relays it
// through the tunnel to dst, as pepd does with an intercepted SYN.
// both starts a connection through the pair that sends up from the
// client and down from the server at once, each side closing its
// sending half after its data. gotUp yields what the server read; the
// caller reads the client's side (closed when the test ends).
func (pr *pair) both(t *testing.T, up, down []byte) (client *net.TCPConn, gotUp chan []byte, result chan string) {
	t.Helper()
	gotUp = make(chan []byte, 1)
	dst := server(t, func(c *net.TCPConn) {
		defer c.Close()
		go func() {
			c.Write(down)
			c.CloseWrite()
		}()
		b, _ := io.ReadAll(c)
		gotUp <- b
	})
	client, result = pr.split(t, dst)
	t.Cleanup(func() { client.Close() })
	go func() {
		client.Write(up)
		client.CloseWrite()
	}()
	return client, gotUp, result
}

func (pr *pair) split(t testing.TB, dst netip.AddrPort) (client *net.TCPConn, result chan string) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	s, err := pr.a.Open(client.LocalAddr().(*net.TCPAddr).AddrPort(), dst)
	if err != nil {
		t.Fatal(err)
	}
	result = make(chan string, 1)
	go func() {
		reason, _, _ := s.Relay(c)
		result <- reason
	}()
	return client, result
}

func server(t testing.TB, handle func(*net.TCPConn)) netip.AddrPort {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestTransfer moves data both ways through a lossy link and checks every
// byte arrives once, in order, with both FINs carried.
func TestTransfer(t *testing.T) {
	for _, tc := range []struct {
		name          string
		loss, corrupt float64
		delay         time.Duration
		up, down      int
		window        int
		frame         int
	}{
		{"clean", 0, 0, 10 * time.Millisecond, 2 << 20, 1 << 20, 0, 0},
		{"loss 11%", 0.11, 0, 20 * time.Millisecond, 2 << 20, 512 << 10, 0, 0},
		{"loss 30% + corruption", 0.3, 0.05, 5 * time.Millisecond, 1 << 20, 1 << 20, 0, 0},
		{"small window", 0.05, 0, 10 * time.Millisecond, 1 << 20, 256 << 10, 64 << 10, 0},
		{"empty both ways", 0.2, 0, 5 * time.Millisecond, 0, 0, 0, 0},
		{"small frames", 0.06, 0, 10 * time.Millisecond, 1 << 20, 1 << 20, 0, 768},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr := newPairFrame(t, tc.loss, tc.corrupt, tc.delay, 100_000_000, tc.window, false, tc.frame)
			up, down := randBytes(tc.up, 1), randBytes(tc.down, 2)
			client, gotUp, result := pr.both(t, up, down)
			client.SetReadDeadline(time.Now().Add(60 * time.Second))
			gotDown, err := io.ReadAll(client)
			if err != nil {
				t.Fatalf("client read: %v", err)
			}
			if sha256.Sum256(gotDown) != sha256.Sum256(down) {
				t.Fatalf("download: %d bytes, want %d, contents differ", len(gotDown), len(down))
			}
			select {
			case b := <-gotUp:
				if !bytes.Equal(b, up) {
					t.Fatalf("upload: %d bytes, want %d, contents differ", len(b), len(up))
				}
			case <-time.After(60 * time.Second):
				t.Fatal("server never saw the upload end")
			}
			select {
			case r := <-result:
				if r != "closed" {
					t.Fatalf("relay ended %q, want closed", r)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("relay did not finish")
			}
			st := pr.a.Snapshot()
			t.Logf("A sent %d data bytes, resent %d, copies %d, spares %d, RTO marks %d", st.DataSent, st.DataRetransmit, st.DataCopies, st.DataSpare, st.RTOMarks)
			if tc.corrupt > 0 && pr.b.Snapshot().FramesBad+st.FramesBad == 0 {
				t.Error("corrupted frames were not counted as bad")
			}
			// A repair lost again is sent with a copy, unless a spare copy
			// sent into idle link time already carried it: which of the two
			// happens depends on scheduling, so either counts.
			if tc.loss >= 0.1 && tc.up > 0 && st.DataCopies+st.DataSpare == 0 {
				t.Error("neither copies of repairs nor spare copies were sent at 10 % loss or more")
			}
			waitEmpty(t, pr.a)
			waitEmpty(t, pr.b)
		})
	}
}

func waitEmpty(t *testing.T, tn *Tunnel) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if tn.Snapshot().StreamsActive == 0 {
			return
		}
	}
	t.Fatalf("streams left: %d", tn.Snapshot().StreamsActive)
}

// TestPacing: the sender holds the configured rate on a clean link.
func TestPacing(t *testing.T) {
	const rate = 8_000_000
	pr := newPair(t, 0, 0, 5*time.Millisecond, rate, 0, false)
	data := randBytes(4<<20, 3)
	dst := server(t, func(c *net.TCPConn) {
		defer c.Close()
		io.Copy(io.Discard, c)
	})
	client, result := pr.split(t, dst)
	start := time.Now()
	client.Write(data)
	client.CloseWrite()
	io.Copy(io.Discard, client)
	<-result
	el := time.Since(start).Seconds()
	got := float64(len(data)) * 8 / el
	t.Logf("goodput %.2f Mbit/s at a pacing rate of %.0f Mbit/s", got/1e6, rate/1e6)
	// Wire rate includes headers (1468 payload per 1514 bytes).
	if got > rate*1.05 || got < rate*0.85 {
		t.Errorf("goodput %.2f Mbit/s at a pacing rate of %.0f Mbit/s", got/1e6, rate/1e6)
	}
}

// TestResetBothWays: a reset on either LAN leg resets the other end.
func TestResetBothWays(t *testing.T) {
	for _, who := range []string{"client", "server"} {
		t.Run(who, func(t *testing.T) {
			pr := newPair(t, 0.1, 0, 5*time.Millisecond, 100_000_000, 0, false)
			srvErr := make(chan error, 1)
			dst := server(t, func(c *net.TCPConn) {
				if who == "server" {
					c.Read(make([]byte, 1))
					c.SetLinger(0)
					c.Close()
					return
				}
				c.SetReadDeadline(time.Now().Add(20 * time.Second))
				_, err := io.Copy(io.Discard, c)
				srvErr <- err
			})
			client, result := pr.split(t, dst)
			client.Write([]byte("x"))
			if who == "client" {
				time.Sleep(200 * time.Millisecond)
				client.SetLinger(0)
				client.Close()
				if err := <-srvErr; !errors.Is(err, syscall.ECONNRESET) {
					t.Fatalf("server saw %v, want a reset", err)
				}
			} else {
				client.SetReadDeadline(time.Now().Add(20 * time.Second))
				_, err := io.Copy(io.Discard, client)
				if !errors.Is(err, syscall.ECONNRESET) {
					t.Fatalf("client saw %v, want a reset", err)
				}
			}
			if r := <-result; r == "closed" {
				t.Fatalf("relay ended %q", r)
			}
		})
	}
}

// TestRefused: the peer cannot reach the server, the client is reset.
func TestRefused(t *testing.T) {
	pr := newPair(t, 0, 0, 5*time.Millisecond, 100_000_000, 0, false)
	ln, _ := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	dst := ln.Addr().(*net.TCPAddr).AddrPort()
	ln.Close() // nobody listens there now
	client, result := pr.split(t, dst)
	client.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := client.Read(make([]byte, 1))
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("client saw %v, want a reset", err)
	}
	if r := <-result; r != "reset_by_peer" {
		t.Fatalf("relay ended %q, want reset_by_peer", r)
	}
}

// TestNoPeer: without a peer Open fails at once (pepd then uses TCP), and
// a peer that falls silent takes its streams with it.
func TestNoPeer(t *testing.T) {
	p := &linkParams{rng: rand.New(rand.NewPCG(1, 2))}
	p.cut.Store(true)
	la, _ := memPair(p)
	tn := New(la, Config{RateBPS: 1e6, Log: log.New(io.Discard, "", 0)})
	defer tn.Close()
	if tn.WaitPeer(300 * time.Millisecond) {
		t.Fatal("peer up with nobody there")
	}
	if _, err := tn.Open(netip.MustParseAddrPort("1.2.3.4:5"), netip.MustParseAddrPort("5.6.7.8:9")); !errors.Is(err, ErrNoPeer) {
		t.Fatalf("Open: %v, want ErrNoPeer", err)
	}

	pr := newPair(t, 0, 0, 5*time.Millisecond, 100_000_000, 0, false)
	pr.a.cfg.PeerTimeout = 300 * time.Millisecond
	dst := server(t, func(c *net.TCPConn) { io.Copy(io.Discard, c) })
	client, result := pr.split(t, dst)
	client.Write([]byte("x"))
	time.Sleep(100 * time.Millisecond)
	pr.params.cut.Store(true)
	select {
	case r := <-result:
		if r != "peer_lost" {
			t.Fatalf("relay ended %q, want peer_lost", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stream survived its peer")
	}
	if pr.a.Snapshot().PeerUp {
		t.Fatal("peer still up")
	}
}

// TestIdleThenReply: a connection idle for longer than the stall limit
// then sends (an FTP control connection answering after a long
// transfer) is not taken for stalled.
func TestIdleThenReply(t *testing.T) {
	pr := newPair(t, 0, 0, 5*time.Millisecond, 100_000_000, 0, false)
	got := make(chan []byte, 1)
	dst := server(t, func(c *net.TCPConn) {
		b, _ := io.ReadAll(c)
		got <- b
		c.Close()
	})
	client, result := pr.split(t, dst)
	client.Write([]byte("before"))
	time.Sleep(300 * time.Millisecond)
	// Pretend the stream has been idle since long before the stall limit.
	pr.a.mu.Lock()
	for _, s := range pr.a.streams {
		s.lastProgress = time.Now().Add(-2 * stallLimit)
	}
	pr.a.mu.Unlock()
	client.Write([]byte(" after"))
	client.CloseWrite()
	if b := <-got; string(b) != "before after" {
		t.Fatalf("server got %q", b)
	}
	io.Copy(io.Discard, client)
	if r := <-result; r != "closed" {
		t.Fatalf("relay ended %q", r)
	}
}

// TestBackpressure: a LAN receiver that stops reading stops the LAN
// sender; neither pepd holds more than its window.
func TestBackpressure(t *testing.T) {
	const window = 256 << 10
	pr := newPair(t, 0, 0, 2*time.Millisecond, 200_000_000, window, false)
	release := make(chan struct{})
	dst := server(t, func(c *net.TCPConn) {
		c.SetReadBuffer(64 << 10)
		<-release
		io.Copy(io.Discard, c)
		c.Close()
	})
	client, result := pr.split(t, dst)
	client.SetWriteBuffer(64 << 10)
	var written atomic.Int64
	go func() {
		chunk := make([]byte, 32<<10)
		for range 512 { // 16 MB
			n, err := client.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
		client.CloseWrite()
	}()
	time.Sleep(1500 * time.Millisecond)
	w := written.Load()
	// Socket buffers (autotuned up to a few MB on loopback) plus two
	// windows; far below the 16 MB offered.
	if w > 12<<20 {
		t.Fatalf("client wrote %d bytes with the receiver stalled", w)
	}
	pr.a.mu.Lock()
	var held int
	for _, s := range pr.a.streams {
		held += int(s.snd.end - s.snd.una)
	}
	pr.a.mu.Unlock()
	pr.b.mu.Lock()
	for _, s := range pr.b.streams {
		held += s.rcv.held
	}
	pr.b.mu.Unlock()
	if held > 2*window {
		t.Fatalf("pepds hold %d bytes, window %d", held, window)
	}
	close(release)
	io.Copy(io.Discard, client)
	if r := <-result; r != "closed" {
		t.Fatalf("relay ended %q", r)
	}
}

// TestAdapt: with a link much slower than the hint, queueing delay pulls
// the pacing rate down to about the link's rate.
func TestAdapt(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of rate adaptation: make test's tier")
	}
	for _, tc := range []struct {
		name         string
		hint, linkBP float64
		halveAfter   time.Duration // 0: the link keeps its rate
		size         int
	}{
		{"link 4 x slower than the hint", 16_000_000, 4_000_000, 0, 3 << 20},
		{"link halves mid-transfer", 8_000_000, 8_000_000, time.Second, 4 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, sa, client, result := shapedSplit(t, 20*time.Millisecond, tc.hint, tc.linkBP, log.New(io.Discard, "", 0))
			linkBP := tc.linkBP
			if tc.halveAfter > 0 {
				linkBP /= 2
				tm := time.AfterFunc(tc.halveAfter, func() {
					sa.mu.Lock()
					sa.rate = linkBP
					sa.mu.Unlock()
				})
				defer tm.Stop()
			}
			data := randBytes(tc.size, 4)
			start := time.Now()
			client.Write(data)
			client.CloseWrite()
			io.Copy(io.Discard, client)
			<-result
			got := float64(len(data)) * 8 / time.Since(start).Seconds()
			st := a.Snapshot()
			t.Logf("link %.0f bit/s at the end, hint %.0f: pacing settled at %d bit/s, goodput %.2f Mbit/s, %d decreases, %d RTO marks, %d bytes resent",
				linkBP, tc.hint, st.RateBPS, got/1e6, st.RateDecreases, st.RTOMarks, st.DataRetransmit)
			// Bounds a stalled host cannot break: at this 40 ms round trip a
			// VM's stolen CPU reads as queueing, and a cut can end at the
			// floor (half the link here: 2 of 10 runs). How close self-tuning
			// comes to the right pinned rate is measured by the benchmark
			// (experiments/wanrate-adapt.yaml), not here.
			if r := float64(st.RateBPS); r > linkBP*1.3 || r < linkBP*0.5 {
				t.Errorf("pacing rate %.0f bit/s on a %.0f bit/s link", r, linkBP)
			}
			if got < linkBP*0.55 {
				t.Errorf("goodput %.2f Mbit/s on a link of at least %.0f Mbit/s", got/1e6, linkBP/1e6)
			}
		})
	}
}

// TestCopiesNotCountedAsSent: self-tuning compares what the link passed
// with what was sent; the statuses resolve each first transmission (or
// repair) once and never a copy, so copies must not count as sent either.
// When they did, the spare copies sent into an application's pauses read
// as a link delivering less than it was given (the diagnostic scp, 5 MB at
// 600 ms, cut the rate 8.00 -> 5.53 Mbit/s on a link exactly that fast).
// Self-tuning is off, so its interval never restarts and ctl.sent sums the
// whole transfer.
func TestCopiesNotCountedAsSent(t *testing.T) {
	pr := newPair(t, 0, 0, 20*time.Millisecond, 8_000_000, 0, false)
	dst := server(t, func(c *net.TCPConn) { io.Copy(io.Discard, c); c.Close() })
	client, result := pr.split(t, dst)
	// Bursts with pauses: the link idles after each, and spare copies of
	// the burst's tail go out meanwhile.
	if r := burstThenDrain(client, result, randBytes(64<<10, 7), 6, 150*time.Millisecond); r != "closed" {
		t.Fatalf("relay ended %q", r)
	}
	st := pr.a.Snapshot()
	pr.a.mu.Lock()
	sentBytes := pr.a.ctl.sent / 8
	pr.a.mu.Unlock()
	first := float64(st.DataSent + st.DataRetransmit)
	t.Logf("%d data bytes, %d resent, %d spare copies, %d copies; self-tuning counted %.0f bytes sent", st.DataSent, st.DataRetransmit, st.DataSpare, st.DataCopies, sentBytes)
	if st.DataSpare < st.DataSent/10 {
		t.Fatalf("%d bytes of spare copies for %d of data: too few to tell whether they count", st.DataSpare, st.DataSent)
	}
	// Headers add a few per cent to the payload; the copies, if counted,
	// at least a tenth.
	if sentBytes < first || sentBytes > first*1.08 {
		t.Errorf("self-tuning counted %.0f bytes sent for %.0f bytes of first transmissions and repairs (copies %d)", sentBytes, first, st.DataSpare+st.DataCopies)
	}
}

// BenchmarkAdaptBursty: an application that sends in bursts with pauses
// (SSH waiting on its channel window) over a link exactly as fast as the
// hint; self-tuning should leave the rate alone. It reports the rate
// decreases and the pacing rate at the end of each run. A figure, not a
// test: a host that stalls the process for tens of milliseconds (a busy
// VM: the link here is in the same process) reads as queueing, and two
// real-time CPU hogs taking 25 ms of every 100 on both cores gave 0-2
// decreases. The two fixes it measures, the idle-credit cap and copies
// not counted as sent, have their own tests (TestPacerCredit,
// TestCopiesNotCountedAsSent). Run it alone:
//
//	go test -run '^$' -bench AdaptBursty -benchtime 5x ./pep/wanrate
func BenchmarkAdaptBursty(b *testing.B) {
	const rate = 8_000_000
	var decreases, endRate float64
	for range b.N {
		// A 100 ms round trip; 24 bursts of 256 kB (0.26 s at the
		// rate), one written every 0.4 s: the link idles about 0.15 s
		// after each.
		a, _, client, result := shapedSplit(b, 50*time.Millisecond, rate, rate, log.New(io.Discard, "", 0))
		if r := burstThenDrain(client, result, randBytes(256<<10, 7), 24, 400*time.Millisecond); r != "closed" {
			b.Fatalf("relay ended %q", r)
		}
		st := a.Snapshot()
		decreases += float64(st.RateDecreases)
		endRate += float64(st.RateBPS)
		a.Close()
	}
	b.ReportMetric(decreases/float64(b.N), "decreases/op")
	b.ReportMetric(endRate/float64(b.N)/1e6, "end-Mbit/s")
	b.ReportMetric(0, "ns/op")
}

// burstThenDrain writes data n times, pausing gap after each, then closes
// the client's write side, reads what comes back to its end and returns
// how the relay ended.
func burstThenDrain(client *net.TCPConn, result <-chan string, data []byte, n int, gap time.Duration) string {
	go func() {
		for range n {
			client.Write(data)
			time.Sleep(gap)
		}
		client.CloseWrite()
	}()
	io.Copy(io.Discard, client)
	return <-result
}

// shapedSplit starts a self-tuning pair (hint rateHint, round trip twice
// delay) whose a side sends through a queue drained at linkBP bit/s (the
// memLink itself has no rate limit), and splits one connection from the
// returned client to a server that discards what it reads. The pair is
// closed when the test ends.
func shapedSplit(t testing.TB, delay time.Duration, rateHint, linkBP float64, lg *log.Logger) (a *Tunnel, sa *shapedLink, client *net.TCPConn, result chan string) {
	t.Helper()
	p := &linkParams{rng: rand.New(rand.NewPCG(1, 2)), delay: delay}
	la, lb := memPair(p)
	sa = &shapedLink{memLink: la, rate: linkBP}
	cfg := Config{RateBPS: int64(rateHint), RTT: 2 * delay, Adapt: true, Accept: dialAccept, Log: lg}
	a, b := New(sa, cfg), New(lb, cfg)
	t.Cleanup(func() {
		b.Close()
		a.Close()
	})
	if !a.WaitPeer(5 * time.Second) {
		t.Fatal("no peer")
	}
	dst := server(t, func(c *net.TCPConn) { io.Copy(io.Discard, c); c.Close() })
	pr := &pair{a: a, b: b, params: p}
	client, result = pr.split(t, dst)
	return a, sa, client, result
}

// shapedLink delays frames as a FIFO drained at rate would.
type shapedLink struct {
	*memLink
	rate float64
	mu   sync.Mutex
	free time.Time // when the queue is empty
}

func (s *shapedLink) Send(frame []byte, to HWAddr) error {
	s.mu.Lock()
	now := time.Now()
	if s.free.Before(now) {
		s.free = now
	}
	s.free = s.free.Add(time.Duration(float64(len(frame)+14) * 8 / s.rate * float64(time.Second)))
	wait := s.free.Sub(now)
	s.mu.Unlock()
	b := append([]byte(nil), frame...)
	select {
	case s.out <- memFrame{b, now.Add(s.p.delay + wait), s.addr}:
	case <-s.done:
	}
	return nil
}

// TestOutage: the link drops everything for a while in the middle of a
// transfer both ways. The streams survive (the silence is far below the
// give-up time), no data leaves while the link is known to be silent
// (probes do), and everything arrives intact once it returns.
func TestOutage(t *testing.T) {
	pr := newPair(t, 0.01, 0, 10*time.Millisecond, 20_000_000, 0, false)
	up, down := randBytes(6<<20, 5), randBytes(6<<20, 6)
	client, gotUp, result := pr.both(t, up, down)
	gotDown := make(chan []byte, 1)
	go func() {
		client.SetReadDeadline(time.Now().Add(60 * time.Second))
		b, _ := io.ReadAll(client)
		gotDown <- b
	}()
	time.Sleep(300 * time.Millisecond)
	pr.params.cut.Store(true)
	cutAt := time.Now()
	for _, tn := range []*Tunnel{pr.a, pr.b} {
		waitSnap(t, tn, "a stall", func(s Stats) bool { return s.Stalled })
	}
	sent := func() int64 {
		a, b := pr.a.Snapshot(), pr.b.Snapshot()
		return a.DataSent + a.DataRetransmit + a.DataCopies + b.DataSent + b.DataRetransmit + b.DataCopies
	}
	before, probes := sent(), pr.a.Snapshot().ProbesSent
	time.Sleep(500 * time.Millisecond)
	if d := sent() - before; d != 0 {
		t.Errorf("%d data bytes sent into the silent link", d)
	}
	if pr.a.Snapshot().ProbesSent == probes {
		t.Error("no probe sent while stalled")
	}
	time.Sleep(time.Until(cutAt.Add(2 * time.Second)))
	pr.params.cut.Store(false)
	if b := <-gotDown; !bytes.Equal(b, down) {
		t.Fatalf("download: %d bytes, want %d, contents differ", len(b), len(down))
	}
	if b := <-gotUp; !bytes.Equal(b, up) {
		t.Fatalf("upload: %d bytes, want %d, contents differ", len(b), len(up))
	}
	if r := <-result; r != "closed" {
		t.Fatalf("relay ended %q, want closed", r)
	}
	for _, tn := range []*Tunnel{pr.a, pr.b} {
		s := tn.Snapshot()
		t.Logf("stalls %d, last silence %.2f s (detected after %.2f s), %d probes, %d bytes resent",
			s.Stalls, s.LastStallS, s.LastDetectS, s.ProbesSent, s.DataRetransmit)
		if s.Stalled || s.Stalls == 0 || !s.PeerUp {
			t.Errorf("after the outage: %+v", s)
		}
	}
}

func waitSnap(t *testing.T, tn *Tunnel, what string, ok func(Stats) bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if ok(tn.Snapshot()) {
			return
		}
	}
	t.Fatalf("never saw %s: %+v", what, tn.Snapshot())
}

func TestFrameForBER(t *testing.T) {
	for _, tc := range []struct {
		ber    float64
		lo, hi int
	}{
		{0, 1500, 1500},
		{1e-7, 1500, 1500},
		{1e-6, 1500, 1500},
		{1e-5, 700, 850},
		{1e-4, 256, 300},
	} {
		if got := FrameForBER(tc.ber, 1500, 14); got < tc.lo || got > tc.hi {
			t.Errorf("BER %g: frame %d bytes, want %d..%d", tc.ber, got, tc.lo, tc.hi)
		}
	}
}

// TestRateControlKeepsTheRate: intervals on which self-tuning must not cut
// the pacing rate. Each case sets the rate control's state on a fresh
// pair and returns when it decides.
func TestRateControlKeepsTheRate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		minRTT time.Duration
		set    func(tn *Tunnel, c *rateCtl, now time.Time) time.Time
	}{
		// The interval that began before an outage averages seconds in
		// which nothing crossed; the link's return starts a new one, so
		// the resent burst's first round trip, queued a little and passed
		// in full, does not cut the rate (it did: 2.18 -> 0.75 Mbit/s on
		// a 3 Mbit/s link in scenarios/outage.yaml).
		{"link back forgets the silence", 20 * time.Millisecond, func(tn *Tunnel, c *rateCtl, now time.Time) time.Time {
			// Before the silence: a second at 8 Mbit/s sent, half of it
			// seen through (the rest was lost when the link went down),
			// the previous interval queued.
			c.start, c.minSample, c.draining, c.hold = now.Add(-10*time.Second), 0, false, now.Add(time.Minute)
			c.sent, c.resolved, c.queued, c.prevGot, c.prevSent = 8e6, 4e6, true, 4e6, 8e6
			tn.stall.on, tn.stall.at, tn.peer.heard = true, now.Add(-9*time.Second), now.Add(-10*time.Second)
			tn.heardLocked(now, false)
			// The first round trip after it: the resent burst, passed in
			// full, with 15 ms of queue in front of it.
			c.sent += 480e3
			c.resolved += 480e3
			tn.rttSampleLocked(35*time.Millisecond, now.Add(50*time.Millisecond))
			return now.Add(60 * time.Millisecond)
		}},
		// Two round trips with queueing delay but almost nothing sent (an
		// application waiting on a closed window while the peer answers
		// late). The outage study's B=320, K=0.7 row was cut from 3 to
		// 0.75 Mbit/s at the start this way ("the link passed 0.00
		// Mbit/s of 0.00 sent").
		{"nothing sent", 600 * time.Millisecond, func(tn *Tunnel, c *rateCtl, now time.Time) time.Time {
			c.start, c.draining, c.hold = now, false, now
			c.queued, c.prevGot, c.prevSent = true, 2e3, 4e3
			c.sent, c.resolved = 3e3, 1e3
			tn.rttSampleLocked(789*time.Millisecond, now.Add(700*time.Millisecond))
			return now.Add(800 * time.Millisecond)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr := newPair(t, 0, 0, 10*time.Millisecond, 8_000_000, 0, true)
			tn := pr.a
			tn.mu.Lock()
			defer tn.mu.Unlock()
			now := time.Now()
			rate := tn.pace.rate
			tn.minRTT, tn.minRTTAt, tn.srtt = tc.minRTT, now, tc.minRTT
			tn.rateControlLocked(tc.set(tn, &tn.ctl, now))
			if tn.pace.rate < rate || tn.st.RateDecreases != 0 {
				t.Errorf("pacing %.2f -> %.2f Mbit/s (%d decreases)", rate/1e6, tn.pace.rate/1e6, tn.st.RateDecreases)
			}
		})
	}
}
