package saratoga

import (
	"context"
	"crypto/sha256"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type impair struct {
	seed      uint64
	delay     time.Duration // one way, applied by each side's wrapper
	dropData  float64
	dropState float64
	ber       float64
}

func (im impair) wrap(c net.PacketConn, salt uint64) *lossyConn {
	l := newLossyConn(c, im.seed*1000+salt, im.delay)
	l.drop[TypeData] = im.dropData
	l.drop[TypeStatus] = im.dropState
	l.ber = im.ber
	return l
}

type testServer struct {
	addr string
	conn *lossyConn
	srv  *Server
}

// startServer runs a Server on loopback until the test ends.
func startServer(t *testing.T, srv *Server, im impair) *testServer {
	t.Helper()
	raw, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	SetSocketBuffers(raw, 4<<20)
	conn := im.wrap(raw, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, conn) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		conn.Close()
	})
	return &testServer{addr: raw.LocalAddr().String(), conn: conn, srv: srv}
}

func testClientConn(t *testing.T, im impair) *lossyConn {
	t.Helper()
	raw, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	SetSocketBuffers(raw, 4<<20)
	c := im.wrap(raw, 2)
	t.Cleanup(func() { c.Close() })
	return c
}

func writeRandom(t *testing.T, path string, n int, seed uint64) []byte {
	t.Helper()
	b := make([]byte, n)
	rng := rand.New(rand.NewPCG(seed, 7))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

func sameFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(got) != sha256.Sum256(want) {
		t.Fatalf("%s: sha256 differs (len %d, want %d)", path, len(got), len(want))
	}
}

// noViolations fails the test if c wrote a frame another implementation
// would reject.
func noViolations(t *testing.T, conns ...*lossyConn) {
	t.Helper()
	for _, c := range conns {
		c.mu.Lock()
		v := c.violations
		c.mu.Unlock()
		if len(v) > 0 {
			t.Errorf("frames other implementations reject: %q", v)
		}
	}
}

func TestGetLossy(t *testing.T) {
	tests := []struct {
		name  string
		size  int
		desc  Descriptor
		auto  bool
		csum  ChecksumType
		im    impair
		rate  int64
		holes bool
	}{
		{"4MB d32 md5 10% loss", 4 << 20, D32, false, CsumMD5, impair{seed: 1, delay: 10 * time.Millisecond, dropData: 0.1, dropState: 0.1}, 200e6, true},
		{"3MB d64 sha1 20% loss", 3 << 20, D64, false, CsumSHA1, impair{seed: 2, delay: 5 * time.Millisecond, dropData: 0.2, dropState: 0.2}, 200e6, true},
		{"60KB d16 auto crc32", 60000, 0, true, CsumCRC32, impair{seed: 3, delay: 2 * time.Millisecond, dropData: 0.1, dropState: 0.1}, 50e6, false},
		{"empty file", 0, 0, true, CsumMD5, impair{seed: 4}, 10e6, false},
		{"clean 1MB", 1 << 20, D64, false, CsumNone, impair{seed: 5}, 100e6, false},
		{"2MB d128 5% loss", 2 << 20, D128, false, CsumMD5, impair{seed: 6, delay: 5 * time.Millisecond, dropData: 0.05, dropState: 0.05}, 100e6, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			want := writeRandom(t, filepath.Join(root, "f.bin"), tc.size, tc.im.seed)
			ts := startServer(t, &Server{Root: root, RateBPS: tc.rate, Descriptor: tc.desc, AutoDescriptor: tc.auto,
				Checksum: tc.csum, Timeout: 10 * time.Second}, tc.im)
			out := filepath.Join(t.TempDir(), "out.bin")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cc := testClientConn(t, tc.im)
			sum, err := Get(ctx, ClientConfig{Server: ts.addr, Timeout: 10 * time.Second, Conn: cc,
				Linger: 200 * time.Millisecond}, "f.bin", out)
			if err != nil {
				t.Fatal(err)
			}
			sameFile(t, out, want)
			if _, err := os.Stat(out + ".part"); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("partial file left behind: %v", err)
			}
			if !sum.ChecksumOK || sum.Checksum != tc.csum.String() || sum.Bytes != uint64(tc.size) {
				t.Errorf("summary %+v", sum)
			}
			_, dropped := ts.conn.counts()
			noViolations(t, ts.conn, cc)
			if tc.holes && (dropped[TypeData] == 0 || sum.RetransmittedFrames == 0 || sum.HolesRequested == 0) {
				t.Errorf("expected loss recovery: dropped %v, summary %+v", dropped, sum)
			}
			t.Logf("%+v", *sum)
		})
	}
}

