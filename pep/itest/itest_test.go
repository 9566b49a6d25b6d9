// Package itest runs pepd and the PEP adapters in real network namespaces:
// clientA - pepA - [pepB] - clientB, all bridges without IP addresses.
// It needs root and skips otherwise.
package itest

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"satbed/pep/internal/netns"
)

var (
	binDir     string // holds the pepd built for this test run
	skipReason string // why this machine cannot run the tests: each reports SKIP
)

func TestMain(m *testing.M) {
	flag.Parse() // testing.Short needs the flags parsed
	if testing.Short() {
		// Namespaces and nftables: `make test`'s tier, not `make check`'s.
		skipReason = "namespace integration test: skipped under -short"
	} else if os.Geteuid() != 0 {
		skipReason = "needs root for network namespaces"
	}
	for _, tool := range []string{"ip", "nft", "ethtool"} {
		if _, err := exec.LookPath(tool); err != nil && skipReason == "" {
			skipReason = tool + " not found"
		}
	}
	if skipReason != "" {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "pepd-itest-")
	if err != nil {
		panic(err)
	}
	binDir = dir
	args := []string{"build", "-o", filepath.Join(dir, "pepd")}
	if os.Getenv("PEPD_RACE") != "" {
		args = append(args, "-race") // run the daemon under the race detector
	}
	out, err := exec.Command("go", append(args, "satbed/pep/cmd/pepd")...).CombinedOutput()
	if err != nil {
		fmt.Printf("itest: building pepd: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// needsBed skips a test where namespaces cannot be made, saying why.
func needsBed(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}

func adapterPath(name string) string {
	p, err := filepath.Abs(filepath.Join("..", "adapters", name))
	if err != nil {
		panic(err)
	}
	return p
}

type bed struct {
	chain *netns.Chain
	nodes []*netns.PEPNode
}

// newBed builds a chain with one PEP per adapter name and starts them.
func newBed(t *testing.T, opts string, adapters ...string) *bed {
	t.Helper()
	chain, err := netns.New(len(adapters))
	if err != nil {
		t.Fatal(err)
	}
	b := &bed{chain: chain}
	// State dirs first: t.Cleanup runs last-registered first, and stop
	// needs the pid file that TempDir's cleanup would already have removed.
	dirs := make([]string, len(adapters))
	for i := range dirs {
		dirs[i] = t.TempDir()
	}
	t.Cleanup(func() {
		for _, n := range b.nodes {
			pid := pidOf(n)
			if _, stderr, err := n.Call("stop"); err != nil {
				t.Errorf("stop %s: %v: %s", n.NS, err, stderr)
			}
			if pid != "" && running(pid) {
				t.Errorf("pepd (pid %s) still running after stop", pid)
			}
			n.Kill()
			if log, err := os.ReadFile(filepath.Join(n.StateDir, "pepd.log")); err == nil &&
				(strings.Contains(string(log), "DATA RACE") || strings.Contains(string(log), "panic:")) {
				t.Errorf("pepd in %s:\n%s", n.NS, log)
			}
		}
		chain.Close()
	})
	for i, name := range adapters {
		n := &netns.PEPNode{
			NS: chain.PEPs[i], Adapter: adapterPath(name), StateDir: dirs[i],
			Role: string(rune('a' + i)), BinDir: binDir, RateBps: 100_000_000, RTTms: 10,
		}
		if name != "none" {
			n.Opts = opts
		}
		if _, stderr, err := n.Call("start"); err != nil {
			t.Fatalf("start %s in %s: %v: %s", name, n.NS, err, stderr)
		}
		b.nodes = append(b.nodes, n)
	}
	return b
}

func pidOf(n *netns.PEPNode) string {
	b, err := os.ReadFile(filepath.Join(n.StateDir, "pepd.pid"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// running reports whether pid is a live (not zombie) process.
func running(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// listen opens a server socket on client B.
func (b *bed) listen(t *testing.T, port int) *net.TCPListener {
	t.Helper()
	var ln *net.TCPListener
	err := netns.Do(b.chain.ClientB, func() error {
		l, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.ParseIP(netns.AddrB), Port: port})
		ln = l
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// dial connects from client A to client B.
func (b *bed) dial(t *testing.T, port int) (*net.TCPConn, error) {
	t.Helper()
	var c *net.TCPConn
	err := netns.Do(b.chain.ClientA, func() error {
		d := net.Dialer{Timeout: 5 * time.Second}
		conn, err := d.Dial("tcp4", net.JoinHostPort(netns.AddrB, fmt.Sprint(port)))
		if err != nil {
			return err
		}
		c = conn.(*net.TCPConn)
		return nil
	})
	if c != nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

// greetedPair connects client A to a server on client B's port through the
// chain and has the first five bytes ("hello") cross it, so both ends are
// established end to end; the server's end closes with the test.
func (b *bed) greetedPair(t *testing.T, port int) (client, server *net.TCPConn) {
	t.Helper()
	ln := b.listen(t, port)
	srv := make(chan *net.TCPConn, 1)
	go func() {
		c, err := ln.AcceptTCP()
		if err != nil {
			srv <- nil
			return
		}
		buf := make([]byte, 5)
		io.ReadFull(c, buf)
		srv <- c
	}()
	c, err := b.dial(t, port)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("hello"))
	s := <-srv
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { s.Close() })
	return c, s
}

// dialTTL is dial with the client socket's IP TTL set to ttl.
func (b *bed) dialTTL(t *testing.T, port, ttl int) (*net.TCPConn, error) {
	t.Helper()
	var c *net.TCPConn
	err := netns.Do(b.chain.ClientA, func() error {
		d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_TTL, ttl)
			}); err != nil {
				return err
			}
			return serr
		}}
		conn, err := d.Dial("tcp4", net.JoinHostPort(netns.AddrB, fmt.Sprint(port)))
		if err != nil {
			return err
		}
		c = conn.(*net.TCPConn)
		return nil
	})
	if c != nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

// nftPackets returns the packet count of the rule in an nft listing that
// contains match, or -1.
func nftPackets(listing, match string) int {
	for _, line := range strings.Split(listing, "\n") {
		if !strings.Contains(line, match+" ") {
			continue
		}
		if _, rest, ok := strings.Cut(line, "counter packets "); ok {
			var n int
			if _, err := fmt.Sscan(rest, &n); err == nil {
				return n
			}
		}
	}
	return -1
}

type snapshot struct {
	Name              string `json:"name"`
	ConnectionsSplit  int64  `json:"connections_split"`
	ConnectionsActive int64  `json:"connections_active"`
	BytesLanToWan     int64  `json:"bytes_lan_to_wan"`
	BytesWanToLan     int64  `json:"bytes_wan_to_lan"`
	Splitting         bool   `json:"splitting"`
	ResetsPropagated  int64  `json:"resets_propagated"`
	ConnectFailed     int64  `json:"connections_connect_failed"`
	OverflowPauses    int64  `json:"overflow_pauses"`
	Running           bool   `json:"running"`
	Workers           int    `json:"workers"`
	WorkerPIDs        []int  `json:"worker_pids"`
	Error             string `json:"error"`
}

func stats(t *testing.T, n *netns.PEPNode) snapshot {
	t.Helper()
	out, stderr, err := n.Call("stats")
	if err != nil {
		t.Fatalf("stats: %v: %s", err, stderr)
	}
	var s snapshot
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("stats output %q: %v", out, err)
	}
	return s
}

// waitStats polls the adapter's stats until ok accepts them.
func waitStats(t *testing.T, n *netns.PEPNode, what string, ok func(snapshot) bool) snapshot {
	t.Helper()
	var s snapshot
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if s = stats(t, n); ok(s) {
			return s
		}
	}
	t.Fatalf("%s: stats never showed %s: %+v", n.NS, what, s)
	return s
}

const testOpts = "stats_interval=0.2 drain_timeout=2"

// bulk sends size random bytes A->B and checks the SHA-256 and that the
// server sees the client's own address and port.
func bulk(t *testing.T, b *bed, size int) {
	t.Helper()
	ln := b.listen(t, 5001)
	type result struct {
		sum    [32]byte
		remote *net.TCPAddr
		err    error
	}
	res := make(chan result, 1)
	go func() {
		c, err := ln.AcceptTCP()
		if err != nil {
			res <- result{err: err}
			return
		}
		defer c.Close()
		h := sha256.New()
		_, err = io.Copy(h, c)
		var r result
		copy(r.sum[:], h.Sum(nil))
		r.remote, r.err = c.RemoteAddr().(*net.TCPAddr), err
		c.Write(r.sum[:])
		res <- r
	}()
	data := make([]byte, size)
	rand.Read(data)
	c, err := b.dial(t, 5001)
	if err != nil {
		t.Fatal(err)
	}
	local := c.LocalAddr().(*net.TCPAddr)
	if _, err := c.Write(data); err != nil {
		t.Fatal(err)
	}
	c.CloseWrite()
	echo, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	want := sha256.Sum256(data)
	if r.sum != want || string(echo) != string(want[:]) {
		t.Fatal("SHA-256 mismatch: transfer corrupted")
	}
	if !r.remote.IP.Equal(net.ParseIP(netns.AddrA)) || r.remote.Port != local.Port {
		t.Fatalf("server saw %v, want the client's own %v", r.remote, local)
	}
}

func TestSplitTransferOnePEP(t *testing.T) {
	needsBed(t)
	b := newBed(t, testOpts, "pepd")
	bulk(t, b, 32<<20)
	s := waitStats(t, b.nodes[0], "one split connection with all bytes", func(s snapshot) bool {
		return s.ConnectionsSplit == 1 && s.ConnectionsActive == 0 && s.BytesLanToWan == 32<<20 && s.BytesWanToLan == 32
	})
	if !s.Splitting || s.Name != "pepd" {
		t.Fatalf("stats %+v", s)
	}
}

func TestSplitTransferTwoPEPs(t *testing.T) {
	needsBed(t)
	b := newBed(t, testOpts, "pepd", "pepd")
	bulk(t, b, 32<<20)
	// PEP A split it on its LAN side; PEP B intercepted PEP A's upstream
	// SYN on its WAN side, so for B the bytes flow WAN -> LAN.
	waitStats(t, b.nodes[0], "split at PEP A", func(s snapshot) bool {
		return s.ConnectionsSplit == 1 && s.BytesLanToWan == 32<<20
	})
	waitStats(t, b.nodes[1], "split at PEP B", func(s snapshot) bool {
		return s.ConnectionsSplit == 1 && s.BytesWanToLan == 32<<20
	})
}

// TestReverseDirection: a connection opened from the aircraft side (B)
// is split too.
func TestReverseDirection(t *testing.T) {
	needsBed(t)
	b := newBed(t, testOpts, "pepd", "pepd")
	reverseEcho(t, b)
	waitStats(t, b.nodes[1], "split at PEP B (LAN side)", func(s snapshot) bool { return s.ConnectionsSplit == 1 })
	waitStats(t, b.nodes[0], "split at PEP A (WAN side)", func(s snapshot) bool { return s.ConnectionsSplit == 1 })
}

// reverseEcho opens a connection from client B (the aircraft side) to an
// echo server on client A and requires the message back.
func reverseEcho(t *testing.T, b *bed) {
	t.Helper()
	var ln *net.TCPListener
	if err := netns.Do(b.chain.ClientA, func() (err error) {
		ln, err = net.ListenTCP("tcp4", &net.TCPAddr{IP: net.ParseIP(netns.AddrA), Port: 2222})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			io.Copy(c, c)
			c.Close()
		}
	}()
	var c net.Conn
	if err := netns.Do(b.chain.ClientB, func() (err error) {
		c, err = net.DialTimeout("tcp4", netns.AddrA+":2222", 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := []byte("from the aircraft")
	c.Write(msg)
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != string(msg) {
		t.Fatalf("echo %q, %v", got, err)
	}
}

func TestHalfCloseTwoPEPs(t *testing.T) {
	needsBed(t)
	b := newBed(t, testOpts, "pepd", "pepd")
	ln := b.listen(t, 5002)
	done := make(chan error, 1)
	go func() {
		c, err := ln.AcceptTCP()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		req, err := io.ReadAll(c) // returns at the client's FIN
		if err != nil {
			done <- err
			return
		}
		time.Sleep(200 * time.Millisecond)
		_, err = c.Write(append([]byte("reply to "), req...))
		done <- err
	}()
	c, err := b.dial(t, 5002)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("question"))
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "reply to question" {
		t.Fatalf("client got %q, %v", got, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// readUntilErr reads until an error; a clean EOF is followed by a write
// that must then fail.
func readUntilErr(c *net.TCPConn) error {
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.Copy(io.Discard, c)
	if err == nil {
		time.Sleep(200 * time.Millisecond)
		_, err = c.Write([]byte("x"))
	}
	return err
}

func TestResetPropagatesTwoPEPs(t *testing.T) {
	needsBed(t)
	for _, who := range []string{"server", "client"} {
		t.Run(who+" resets", func(t *testing.T) {
			b := newBed(t, testOpts, "pepd", "pepd")
			c, s := b.greetedPair(t, 5003)
			victim, aborter := c, s
			if who == "client" {
				victim, aborter = s, c
			}
			start := time.Now()
			aborter.SetLinger(0)
			aborter.Close()
			if err := readUntilErr(victim); !isReset(err) {
				t.Fatalf("want reset at the other end, got %v", err)
			}
			t.Logf("reset reached the other end after %v", time.Since(start))
			for _, n := range b.nodes {
				waitStats(t, n, "a propagated reset", func(s snapshot) bool { return s.ResetsPropagated == 1 })
			}
		})
	}
}

// TestRefusedUpstream: no server on the port; the client must get a reset
// quickly, not a connection that hangs.
func TestRefusedUpstream(t *testing.T) {
	needsBed(t)
	b := newBed(t, testOpts, "pepd", "pepd")
	start := time.Now()
	c, err := b.dial(t, 5999)
	if err == nil {
		err = readUntilErr(c)
	}
	took := time.Since(start)
	if !isReset(err) && !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("want reset or refusal, got %v", err)
	}
	if took > 2*time.Second {
		t.Fatalf("reset took %v", took)
	}
	t.Logf("client saw %v after %v", err, took)
	// PEP B's upstream was refused; it reset PEP A's upstream leg, and
	// PEP A passed the reset on to the client. (If the reset reaches PEP
	// A before its connect() reports success, A sees a failed connect.)
	waitStats(t, b.nodes[1], "a failed upstream connect", func(s snapshot) bool { return s.ConnectFailed == 1 })
	waitStats(t, b.nodes[0], "a propagated reset", func(s snapshot) bool { return s.ResetsPropagated+s.ConnectFailed == 1 })
}

func TestNonePassesTraffic(t *testing.T) {
	needsBed(t)
	b := newBed(t, "", "none", "none")
	bulk(t, b, 4<<20)
	for _, n := range b.nodes {
		if s := stats(t, n); s.Splitting || s.ConnectionsSplit != 0 || s.Name != "none" {
			t.Fatalf("none stats %+v", s)
		}
	}
}

// ruleState captures everything interception touches in a namespace.
func ruleState(t *testing.T, ns string) string {
	t.Helper()
	var parts []string
	for _, cmd := range [][]string{
		{"nft", "list", "ruleset"},
		{"ip", "rule", "show"},
		{"ip", "route", "show", "table", "all"},
		{"cat", "/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv4/conf/all/send_redirects"},
	} {
		out, err := netns.Exec(ns, cmd...)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, out)
	}
	return strings.Join(parts, "\n--\n")
}

func TestStopLeavesNoRules(t *testing.T) {
	needsBed(t)
	chain, err := netns.New(1)
	if err != nil {
		t.Fatal(err)
	}
	defer chain.Close()
	n := &netns.PEPNode{NS: chain.PEPs[0], Adapter: adapterPath("pepd"), StateDir: t.TempDir(), Role: "a", BinDir: binDir, Opts: testOpts}
	defer n.Kill()
	before := ruleState(t, n.NS)
	if _, stderr, err := n.Call("start"); err != nil {
		t.Fatalf("start: %v: %s", err, stderr)
	}
	if out, _, err := n.Call("health"); err != nil {
		t.Fatalf("health after start: %v: %s", err, out)
	}
	during := ruleState(t, n.NS)
	if during == before {
		t.Fatal("start installed no rules")
	}
	// A crashed daemon (no stop) must not leave start with duplicate rules.
	n.Kill()
	time.Sleep(200 * time.Millisecond)
	if _, stderr, err := n.Call("start"); err != nil {
		t.Fatalf("start after crash: %v: %s", err, stderr)
	}
	if again := ruleState(t, n.NS); again != during {
		t.Fatalf("rules after crash+start differ:\nfirst:\n%s\nsecond:\n%s", during, again)
	}
	pid := pidOf(n)
	for i := 0; i < 2; i++ { // stop is idempotent
		if _, stderr, err := n.Call("stop"); err != nil {
			t.Fatalf("stop #%d: %v: %s", i+1, err, stderr)
		}
	}
	if pid == "" || running(pid) {
		t.Fatalf("pepd (pid %q) not stopped", pid)
	}
	if after := ruleState(t, n.NS); after != before {
		t.Fatalf("rules left after stop:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if _, _, err := n.Call("health"); err == nil {
		t.Fatal("health succeeds after stop")
	}
	if s := stats(t, n); s.Name != "pepd" {
		t.Fatalf("stats after stop: %+v", s)
	}
}

// TestStartErrors: bad configuration gives exactly one clear line.
func TestStartErrors(t *testing.T) {
	needsBed(t)
	chain, err := netns.New(1)
	if err != nil {
		t.Fatal(err)
	}
	defer chain.Close()
	tests := []struct {
		name, adapter, opts, bin, want string
		lanDev                         string
	}{
		{name: "missing port", adapter: "pepd", bin: binDir, lanDev: "nosuch0", want: "interface 'nosuch0' not found"},
		{"unknown option", "pepd", "bogus=1", binDir, `unknown option "bogus"`, ""},
		{"unknown cc", "pepd", "cc=nosuchcc", binDir, `congestion control "nosuchcc" not offered`, ""},
		{"missing binary", "pepd", "", "/nonexistent/bin", "/nonexistent/bin/pepd", ""},
		{"none with options", "none", "cc=cubic", binDir, "unknown option 'cc'", ""},
		{"bad port", "pepd", "port=0", binDir, "option port", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &netns.PEPNode{NS: chain.PEPs[0], Adapter: adapterPath(tt.adapter), StateDir: t.TempDir(), BinDir: tt.bin, Opts: tt.opts, Role: "a", LANDev: tt.lanDev}
			defer n.Call("stop")
			_, stderr, err := n.Call("start")
			if err == nil {
				t.Fatal("start succeeded")
			}
			lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], tt.want) {
				t.Fatalf("stderr %q: want one line containing %q", stderr, tt.want)
			}
			// A failed start leaves nothing behind.
			if rules, _ := netns.Exec(n.NS, "nft", "list", "ruleset"); strings.TrimSpace(rules) != "" {
				t.Fatalf("rules left after failed start: %s", rules)
			}
			if _, _, err := n.Call("health"); err == nil && tt.adapter != "none" {
				t.Fatal("healthy after failed start")
			}
		})
	}
}

// echoServer accepts on ln and echoes every connection until it closes.
func echoServer(ln *net.TCPListener) {
	for {
		c, err := ln.AcceptTCP()
		if err != nil {
			return
		}
		go func() {
			io.Copy(c, c)
			c.Close()
		}()
	}
}

// ping writes msg on c and expects it echoed.
func ping(t *testing.T, c *net.TCPConn, msg string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
		t.Fatalf("echo %q, %v", buf, err)
	}
	c.SetDeadline(time.Time{})
}

// pinged opens n connections to the echo server on port 7 through the chain,
// each checked with an echo of msg, and returns them still open.
func pinged(t *testing.T, b *bed, n int, msg string) []*net.TCPConn {
	t.Helper()
	conns := make([]*net.TCPConn, 0, n)
	for i := 0; i < n; i++ {
		c, err := b.dial(t, 7)
		if err != nil {
			t.Fatal(err)
		}
		ping(t, c, msg)
		conns = append(conns, c)
	}
	return conns
}

func TestOverflowRefuse(t *testing.T) {
	needsBed(t)
	b := newBed(t, testOpts+" max_conns=2 overflow=refuse", "pepd")
	go echoServer(b.listen(t, 7))
	pinged(t, b, 2, "held")
	start := time.Now()
	c, err := b.dial(t, 7)
	if err == nil {
		err = readUntilErr(c)
	}
	if !isReset(err) || time.Since(start) > 2*time.Second {
		t.Fatalf("third connection: want prompt reset, got %v after %v", err, time.Since(start))
	}
}

func TestOverflowPassthrough(t *testing.T) {
	needsBed(t)
	b := newBed(t, testOpts+" max_conns=2 overflow=passthrough", "pepd")
	ln := b.listen(t, 7)
	go echoServer(ln)
	held := pinged(t, b, 2, "held")
	// Full: the third connection crosses the PEP unsplit but works, and
	// as across a bridge, with its TTL intact (pepd's own legs start at
	// the default 64, so a client TTL of 100 marks the unsplit packets).
	if _, err := netns.Exec(b.chain.ClientB, "nft", "add table ip ttlcheck; "+
		"add chain ip ttlcheck in { type filter hook input priority 0; }; "+
		"add rule ip ttlcheck in tcp dport 7 ip ttl 100 counter; "+
		"add rule ip ttlcheck in tcp dport 7 ip ttl 99 counter"); err != nil {
		t.Fatal(err)
	}
	c, err := b.dialTTL(t, 7, 100)
	if err != nil {
		t.Fatal(err)
	}
	ping(t, c, "unsplit")
	c.Close()
	rules, err := netns.Exec(b.chain.ClientB, "nft", "list chain ip ttlcheck in")
	if err != nil {
		t.Fatal(err)
	}
	if intact, decremented := nftPackets(rules, "ip ttl 100"), nftPackets(rules, "ip ttl 99"); intact < 2 || decremented != 0 {
		t.Fatalf("unsplit packets at client B: %d with TTL 100 (want >= 2), %d with TTL 99 (want 0):\n%s", intact, decremented, rules)
	}
	waitStats(t, b.nodes[0], "two split connections and a pause", func(s snapshot) bool {
		return s.ConnectionsSplit == 2 && s.OverflowPauses >= 1
	})
	if msg, _, err := b.nodes[0].Call("health"); err != nil || !strings.Contains(msg, "full") {
		t.Fatalf("health while full: %q, %v", msg, err)
	}
	// Free capacity: pepd listens again and splits new connections.
	for _, h := range held {
		h.Close()
	}
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if raw, _, _ := b.nodes[0].Call("stats"); strings.Contains(raw, `"listening":true`) {
			break
		}
		if time.Now().After(end) {
			t.Fatal("listener never resumed")
		}
	}
	c, err = b.dial(t, 7)
	if err != nil {
		t.Fatal(err)
	}
	ping(t, c, "split again")
	waitStats(t, b.nodes[0], "the new connection split", func(s snapshot) bool { return s.ConnectionsSplit == 3 })
}

