// Command pepbench measures pepd against plain bridges on an unshaped
// namespace chain clientA - pepA - pepB - clientB: throughput of 1 and N
// flows, connection setup rate, and the memory pepd needs per held
// connection. It prints numbers; it is not a test. Needs root.
//
//	go build -o bin/pepd ./pep/cmd/pepd && go run ./pep/cmd/pepbench
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"satbed/pep/internal/netns"
)

type bench struct {
	chain    *netns.Chain
	adapters string
	binDir   string
	opts     string
	nodes    []*netns.PEPNode // PEPs of the current mode
	srvIn    io.WriteCloser   // commands to the server process
	srvOut   *bufio.Reader    // its answers
}

func main() {
	adapters := flag.String("adapters", "pep/adapters", "directory of the PEP adapters")
	binDir := flag.String("bin", "bin", "directory holding pepd")
	dur := flag.Duration("duration", 5*time.Second, "measurement time per throughput point")
	flows := flag.Int("flows", 100, "flows in the multi-flow throughput point")
	hold := flag.Int("conns", 10000, "concurrent connections to hold through pepd")
	setup := flag.Duration("setup", 3*time.Second, "duration of the setup-rate measurement")
	opts := flag.String("opts", "", "extra pepd options (SATBED_PEP_OPTS)")
	offloads := flag.String("offloads", "off", "port offloads: off (as the testbed sets them), on, or both (each measured, printed side by side)")
	shape := flag.String("shape", "", "if set (e.g. 200mbit), an HTB rate on pepA's WAN port, so the link and not the CPU is the bottleneck")
	holdOnly := flag.Bool("hold-only", false, "run only the hold test (pepd, offloads off)")
	serve := flag.Bool("serve", false, "internal: run the servers (used inside client B's namespace)")
	flag.Parse()
	if *serve {
		if err := runServers(); err != nil {
			fmt.Fprintf(os.Stderr, "pepbench servers: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*adapters, *binDir, *opts, *shape, *offloads, *dur, *flows, *hold, *setup, *holdOnly); err != nil {
		fmt.Fprintf(os.Stderr, "pepbench: %v\n", err)
		os.Exit(1)
	}
}

func run(adapters, binDir, opts, shape, offloads string, dur time.Duration, flows, hold int, setup time.Duration, holdOnly bool) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root")
	}
	// The hold test's client sockets all live in this process.
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	want := uint64(4*hold + 1000)
	if lim.Max < want {
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: want, Max: want}); err == nil {
			lim.Max = want
		}
	}
	// pepd runs as many workers as its limit needs; this process holds
	// the client sockets itself (the servers are another process).
	if capN := int(lim.Max) - 1000; hold > capN {
		fmt.Printf("note: open-file hard limit %d (no CAP_SYS_RESOURCE to raise it) allows this process ~%d client sockets; holding %d instead of %d\n",
			lim.Max, capN, capN, hold)
		hold = capN
	}
	var err error
	if adapters, err = filepath.Abs(adapters); err != nil {
		return err
	}
	if binDir, err = filepath.Abs(binDir); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(binDir, "pepd")); err != nil {
		return fmt.Errorf("pepd binary: %w (go build -o bin/pepd ./pep/cmd/pepd)", err)
	}
	chain, err := netns.New(2)
	if err != nil {
		return err
	}
	defer chain.Close()
	b := &bench{chain: chain, adapters: adapters, binDir: binDir, opts: opts}
	// Enough ports and backlog for the connection tests.
	for _, ns := range []string{chain.ClientA, chain.ClientB} {
		if _, err := netns.Exec(ns, "sysctl", "-qw", "net.ipv4.ip_local_port_range=1024 65000",
			"net.ipv4.tcp_tw_reuse=1", "net.core.somaxconn=65535", "net.ipv4.tcp_max_syn_backlog=65535"); err != nil {
			return err
		}
	}
	for _, pep := range chain.PEPs {
		if _, err := netns.Exec(pep, "sysctl", "-qw", "net.core.somaxconn=65535", "net.ipv4.tcp_max_syn_backlog=65535"); err != nil {
			return err
		}
	}
	if shape != "" {
		// Egress of pepA's WAN port carries A->B data in both modes.
		for _, args := range [][]string{
			{"tc", "qdisc", "add", "dev", netns.WAN, "root", "handle", "1:", "htb", "default", "10"},
			{"tc", "class", "add", "dev", netns.WAN, "parent", "1:", "classid", "1:10", "htb", "rate", shape},
		} {
			if _, err := netns.Exec(chain.PEPs[0], args...); err != nil {
				return err
			}
		}
		fmt.Printf("link shaped to %s (HTB on pepA's WAN port)\n", shape)
	}
	stopServers, err := b.servers()
	if err != nil {
		return err
	}
	defer stopServers()
	if holdOnly {
		if err := chain.SetOffloads(false); err != nil {
			return err
		}
		return b.hold(hold)
	}

	var states []bool
	switch offloads {
	case "off":
		states = []bool{false}
	case "on":
		states = []bool{true}
	case "both":
		states = []bool{false, true}
	default:
		return fmt.Errorf("-offloads %q: want off, on or both", offloads)
	}
	type key struct {
		on   bool
		mode string
	}
	res := map[key]result{}
	for si, on := range states {
		if err := chain.SetOffloads(on); err != nil {
			return err
		}
		for _, mode := range []string{"none", "pepd"} {
			// Setup rate and the hold test depend little on offloads:
			// measured once, in the first state.
			r, err := b.measure(mode, flows, dur, setup, si == 0, hold)
			if err != nil {
				return fmt.Errorf("offloads %s, %s: %w", onOff(on), mode, err)
			}
			res[key{on, mode}] = r
		}
	}
	fmt.Printf("\n%-26s %-10s %10s %10s %6s   %s\n", "offloads", "point", "none", "pepd", "ratio",
		"CPU-s per GB delivered: whole machine none / pepd (of which the pepd processes)")
	for _, on := range states {
		label := "off (as the testbed sets)"
		if on {
			label = "on (sg tx tso gso gro)"
		}
		n, p := res[key{on, "none"}], res[key{on, "pepd"}]
		for i, name := range []string{"1 flow", fmt.Sprintf("%d flows", flows)} {
			fmt.Printf("%-26s %-10s %7.2f Gb %7.2f Gb %6.2f   %.2f / %.2f (%.2f)\n", label, name,
				n.tput[i].bps/1e9, p.tput[i].bps/1e9, p.tput[i].bps/n.tput[i].bps, n.tput[i].cpuPerGB, p.tput[i].cpuPerGB, p.tput[i].pepdPerGB)
		}
	}
	n, p := res[key{states[0], "none"}], res[key{states[0], "pepd"}]
	fmt.Printf("setup rate (offloads %s): none %.0f/s, pepd %.0f/s, ratio %.2f\n", onOff(states[0]), n.setup, p.setup, p.setup/n.setup)
	return nil
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