func TestPutLossy(t *testing.T) {
	tests := []struct {
		name string
		size int
		desc Descriptor
		auto bool
		csum ChecksumType
		im   impair
	}{
		{"4MB d64 md5 10% loss", 4 << 20, D64, false, CsumMD5, impair{seed: 11, delay: 10 * time.Millisecond, dropData: 0.1, dropState: 0.1}},
		{"2MB auto sha1 15% loss", 2 << 20, 0, true, CsumSHA1, impair{seed: 12, delay: 3 * time.Millisecond, dropData: 0.15, dropState: 0.15}},
		{"1MB d128 crc32 10% loss", 1 << 20, D128, false, CsumCRC32, impair{seed: 13, delay: 2 * time.Millisecond, dropData: 0.1, dropState: 0.1}},
		{"empty file", 0, D32, false, CsumMD5, impair{seed: 14, delay: 2 * time.Millisecond}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			ts := startServer(t, &Server{Root: root, RateBPS: 100e6, Checksum: CsumMD5, Timeout: 10 * time.Second,
				Linger: time.Second}, tc.im)
			local := filepath.Join(t.TempDir(), "local.bin")
			want := writeRandom(t, local, tc.size, tc.im.seed)
			c := testClientConn(t, tc.im)
			sum, err := Put(context.Background(), ClientConfig{Server: ts.addr, RateBPS: 200e6, Timeout: 10 * time.Second,
				Checksum: tc.csum, Descriptor: tc.desc, AutoDescriptor: tc.auto, Conn: c}, local, "up.bin")
			if err != nil {
				t.Fatal(err)
			}
			sameFile(t, filepath.Join(root, "up.bin"), want)
			noViolations(t, c, ts.conn)
			if tc.size > 0 && (sum.RetransmittedFrames == 0 || sum.HolesRequested == 0) {
				t.Errorf("expected loss recovery: %+v", sum)
			}
			entries, _ := os.ReadDir(root)
			if len(entries) != 1 {
				t.Errorf("root has %d entries, want only up.bin", len(entries))
			}
			t.Logf("%+v", *sum)
		})
	}
}