func TestIdleTimeout(t *testing.T) {
	needsBed(t)
	b := newBed(t, testOpts+" idle_timeout=1", "pepd")
	go echoServer(b.listen(t, 7))
	c, err := b.dial(t, 7)
	if err != nil {
		t.Fatal(err)
	}
	ping(t, c, "then silence")
	start := time.Now()
	if err := readUntilErr(c); !isReset(err) {
		t.Fatalf("want reset after idling, got %v", err)
	}
	if d := time.Since(start); d < 900*time.Millisecond || d > 4*time.Second {
		t.Fatalf("idle reset after %v, want about 1-2s", d)
	}
}

// TestStopDrainsThenResets: stop waits drain_timeout for an open
// connection, then resets it so the client does not hang, and removes the
// rules.
func TestStopDrainsThenResets(t *testing.T) {
	needsBed(t)
	b := newBed(t, "stats_interval=0.2 drain_timeout=1", "pepd")
	go echoServer(b.listen(t, 7))
	c, err := b.dial(t, 7)
	if err != nil {
		t.Fatal(err)
	}
	ping(t, c, "open across stop")
	start := time.Now()
	if _, stderr, err := b.nodes[0].Call("stop"); err != nil {
		t.Fatalf("stop: %v: %s", err, stderr)
	}
	took := time.Since(start)
	if took < time.Second || took > 5*time.Second {
		t.Fatalf("stop took %v with drain_timeout=1", took)
	}
	if err := readUntilErr(c); !isReset(err) {
		t.Fatalf("want reset after drain timeout, got %v", err)
	}
	var out struct {
		Running bool  `json:"running"`
		Aborted int64 `json:"aborted_at_shutdown"`
	}
	raw, _, _ := b.nodes[0].Call("stats")
	if err := json.Unmarshal([]byte(raw), &out); err != nil || out.Running || out.Aborted != 1 {
		t.Fatalf("final stats %s", raw)
	}
	if rules, _ := netns.Exec(b.nodes[0].NS, "nft", "list", "ruleset"); strings.TrimSpace(rules) != "" {
		t.Fatalf("rules left: %s", rules)
	}
}