type point struct {
	bps       float64
	cpuPerGB  float64 // busy CPU-seconds of the whole machine per GB received
	pepdPerGB float64 // CPU-seconds of the pepd processes per GB (0 for bridges)
}

type result struct {
	tput  [2]point // 1 flow, many flows
	setup float64
}

// measure runs the throughput points on mode's PEPs (and, if full, the
// setup rate and for pepd the hold test).
func (b *bench) measure(mode string, flows int, dur, setup time.Duration, full bool, hold int) (r result, err error) {
	// Per-connection logging would measure the disk, not pepd. Short
	// keep-alive: under overload a reset can be dropped, and a leg left
	// established would stall the next point.
	err = b.withPEPs(mode, mergeOpts("conn_log=0 max_conns=50000 keepalive=3", b.opts), func() error {
		var err error
		cpu0 := b.cpuTimes()
		if r.tput[0], err = b.throughput(1, dur); err != nil {
			return err
		}
		if mode == "pepd" {
			cpu1 := b.cpuTimes()
			for i := range cpu1 {
				fmt.Printf("pepd %s CPU during the 1-flow point: user %.2fs sys %.2fs\n",
					b.nodes[i].Role, cpu1[i][0]-cpu0[i][0], cpu1[i][1]-cpu0[i][1])
			}
		}
		if r.tput[1], err = b.throughput(flows, dur); err != nil {
			return err
		}
		fmt.Printf("%-5s 1 flow %8.2f Gbit/s   %d flows %8.2f Gbit/s\n", mode, r.tput[0].bps/1e9, flows, r.tput[1].bps/1e9)
		if !full {
			return nil
		}
		c0 := b.cpuTimes()
		if r.setup, err = b.setupRate(setup, 16); err != nil {
			return err
		}
		fmt.Printf("%-5s setup %.0f conn/s\n", mode, r.setup)
		if mode == "pepd" && r.setup > 0 {
			// CPU per connection does not depend on what else the
			// machine runs, unlike the rate itself.
			c1 := b.cpuTimes()
			for i := range c1 {
				used := c1[i][0] - c0[i][0] + c1[i][1] - c0[i][1]
				fmt.Printf("pepd %s CPU during the setup point: %.0f µs per connection (user %.2fs sys %.2fs)\n",
					b.nodes[i].Role, used/(r.setup*setup.Seconds())*1e6, c1[i][0]-c0[i][0], c1[i][1]-c0[i][1])
			}
		}
		return nil
	})
	if err == nil && full && mode == "pepd" {
		err = b.hold(hold)
	}
	return r, err
}