func TestPathSafety(t *testing.T) {
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "dirlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, &Server{Root: root, RateBPS: 10e6, AutoDescriptor: true, Checksum: CsumMD5, Timeout: 5 * time.Second}, impair{seed: 1})
	cfg := ClientConfig{Server: ts.addr, Timeout: 3 * time.Second}
	gets := []struct {
		name string
		code ErrorCode
	}{
		{"../secret", ErrAccessDenied},
		{"sub/../../secret", ErrAccessDenied},
		{filepath.Join(outside, "secret"), ErrAccessDenied},
		{"link", ErrAccessDenied},
		{"dirlink/secret", ErrAccessDenied},
		{"missing", ErrFileNotFound},
		{"sub", ErrBadRequest},
		{"", ErrAccessDenied},
	}
	for _, g := range gets {
		t.Run("get "+g.name, func(t *testing.T) {
			_, err := Get(context.Background(), cfg, g.name, filepath.Join(t.TempDir(), "o"))
			var re *RemoteError
			if !errors.As(err, &re) || re.Code != g.code {
				t.Fatalf("err = %v, want remote %v", err, g.code)
			}
		})
	}
	local := filepath.Join(t.TempDir(), "l")
	writeRandom(t, local, 1000, 1)
	puts := []struct {
		name string
		code ErrorCode
	}{
		{"../evil", ErrAccessDenied},
		{"/tmp/evil", ErrAccessDenied},
		{"dirlink/evil", ErrAccessDenied},
		{"link", ErrAccessDenied},
		{"nodir/x", ErrFileNotFound},
	}
	for _, p := range puts {
		t.Run("put "+p.name, func(t *testing.T) {
			_, err := Put(context.Background(), ClientConfig{Server: ts.addr, Timeout: 3 * time.Second, Checksum: CsumMD5, AutoDescriptor: true},
				local, p.name)
			var re *RemoteError
			if !errors.As(err, &re) || re.Code != p.code {
				t.Fatalf("err = %v, want remote %v", err, p.code)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(outside, "evil")); err == nil {
		t.Fatal("put wrote outside the root")
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "x" {
		t.Fatal("file outside root modified")
	}
}

func TestTimeoutNoServer(t *testing.T) {
	// A port that was just free: nothing answers there.
	c, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := c.LocalAddr().String()
	c.Close()
	start := time.Now()
	out := filepath.Join(t.TempDir(), "o")
	_, err = Get(context.Background(), ClientConfig{Server: addr, Timeout: 1500 * time.Millisecond}, "f", out)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("get err = %v, want timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("timeout took %v", d)
	}
	if _, err := os.Stat(out + ".part"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("partial file left: %v", err)
	}
	local := filepath.Join(t.TempDir(), "l")
	writeRandom(t, local, 100, 1)
	_, err = Put(context.Background(), ClientConfig{Server: addr, Timeout: 1500 * time.Millisecond, AutoDescriptor: true}, local, "x")
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("put err = %v, want timeout", err)
	}
}

// TestTimeoutServerGone stops the server mid-transfer: the client must
// give up with a timeout error, not hang.
func TestTimeoutServerGone(t *testing.T) {
	root := t.TempDir()
	writeRandom(t, filepath.Join(root, "big"), 8<<20, 1)
	raw, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	ctx, cancel := context.WithCancel(context.Background())
	srvDone := make(chan error, 1)
	srv := &Server{Root: root, RateBPS: 8e6, AutoDescriptor: true, Checksum: CsumMD5, Timeout: 5 * time.Second}
	go func() { srvDone <- srv.Serve(ctx, raw) }()
	time.AfterFunc(500*time.Millisecond, cancel)
	start := time.Now()
	_, err = Get(context.Background(), ClientConfig{Server: raw.LocalAddr().String(), Timeout: 2 * time.Second}, "big", filepath.Join(t.TempDir(), "o"))
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want timeout", err)
	}
	if d := time.Since(start); d > 6*time.Second {
		t.Fatalf("took %v", d)
	}
	if err := <-srvDone; err != nil {
		t.Fatal(err)
	}
}

// TestMalformedDropped sends garbage at the server, which must count it,
// survive, and still serve.
func TestMalformedDropped(t *testing.T) {
	root := t.TempDir()
	want := writeRandom(t, filepath.Join(root, "f"), 100000, 3)
	ts := startServer(t, &Server{Root: root, RateBPS: 50e6, AutoDescriptor: true, Checksum: CsumMD5, Timeout: 5 * time.Second}, impair{seed: 1})
	c, err := net.Dial("udp4", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	garbage := [][]byte{{}, {0x23}, {0xff, 0xff, 0xff, 0xff}, {0x23, 0xc0, 0, 0, 0, 0, 0, 1}, {0x24, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}}
	for _, g := range garbage {
		if _, err := c.Write(g); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "o")
	if _, err := Get(context.Background(), ClientConfig{Server: ts.addr, Timeout: 5 * time.Second}, "f", out); err != nil {
		t.Fatal(err)
	}
	sameFile(t, out, want)
	// The empty datagram may not be delivered as a frame at all.
	if n := ts.srv.Stats().Malformed; n < uint64(len(garbage)-1) {
		t.Fatalf("malformed count %d, want >= %d", n, len(garbage)-1)
	}
}

// TestRefusalRepeated loses the server's first refusal: the client's
// repeated REQUEST must get the same error code again.
func TestRefusalRepeated(t *testing.T) {
	ts := startServer(t, &Server{Root: t.TempDir(), RateBPS: 10e6, AutoDescriptor: true, Timeout: 5 * time.Second}, impair{seed: 1})
	ts.conn.mu.Lock()
	ts.conn.dropFirst[TypeStatus] = 1
	ts.conn.mu.Unlock()
	_, err := Get(context.Background(), ClientConfig{Server: ts.addr, Timeout: 4 * time.Second}, "missing", filepath.Join(t.TempDir(), "o"))
	var re *RemoteError
	if !errors.As(err, &re) || re.Code != ErrFileNotFound {
		t.Fatalf("err = %v, want remote file-not-found", err)
	}
	if sent, dropped := ts.conn.counts(); sent[TypeStatus] < 2 || dropped[TypeStatus] != 1 {
		t.Fatalf("status frames sent %d dropped %d", sent[TypeStatus], dropped[TypeStatus])
	}
}

// TestConcurrentSessions runs several gets and puts against one server at
// the same time.
func TestConcurrentSessions(t *testing.T) {
	root := t.TempDir()
	im := impair{seed: 21, delay: 2 * time.Millisecond, dropData: 0.05, dropState: 0.05}
	ts := startServer(t, &Server{Root: root, RateBPS: 40e6, AutoDescriptor: true, Checksum: CsumSHA1,
		Timeout: 10 * time.Second, Linger: 500 * time.Millisecond}, im)
	const n = 3
	wants := make([][]byte, n)
	for i := range n {
		wants[i] = writeRandom(t, filepath.Join(root, "g"+string(rune('0'+i))), 500_000+i*1000, uint64(i))
	}
	local := filepath.Join(t.TempDir(), "p")
	putWant := writeRandom(t, local, 700_000, 99)
	errs := make(chan error, n+1)
	outs := make([]string, n)
	for i := range n {
		outs[i] = filepath.Join(t.TempDir(), "o")
		go func() {
			_, err := Get(context.Background(), ClientConfig{Server: ts.addr, Timeout: 10 * time.Second,
				Conn: testClientConn(t, impair{seed: uint64(30 + i), dropData: 0.05, dropState: 0.05})},
				"g"+string(rune('0'+i)), outs[i])
			errs <- err
		}()
	}
	go func() {
		_, err := Put(context.Background(), ClientConfig{Server: ts.addr, RateBPS: 40e6, Timeout: 10 * time.Second,
			Checksum: CsumMD5, AutoDescriptor: true}, local, "put.bin")
		errs <- err
	}()
	for range n + 1 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		sameFile(t, outs[i], wants[i])
	}
	sameFile(t, filepath.Join(root, "put.bin"), putWant)
	if st := ts.srv.Stats(); st.Sessions != n+1 || st.Failed != 0 {
		t.Fatalf("server stats %+v", st)
	}
}

// TestMaxSessions fills the server's only slot with a slow get, and checks a
// second request is refused rather than queued.
func TestMaxSessions(t *testing.T) {
	root := t.TempDir()
	writeRandom(t, filepath.Join(root, "big"), 2<<20, 1)
	ts := startServer(t, &Server{Root: root, RateBPS: 1e6, AutoDescriptor: true, Timeout: 3 * time.Second, MaxSessions: 1}, impair{seed: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := make(chan error, 1)
	go func() {
		_, err := Get(ctx, ClientConfig{Server: ts.addr, Timeout: 3 * time.Second}, "big", filepath.Join(t.TempDir(), "o1"))
		first <- err
	}()
	time.Sleep(300 * time.Millisecond)
	_, err := Get(context.Background(), ClientConfig{Server: ts.addr, Timeout: 3 * time.Second}, "big", filepath.Join(t.TempDir(), "o2"))
	var re *RemoteError
	if !errors.As(err, &re) || re.Code != ErrCantSend {
		t.Fatalf("err = %v, want remote cannot-send", err)
	}
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("first get: %v", err)
	}
}

// TestBeacons: a server given BeaconTo sends BEACON frames there, and a
// client's get announces itself with one the server counts.
func TestBeacons(t *testing.T) {
	root := t.TempDir()
	want := writeRandom(t, filepath.Join(root, "f.bin"), 5000, 9)
	watch, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	ts := startServer(t, &Server{Root: root, RateBPS: 10e6, AutoDescriptor: true, Checksum: CsumMD5,
		Timeout: 5 * time.Second, BeaconTo: []net.Addr{watch.LocalAddr()}, BeaconEvery: 50 * time.Millisecond}, impair{seed: 21})
	for i := range 2 {
		_ = watch.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 2048)
		n, _, err := watch.ReadFrom(buf)
		if err != nil {
			t.Fatalf("beacon %d: %v", i, err)
		}
		f, err := Decode(buf[:n])
		if err != nil {
			t.Fatal(err)
		}
		b, ok := f.(*Beacon)
		if !ok || b.Descriptor != D128 || b.TxWilling != WillingYes || b.RxWilling != WillingYes ||
			!strings.HasPrefix(b.EID, "saratoga:") || !b.HasFree {
			t.Fatalf("beacon %d: %+v", i, f)
		}
	}
	out := filepath.Join(t.TempDir(), "out.bin")
	if _, err := Get(context.Background(), ClientConfig{Server: ts.addr, Timeout: 5 * time.Second}, "f.bin", out); err != nil {
		t.Fatal(err)
	}
	sameFile(t, out, want)
	if got := ts.srv.Stats().Beacons; got != 1 {
		t.Errorf("server counted %d beacons, want 1", got)
	}
}