// TestHalfCloseTimeout: a client that sent its FIN and a server that
// neither answers nor closes are both reset after half_close_timeout.
func TestHalfCloseTimeout(t *testing.T) {
	needsBed(t)
	b := newBed(t, testOpts+" half_close_timeout=1", "pepd")
	ln := b.listen(t, 7)
	srv := make(chan *net.TCPConn, 1)
	go func() {
		c, err := ln.AcceptTCP()
		if err != nil {
			srv <- nil
			return
		}
		io.ReadAll(c) // up to the client's FIN, then stay silent
		srv <- c
	}()
	c, err := b.dial(t, 7)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("bye"))
	c.CloseWrite()
	s := <-srv
	if s == nil {
		t.Fatal("accept failed")
	}
	defer s.Close()
	start := time.Now()
	if err := readUntilErr(c); !isReset(err) {
		t.Fatalf("client: want reset, got %v", err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("reset after %v", d)
	}
	s.SetWriteDeadline(time.Now().Add(3 * time.Second))
	var err2 error
	for i := 0; i < 50 && err2 == nil; i++ {
		_, err2 = s.Write([]byte("late"))
		time.Sleep(20 * time.Millisecond)
	}
	if !isReset(err2) {
		t.Fatalf("server: want reset, got %v", err2)
	}
}