// hold runs the hold test on fresh pepds with as many worker processes
// as their open-file limit needs for n connections (and 10 % slack: the
// kernel spreads flows over the workers by hash, not evenly).
func (b *bench) hold(n int) error {
	opts := mergeOpts(fmt.Sprintf("conn_log=0 keepalive=3 workers=auto max_conns=%d", n+n/10), b.opts)
	return b.withPEPs("pepd", opts, func() error { return b.holdTest(b.nodes, n) })
}

// withPEPs starts mode's adapter on every PEP with opts, runs f, and
// stops them.
func (b *bench) withPEPs(mode, opts string, f func() error) (err error) {
	nodes, err := b.start(mode, opts)
	b.nodes = nodes
	defer func() {
		for _, n := range nodes {
			if _, stderr, serr := n.Call("stop"); serr != nil && err == nil {
				err = fmt.Errorf("stop: %v: %s", serr, stderr)
			}
			n.Kill()
			os.RemoveAll(n.StateDir)
		}
		b.nodes = nil
	}()
	if err != nil {
		return err
	}
	return f()
}

// mergeOpts joins option strings; a key given later replaces the earlier
// value (pepd itself rejects a key given twice).
func mergeOpts(parts ...string) string {
	var keys []string
	val := map[string]string{}
	for _, p := range parts {
		for _, f := range strings.Fields(p) {
			k, _, _ := strings.Cut(f, "=")
			if _, seen := val[k]; !seen {
				keys = append(keys, k)
			}
			val[k] = f
		}
	}
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = val[k]
	}
	return strings.Join(out, " ")
}

func (b *bench) start(mode, opts string) ([]*netns.PEPNode, error) {
	var nodes []*netns.PEPNode
	for i, ns := range b.chain.PEPs {
		dir, err := os.MkdirTemp("", "pepbench-")
		if err != nil {
			return nodes, err
		}
		n := &netns.PEPNode{NS: ns, Adapter: filepath.Join(b.adapters, mode), StateDir: dir,
			Role: string(rune('a' + i)), BinDir: b.binDir}
		if mode == "pepd" {
			n.Opts = opts
		}
		if _, stderr, err := n.Call("start"); err != nil {
			return nodes, fmt.Errorf("start %s: %v: %s", mode, err, stderr)
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// servers starts this program again inside client B's namespace as the
// server side (a separate process, so client and server sockets do not
// share one open-file limit): a sink on :5001 and an echo-once server on
// :7. The returned function stops it.
func (b *bench) servers() (func(), error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("ip", "netns", "exec", b.chain.ClientB, exe, "-serve")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop := func() {
		stdin.Close()
		cmd.Wait()
	}
	rd := bufio.NewReader(stdout)
	line, err := rd.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		stop()
		return nil, fmt.Errorf("server process did not start: %q %v", line, err)
	}
	b.srvIn, b.srvOut = stdin, rd
	return stop, nil
}

// received asks the server process how many bytes its sink has read.
// Throughput is counted there: counted at the sender, a PEP's buffers
// (megabytes per leg) would be reported as throughput.
func (b *bench) received() (int64, error) {
	if _, err := io.WriteString(b.srvIn, "count\n"); err != nil {
		return 0, err
	}
	line, err := b.srvOut.ReadString('\n')
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(line), 10, 64)
}

// runServers is the -serve mode: serve until stdin closes.
func runServers() error {
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil {
		lim.Cur = lim.Max
		unix.Setrlimit(unix.RLIMIT_NOFILE, &lim)
	}
	sink, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.ParseIP(netns.AddrB), Port: 5001})
	if err != nil {
		return err
	}
	echo, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.ParseIP(netns.AddrB), Port: 7})
	if err != nil {
		return err
	}
	var sunk atomic.Int64
	go func() {
		for {
			c, err := sink.AcceptTCP()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 256<<10)
				for {
					n, err := c.Read(buf)
					sunk.Add(int64(n))
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	go func() {
		for {
			c, err := echo.AcceptTCP()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var one [1]byte
				if _, err := c.Read(one[:]); err != nil {
					return
				}
				c.Write(one[:])
				c.Read(one[:]) // hold until the client closes
			}()
		}
	}()
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		fmt.Println(sunk.Load())
	}
	return nil
}