// TestResetStorm: many connections aborted at once by the clients; pepd
// must end every relay, keep running and still split new connections.
func TestResetStorm(t *testing.T) {
	needsBed(t)
	b := newBed(t, testOpts, "pepd", "pepd")
	go echoServer(b.listen(t, 7))
	const n = 300
	conns := pinged(t, b, n, "x")
	for _, c := range conns {
		go func() {
			c.SetLinger(0)
			c.Close()
		}()
	}
	for _, nd := range b.nodes {
		waitStats(t, nd, "all relays ended", func(s snapshot) bool {
			return s.ConnectionsActive == 0 && s.ConnectionsSplit == n
		})
	}
	c, err := b.dial(t, 7)
	if err != nil {
		t.Fatal(err)
	}
	ping(t, c, "still alive")
}

// TestConnectTimeout: the server host silently drops the SYNs; the
// client is reset once connect_timeout expires, not left hanging.
func TestConnectTimeout(t *testing.T) {
	needsBed(t)
	b := newBed(t, testOpts+" connect_timeout=1", "pepd")
	if _, err := netns.Exec(b.chain.ClientB, "nft", "add table ip blackhole; add chain ip blackhole in { type filter hook input priority 0; }; add rule ip blackhole in tcp dport 81 drop"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c, err := b.dial(t, 81)
	if err == nil {
		err = readUntilErr(c)
	}
	took := time.Since(start)
	if !isReset(err) {
		t.Fatalf("want reset, got %v after %v", err, took)
	}
	if took < 900*time.Millisecond || took > 3*time.Second {
		t.Fatalf("reset after %v, want about connect_timeout=1s", took)
	}
	waitStats(t, b.nodes[0], "a failed connect", func(s snapshot) bool { return s.ConnectFailed == 1 })
}

// ssLine returns the `ss -tinm` entry (both lines) of the PEP socket whose
// local address is local and peer is peer.
func ssLine(t *testing.T, ns, local, peer string) string {
	t.Helper()
	out, err := netns.Exec(ns, "ss", "-tinmH", "state", "established")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) >= 4 && f[2] == local && f[3] == peer && i+1 < len(lines) {
			return l + " " + lines[i+1]
		}
	}
	t.Fatalf("no socket %s -> %s in:\n%s", local, peer, out)
	return ""
}

// TestWANTuning: WAN-facing sockets get the WAN congestion control, MSS
// and BDP buffer; LAN-facing ones the LAN settings.
func TestWANTuning(t *testing.T) {
	needsBed(t)
	// 8 Mbit/s x 600 ms x 2 = 1.2 MB (newBed passes 100 Mbit/s, 10 ms:
	// 100e6/8 x 0.01 x 2 = 250 kB, so set the buffer explicitly too).
	b := newBed(t, testOpts+" cc=bbr lan_cc=reno mss=1200 wan_buf=1200000", "pepd")
	go echoServer(b.listen(t, 7))
	c, err := b.dial(t, 7)
	if err != nil {
		t.Fatal(err)
	}
	ping(t, c, "tuned?")
	client := c.LocalAddr().String()
	server := netns.AddrB + ":7"
	ns := b.nodes[0].NS
	lanSock := ssLine(t, ns, server, client) // accepted from client A: LAN-facing
	wanSock := ssLine(t, ns, client, server) // upstream towards B: WAN-facing
	t.Logf("WAN-facing: %s", wanSock)
	t.Logf("LAN-facing: %s", lanSock)
	if !strings.Contains(wanSock, " bbr ") || !strings.Contains(lanSock, " reno ") {
		t.Fatalf("congestion control:\nWAN %s\nLAN %s", wanSock, lanSock)
	}
	if !strings.Contains(wanSock, "rb2400000") || !strings.Contains(wanSock, "tb2400000") {
		t.Fatalf("WAN buffers (kernel doubles 1.2 MB): %s", wanSock)
	}
	if strings.Contains(lanSock, "rb2400000") {
		t.Fatalf("LAN socket got the WAN buffer: %s", lanSock)
	}
	if !strings.Contains(wanSock, "mss:1200") && !strings.Contains(wanSock, "mss:1188") {
		t.Fatalf("WAN MSS: %s", wanSock)
	}
}