func (b *bench) dial(port int) (*net.TCPConn, error) {
	var c *net.TCPConn
	err := netns.Do(b.chain.ClientA, func() error {
		conn, err := net.DialTimeout("tcp4", net.JoinHostPort(netns.AddrB, strconv.Itoa(port)), 10*time.Second)
		if err == nil {
			c = conn.(*net.TCPConn)
		}
		return err
	})
	return c, err
}

// throughput runs flows bulk senders A->B and returns bit/s over d after
// a one-second warm-up, with the machine's busy CPU time per GB.
func (b *bench) throughput(flows int, d time.Duration) (point, error) {
	var conns []*net.TCPConn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < flows; i++ {
		c, err := b.dial(5001)
		if err != nil {
			return point{}, err
		}
		conns = append(conns, c)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	buf := make([]byte, 128<<10)
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}()
	}
	time.Sleep(time.Second)
	start, err := b.received()
	if err != nil {
		return point{}, err
	}
	busy0, err := busyCPU()
	if err != nil {
		return point{}, err
	}
	pepd0 := b.cpuTimes()
	t0 := time.Now()
	time.Sleep(d)
	end, err := b.received()
	if err != nil {
		return point{}, err
	}
	got, el := end-start, time.Since(t0)
	busy1, err := busyCPU()
	if err != nil {
		return point{}, err
	}
	pepd1 := b.cpuTimes()
	stop.Store(true)
	for _, c := range conns {
		// A reset discards the megabytes queued in every leg, which
		// would otherwise keep the PEPs busy during the next point.
		c.SetLinger(0)
		c.SetWriteDeadline(time.Now())
	}
	wg.Wait()
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	p := point{bps: float64(got) * 8 / el.Seconds()}
	if got > 0 {
		gb := float64(got) / 1e9
		p.cpuPerGB = (busy1 - busy0) / gb
		// Includes softirq work done inline in pepd's system calls (a
		// send runs the next hop's receive path), but not other jobs.
		for i := range pepd1 {
			p.pepdPerGB += (pepd1[i][0] - pepd0[i][0] + pepd1[i][1] - pepd0[i][1]) / gb
		}
	}
	return p, b.quiesce()
}

// busyCPU returns the CPU-seconds all cores of the machine spent not
// idle since boot (/proc/stat; softirq work of the veths and bridges
// counts here, not in any process).
func busyCPU() (float64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var busy float64
	for i, v := range f[1:] {
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		if i != 3 && i != 4 && i < 8 { // idle, iowait; guest time is already in user
			busy += n
		}
	}
	return busy / 100, nil // USER_HZ
}

// setupRate opens, checks (one byte echoed end to end) and closes
// connections with the given parallelism; returns completed per second.
func (b *bench) setupRate(d time.Duration, workers int) (float64, error) {
	var done atomic.Int64
	var firstErr atomic.Value
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				if err := b.roundTrip(); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return 0, err
	}
	return float64(done.Load()) / d.Seconds(), b.quiesce()
}

// quiesce waits until the running pepds relay nothing, so one
// measurement does not bleed into the next.
func (b *bench) quiesce() error {
	time.Sleep(300 * time.Millisecond)
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		busy := false
		for _, n := range b.nodes {
			out, _, _ := n.Call("stats")
			if a := field(out, "connections_active"); a != "0" && a != "?" {
				busy = true
			}
		}
		if !busy {
			return nil
		}
	}
	// Leave evidence: socket states and a goroutine dump of each pepd.
	for _, n := range b.nodes {
		out, _ := netns.Exec(n.NS, "ss", "-tnoi", "state", "all")
		os.WriteFile(filepath.Join(os.TempDir(), "pepbench-stuck-"+n.Role+".ss"), []byte(out), 0o644)
		if pid, err := os.ReadFile(filepath.Join(n.StateDir, "pepd.pid")); err == nil {
			exec.Command("kill", "-QUIT", strings.TrimSpace(string(pid))).Run()
		}
	}
	time.Sleep(time.Second)
	for _, n := range b.nodes {
		if log, err := os.ReadFile(filepath.Join(n.StateDir, "pepd.log")); err == nil {
			os.WriteFile(filepath.Join(os.TempDir(), "pepbench-stuck-"+n.Role+".log"), log, 0o644)
		}
	}
	return errors.New("pepd connections did not finish within 60s (see pepbench-stuck-* in the temp dir)")
}