// TestUDPUntouched: only TCP is intercepted; UDP (e.g. Saratoga) crosses
// the PEPs as plain bridged traffic, with the sender's address.
func TestUDPUntouched(t *testing.T) {
	needsBed(t)
	b := newBed(t, testOpts, "pepd", "pepd")
	var srv *net.UDPConn
	if err := netns.Do(b.chain.ClientB, func() (err error) {
		srv, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(netns.AddrB), Port: 7542})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var cl *net.UDPConn
	if err := netns.Do(b.chain.ClientA, func() (err error) {
		cl, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.ParseIP(netns.AddrB), Port: 7542})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	buf := make([]byte, 64)
	srv.SetReadDeadline(time.Now().Add(5 * time.Second))
	for i := 0; ; i++ {
		cl.Write([]byte("saratoga"))
		srv.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		n, from, err := srv.ReadFromUDP(buf)
		if err == nil {
			if string(buf[:n]) != "saratoga" || !from.IP.Equal(net.ParseIP(netns.AddrA)) {
				t.Fatalf("got %q from %v", buf[:n], from)
			}
			break
		}
		if i == 5 {
			t.Fatalf("no datagram: %v", err)
		}
	}
	for _, n := range b.nodes {
		if s := stats(t, n); s.ConnectionsSplit != 0 {
			t.Fatalf("UDP counted as split: %+v", s)
		}
	}
}

// TestKeepAliveFindsVanishedPeer: client A disappears without a trace
// (its reset is dropped, and it answers nothing); pepd's keep-alive on the
// client leg times out and the server gets a reset instead of an
// established connection forever.
func TestKeepAliveFindsVanishedPeer(t *testing.T) {
	needsBed(t)
	b := newBed(t, testOpts+" keepalive=1", "pepd")
	c, s := b.greetedPair(t, 7)
	if _, err := netns.Exec(b.chain.ClientA, "nft", "add table ip cut; add chain ip cut out { type filter hook output priority 0; policy drop; }; add chain ip cut in { type filter hook input priority 0; policy drop; }"); err != nil {
		t.Fatal(err)
	}
	abort(c)
	start := time.Now()
	s.SetReadDeadline(time.Now().Add(15 * time.Second))
	_, err := io.Copy(io.Discard, s)
	if !isReset(err) {
		t.Fatalf("server: want reset once keep-alive gives up, got %v", err)
	}
	t.Logf("server reset %v after the client vanished", time.Since(start))
}

func abort(c *net.TCPConn) {
	c.SetLinger(0)
	c.Close()
}

// TestWorkersHoldConnections runs each pepd of a pair as two worker
// processes sharing the TPROXY ports: connections spread over both,
// stats and the connection log are summed, and a worker that dies ends
// its pepd loudly.
func TestWorkersHoldConnections(t *testing.T) {
	needsBed(t)
	b := newBed(t, testOpts+" workers=2", "pepd", "pepd")
	bulk(t, b, 1<<20)
	go echoServer(b.listen(t, 7))
	const n = 60
	conns := pinged(t, b, n, "held")
	for _, nd := range b.nodes {
		s := waitStats(t, nd, "all connections active", func(s snapshot) bool { return s.ConnectionsActive == n })
		if s.Workers != 2 || len(s.WorkerPIDs) != 2 {
			t.Fatalf("%s: workers %d pids %v, want 2", nd.NS, s.Workers, s.WorkerPIDs)
		}
		for i := 0; i < 2; i++ {
			raw, err := os.ReadFile(filepath.Join(nd.StateDir, "workers", fmt.Sprint(i), "stats.json"))
			if err != nil {
				t.Fatal(err)
			}
			var ws snapshot
			if err := json.Unmarshal(raw, &ws); err != nil {
				t.Fatal(err)
			}
			// 60 flows all hashed to one worker: chance 2^-59.
			if ws.ConnectionsActive == 0 || ws.ConnectionsActive == n {
				t.Fatalf("%s worker %d holds %d of %d connections: not spread", nd.NS, i, ws.ConnectionsActive, n)
			}
		}
	}
	for _, c := range conns {
		c.Close()
	}
	a := b.nodes[0]
	waitStats(t, a, "connections closed", func(s snapshot) bool { return s.ConnectionsActive == 0 && s.ConnectionsSplit == n+1 })
	// Records of both workers in one file, whole lines, unique ids.
	var ids map[uint64]bool
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		raw, err := os.ReadFile(filepath.Join(a.StateDir, "conns.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		ids = map[uint64]bool{}
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			var r struct {
				ID uint64 `json:"id"`
			}
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("connection log line %q: %v", line, err)
			}
			ids[r.ID] = true
		}
		if len(ids) == n+1 || time.Now().After(end) {
			break
		}
	}
	if len(ids) != n+1 {
		t.Fatalf("%d distinct connection ids in the log, want %d", len(ids), n+1)
	}
	// Kill one worker: the whole pepd stops and says why.
	s := stats(t, a)
	if err := syscall.Kill(s.WorkerPIDs[1], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s = waitStats(t, a, "the failure", func(s snapshot) bool { return !s.Running })
	if !strings.Contains(s.Error, fmt.Sprintf("worker 1 (pid %d) exited: signal: killed", s.WorkerPIDs[1])) {
		t.Fatalf("error %q", s.Error)
	}
	if msg, _, err := a.Call("health"); err == nil {
		t.Fatalf("health after a worker died: %q, want failure", msg)
	}
	for end := time.Now().Add(5 * time.Second); running(fmt.Sprint(s.WorkerPIDs[0])); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("worker 0 (pid %d) still running after its sibling died", s.WorkerPIDs[0])
		}
	}
}

// TestBERDefaults: the adapter passes pepd the options as given, whatever
// the link's BER (satbed's model adds cc=bbr buffer_factor=8 on a lossy
// link, satbed/model/peps.py, so config.json shows them).
func TestBERDefaults(t *testing.T) {
	needsBed(t)
	tests := []struct {
		ber, opts, wantCC, wantFactor string
	}{
		{ber: "0", wantCC: "", wantFactor: "2"},
		{ber: "1e-5", wantCC: "", wantFactor: "2"},
		{ber: "1e-5", opts: "cc=bbr buffer_factor=8", wantCC: "bbr", wantFactor: "8"},
		{ber: "1e-5", opts: "buffer_factor=3 cc=cubic", wantCC: "cubic", wantFactor: "3"},
	}
	avail, err := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	if err != nil || !strings.Contains(string(avail), "bbr") {
		t.Skip("kernel offers no bbr")
	}
	chain, err := netns.New(1)
	if err != nil {
		t.Fatal(err)
	}
	defer chain.Close()
	for _, tt := range tests {
		n := &netns.PEPNode{NS: chain.PEPs[0], Adapter: adapterPath("pepd"), StateDir: t.TempDir(), Role: "a",
			BinDir: binDir, RateBps: 8_000_000, RTTms: 600, BER: tt.ber, Opts: strings.TrimSpace(testOpts + " " + tt.opts)}
		if _, stderr, err := n.Call("start"); err != nil {
			t.Fatalf("BER %s %q: start: %v: %s", tt.ber, tt.opts, err, stderr)
		}
		raw, _, _ := n.Call("stats")
		n.Call("stop")
		n.Kill()
		var s struct {
			Options map[string]string `json:"options"`
		}
		if err := json.Unmarshal([]byte(raw), &s); err != nil {
			t.Fatalf("stats %q: %v", raw, err)
		}
		if s.Options["cc"] != tt.wantCC || s.Options["buffer_factor"] != tt.wantFactor {
			t.Errorf("BER %s %q: cc %q buffer_factor %q, want %q %q", tt.ber, tt.opts, s.Options["cc"], s.Options["buffer_factor"], tt.wantCC, tt.wantFactor)
		}
	}
}