func (b *bench) roundTrip() error {
	c, err := b.dial(7)
	if err != nil {
		return err
	}
	defer c.Close()
	return ping(c)
}

func ping(c *net.TCPConn) error {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	var one = [1]byte{'x'}
	if _, err := c.Write(one[:]); err != nil {
		return err
	}
	if _, err := io.ReadFull(c, one[:]); err != nil {
		return fmt.Errorf("echo: %w", err)
	}
	c.SetDeadline(time.Time{})
	return nil
}

// holdTest opens n connections through the pepd pair, checks each end to
// end, and reports the pepds' resident memory growth per connection.
func (b *bench) holdTest(nodes []*netns.PEPNode, n int) error {
	base := make([]int64, len(nodes))
	for i, nd := range nodes {
		rss, err := rssKB(nd)
		if err != nil {
			return err
		}
		base[i] = rss
	}
	conns := make([]*net.TCPConn, n)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	t0 := time.Now()
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				c, err := b.dial(7)
				if err == nil {
					err = ping(c)
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, fmt.Errorf("connection %d: %w", i, err))
					return
				}
				conns[i] = c
			}
		}()
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return err
	}
	opened := time.Since(t0)
	time.Sleep(1500 * time.Millisecond) // a stats refresh
	for i, nd := range nodes {
		rss, err := rssKB(nd)
		if err != nil {
			return err
		}
		out, _, _ := nd.Call("stats")
		var st struct {
			Active  int64 `json:"connections_active"`
			Workers int   `json:"workers"`
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			return fmt.Errorf("pepd %s stats %q: %w", nd.Role, out, err)
		}
		fmt.Printf("pepd %s: %d connections held (stats: %d active, %d workers), RSS of all its processes %d -> %d KB: %.1f KB per connection\n",
			nd.Role, n, st.Active, st.Workers, base[i], rss, float64(rss-base[i])/float64(n))
	}
	fmt.Printf("opened and verified %d connections in %v (%.0f conn/s with 32 parallel openers)\n", n, opened.Round(time.Millisecond), float64(n)/opened.Seconds())
	return nil
}

func field(js, key string) string {
	i := strings.Index(js, `"`+key+`":`)
	if i < 0 {
		return "?"
	}
	rest := js[i+len(key)+3:]
	if j := strings.IndexAny(rest, ",}"); j >= 0 {
		return rest[:j]
	}
	return rest
}

// cpuTimes returns user and system CPU seconds of each running pepd
// (with workers: supervisor and workers together).
func (b *bench) cpuTimes() [][2]float64 {
	out := make([][2]float64, len(b.nodes))
	for i, nd := range b.nodes {
		for _, pid := range pepdPIDs(nd) {
			st, err := os.ReadFile("/proc/" + pid + "/stat")
			if err != nil {
				continue
			}
			// Fields after the parenthesised command: utime and stime are
			// the 12th and 13th, in clock ticks (100 per second on Linux).
			rest := string(st)
			if j := strings.LastIndexByte(rest, ')'); j >= 0 {
				rest = rest[j+2:]
			}
			f := strings.Fields(rest)
			if len(f) > 12 {
				u, _ := strconv.ParseFloat(f[11], 64)
				s, _ := strconv.ParseFloat(f[12], 64)
				out[i][0] += u / 100
				out[i][1] += s / 100
			}
		}
	}
	return out
}

// pepdPIDs returns the pid of nd's pepd and of its children (workers).
func pepdPIDs(nd *netns.PEPNode) []string {
	b, err := os.ReadFile(filepath.Join(nd.StateDir, "pepd.pid"))
	if err != nil {
		return nil
	}
	pid := strings.TrimSpace(string(b))
	pids := []string{pid}
	// Children are listed per thread of the parent.
	tasks, _ := filepath.Glob("/proc/" + pid + "/task/*/children")
	for _, t := range tasks {
		if c, err := os.ReadFile(t); err == nil {
			pids = append(pids, strings.Fields(string(c))...)
		}
	}
	return pids
}

// rssKB is the resident memory of nd's pepd processes, summed.
func rssKB(nd *netns.PEPNode) (int64, error) {
	pids := pepdPIDs(nd)
	if len(pids) == 0 {
		return 0, errors.New("no pepd pid")
	}
	var total int64
	for _, pid := range pids {
		kb, err := procRSS(pid)
		if err != nil {
			return 0, err
		}
		total += kb
	}
	return total, nil
}

func procRSS(pid string) (int64, error) {
	f, err := os.Open("/proc/" + pid + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			return strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	return 0, errors.New("no VmRSS")
}