// holdSYNs makes client B drop SYNs to port for d, so the first upstream
// SYN goes unanswered and the server answers the retransmission (1 s on).
func holdSYNs(t *testing.T, b *bed, port int, d time.Duration) {
	t.Helper()
	rule := fmt.Sprintf("add table ip hold; add chain ip hold in { type filter hook input priority 0; }; add rule ip hold in tcp dport %d tcp flags & (syn|ack) == syn drop", port)
	if _, err := netns.Exec(b.chain.ClientB, "nft", rule); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(d, func() { netns.Exec(b.chain.ClientB, "nft", "delete table ip hold") })
}

// TestHandshakeModes: with handshake=end-to-end the client's connect
// completes only when the server's does (here the server answers the
// pepd's second SYN, 1 s after the first), while data still goes through
// the split connection; the local handshake completes at once.
func TestHandshakeModes(t *testing.T) {
	needsBed(t)
	for _, c := range []struct {
		mode     string
		min, max time.Duration
	}{
		{"local", 0, 500 * time.Millisecond},
		{"end-to-end", 900 * time.Millisecond, 3 * time.Second},
	} {
		t.Run(c.mode, func(t *testing.T) {
			b := newBed(t, testOpts+" handshake="+c.mode, "pepd")
			ln := b.listen(t, 5002)
			go echoServer(ln)
			holdSYNs(t, b, 5002, 300*time.Millisecond)
			start := time.Now()
			conn, err := b.dial(t, 5002)
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			if took < c.min || took > c.max {
				t.Fatalf("connect took %v, want %v..%v", took, c.min, c.max)
			}
			t.Logf("connect took %v", took)
			ping(t, conn, "through the split")
			waitStats(t, b.nodes[0], "one split connection carrying the echo", func(s snapshot) bool {
				return s.ConnectionsSplit == 1 && s.BytesLanToWan > 0 && s.BytesWanToLan > 0
			})
			bulk(t, b, 4<<20) // SHA-256 checked, the client's own address seen by the server
		})
	}
}

// TestEndToEndRefused: a refused port through pepd in end-to-end mode is
// refused to the client (a reset to its SYN, so connect fails) only when
// the server's refusal came back, and no connection is split.
func TestEndToEndRefused(t *testing.T) {
	needsBed(t)
	b := newBed(t, testOpts+" handshake=end-to-end", "pepd")
	holdSYNs(t, b, 5999, 300*time.Millisecond)
	start := time.Now()
	_, err := b.dial(t, 5999)
	took := time.Since(start)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("want connection refused at connect, got %v after %v", err, took)
	}
	if took < 900*time.Millisecond || took > 3*time.Second {
		t.Fatalf("refused after %v, want after the server's answer (~1 s)", took)
	}
	t.Logf("refused after %v", took)
	// >= 1: the client's own SYN retransmission (also at 1 s) may cross
	// the refusal and be refused again, as it would be end to end.
	s := waitStats(t, b.nodes[0], "a failed upstream connect", func(s snapshot) bool { return s.ConnectFailed >= 1 })
	if s.ConnectionsSplit != 0 || s.ConnectionsActive != 0 {
		t.Fatalf("a refused connection was split: %+v", s)
	}
	log, err := os.ReadFile(filepath.Join(b.nodes[0].StateDir, "conns.jsonl"))
	if err != nil || !strings.Contains(string(log), `"refused_upstream"`) {
		t.Fatalf("connection log %q (%v) has no refused_upstream record", log, err)
	}
}

// TestEndToEndStopLeavesNoRules: the queue rules go with the rest.
func TestEndToEndStopLeavesNoRules(t *testing.T) {
	needsBed(t)
	chain, err := netns.New(1)
	if err != nil {
		t.Fatal(err)
	}
	defer chain.Close()
	n := &netns.PEPNode{NS: chain.PEPs[0], Adapter: adapterPath("pepd"), StateDir: t.TempDir(), Role: "a", BinDir: binDir,
		Opts: testOpts + " handshake=end-to-end"}
	defer n.Kill()
	before := ruleState(t, n.NS)
	if _, stderr, err := n.Call("start"); err != nil {
		t.Fatalf("start: %v: %s", err, stderr)
	}
	if during := ruleState(t, n.NS); !strings.Contains(during, "queue") || !strings.Contains(during, "reject with tcp reset") {
		t.Fatalf("no SYN queue or reset rule:\n%s", during)
	}
	if _, stderr, err := n.Call("stop"); err != nil {
		t.Fatalf("stop: %v: %s", err, stderr)
	}
	if after := ruleState(t, n.NS); after != before {
		t.Fatalf("rules left after stop:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}
