package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"satbed/pep/options"
	"satbed/pep/server"
	"satbed/pep/stats"
)

// workersDir holds one directory per worker (its pepd.ready and
// stats.json) inside the state directory.
const workersDir = "workers"

func workerDir(stateDir string, i int) string {
	return filepath.Join(stateDir, workersDir, strconv.Itoa(i))
}

// parseWorker reads the internal -worker flag, "I/N".
func parseWorker(spec string) (i, n int, err error) {
	a, b, ok := strings.Cut(spec, "/")
	i, erri := strconv.Atoi(a)
	n, errn := strconv.Atoi(b)
	if !ok || erri != nil || errn != nil || n < 2 || n > options.MaxWorkers || i < 0 || i >= n {
		return 0, 0, fmt.Errorf("-worker %q: want I/N with 0 <= I < N, 2 <= N <= %d", spec, options.MaxWorkers)
	}
	return i, n, nil
}

// workerCount resolves the workers option: an explicit count, or for
// auto (0) as many processes as the open-file limit needs to hold
// maxConns split connections.
func workerCount(opt, maxConns int, limit uint64) int {
	if opt > 0 {
		return opt
	}
	per := connsAllowed(limit)
	return min((maxConns+per-1)/per, options.MaxWorkers)
}

// workerShare is the part of maxConns one of n workers may hold. The
// kernel spreads connections over the workers by a hash of the 4-tuple,
// so shares fill unevenly: with overflow=passthrough a full worker stops
// listening and the others take the new connections until every one is
// full; with overflow=refuse a full worker refuses while others may
// still have room.
func workerShare(maxConns, n int) int {
	return (maxConns + n - 1) / n
}

// worker is one child process of a supervising pepd.
type worker struct {
	cmd  *exec.Cmd
	dir  string
	last *lastLine
	done chan struct{} // closed once the process has exited and err is set
	err  error
	snap stats.Snapshot // last stats read from it
}

func (w *worker) exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// lastLine passes a worker's stderr on to pepd's and remembers its last
// line: the reason a worker gave up, for the adapter's one-line error.
type lastLine struct {
	w    io.Writer
	mu   sync.Mutex
	line string
}

func (l *lastLine) Write(p []byte) (int, error) {
	l.mu.Lock()
	if s := strings.TrimSpace(string(p)); s != "" {
		l.line = s[strings.LastIndexByte(s, '\n')+1:]
	}
	l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lastLine) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.line
}

// supervise runs n workers (this program again, with -worker i/n) that
// listen on the same ports with SO_REUSEPORT, each with its own open-file
// limit, and stands in for them towards the adapter: it writes the ready
// file once all of them listen, sums their statistics into stats.json
// every stats interval and passes SIGTERM on (each worker drains its own
// connections). A worker that exits on its own ends the whole pepd, with
// the reason in the log and in stats.json: its connections are gone
// already, and a PEP quietly running at reduced capacity would skew the
// measurement it is part of. It returns the exit status.
func supervise(c config, n int, logger *log.Logger) int {
	// The workers' parent-death signal belongs to the thread that
	// started them: keep this goroutine on one thread for good.
	runtime.LockOSThread()
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "pepd: own executable: %v\n", err)
		return 1
	}
	base := filepath.Join(c.stateDir, workersDir)
	if err := os.RemoveAll(base); err != nil {
		fmt.Fprintf(os.Stderr, "pepd: stale worker files: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	start := time.Now()
	exits := make(chan int, n)
	ws := make([]*worker, 0, n)
	// Shutting down takes the workers' drain plus the 5 s their resets
	// may take; the adapter kills pepd 10 s after the drain bound.
	grace := c.opts.DrainTimeout + 7*time.Second
	for i := range n {
		w := &worker{dir: workerDir(c.stateDir, i), last: &lastLine{w: os.Stderr}, done: make(chan struct{})}
		w.cmd = exec.Command(exe, append(slices.Clone(os.Args[1:]), "-worker", fmt.Sprintf("%d/%d", i, n))...)
		w.cmd.Stdout, w.cmd.Stderr = os.Stdout, w.last
		// A worker must not outlive a supervisor killed outright.
		w.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := w.cmd.Start(); err != nil {
			stopWorkers(ws, grace)
			fmt.Fprintf(os.Stderr, "pepd: start worker %d: %v\n", i, err)
			return 1
		}
		ws = append(ws, w)
		go func() {
			w.err = w.cmd.Wait()
			close(w.done)
			exits <- i
		}()
	}
	for !allReady(ws) {
		select {
		case i := <-exits:
			stopWorkers(ws, grace)
			fmt.Fprintf(os.Stderr, "pepd: worker %d of %d did not start: %s\n", i, n, reason(ws[i]))
			return 1
		case <-ctx.Done():
			stopWorkers(ws, grace)
			return 0
		case <-time.After(20 * time.Millisecond):
		}
	}
	var pids []int
	for _, w := range ws {
		pids = append(pids, w.cmd.Process.Pid)
	}
	agg := aggregator{c: c, ws: ws, pids: pids, start: start}
	if err := agg.write(true, ""); err != nil {
		stopWorkers(ws, grace)
		fmt.Fprintf(os.Stderr, "pepd: %v\n", err)
		return 1
	}
	ready := filepath.Join(c.stateDir, server.ReadyFile)
	if err := os.WriteFile(ready, fmt.Appendf(nil, "%d\n", os.Getpid()), 0o644); err != nil {
		stopWorkers(ws, grace)
		fmt.Fprintf(os.Stderr, "pepd: ready file: %v\n", err)
		return 1
	}
	defer os.Remove(ready)
	logger.Printf("%d workers listening (pids %v), up to %d connections each", n, pids, workerShare(c.opts.MaxConns, n))

	t := time.NewTicker(c.opts.StatsInterval)
	defer t.Stop()
	failure := ""
	for failure == "" && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case i := <-exits:
			failure = fmt.Sprintf("worker %d (pid %d) exited: %s", i, pids[i], reason(ws[i]))
			logger.Printf("%s; stopping the other workers", failure)
		case <-t.C:
			if err := agg.write(true, ""); err != nil {
				logger.Print(err)
			}
		}
	}
	stopWorkers(ws, grace)
	if err := agg.write(false, failure); err != nil {
		logger.Print(err)
	}
	if failure != "" {
		return 1
	}
	return 0
}

// reason says why a worker exited: its exit status and, if it exited by
// itself with an error, its last line (pepd prints the cause last).
func reason(w *worker) string {
	<-w.done
	var ee *exec.ExitError
	if !errors.As(w.err, &ee) || ee.ExitCode() <= 0 {
		return fmt.Sprint(w.err) // killed by a signal, or exited 0 unasked
	}
	line := w.last.String()
	if _, rest, ok := strings.Cut(line, "]: "); ok {
		line = rest
	}
	if line == "" {
		return w.err.Error()
	}
	return fmt.Sprintf("%s (%v)", line, w.err)
}

func allReady(ws []*worker) bool {
	for _, w := range ws {
		if b, err := os.ReadFile(filepath.Join(w.dir, server.ReadyFile)); err != nil || len(bytes.TrimSpace(b)) == 0 {
			return false
		}
	}
	return true
}

// stopWorkers sends SIGTERM to the running workers and waits for them,
// killing those still there after grace.
func stopWorkers(ws []*worker, grace time.Duration) {
	for _, w := range ws {
		if !w.exited() {
			w.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	for _, w := range ws {
		select {
		case <-w.done:
		case <-deadline.C:
			for _, x := range ws {
				if !x.exited() {
					x.cmd.Process.Kill()
				}
			}
			<-w.done
		}
	}
	for _, w := range ws {
		<-w.done
	}
}

// aggregator writes the supervisor's stats.json from the workers' files.
type aggregator struct {
	c     config
	ws    []*worker
	pids  []int
	start time.Time
}

// staleAfter is how old a running worker's stats may get before the
// supervisor stops refreshing stats.json, so that the adapter's health
// check reports the stuck worker as it would a stuck single pepd.
const staleAfter = 10 * time.Second

func (a *aggregator) write(running bool, failure string) error {
	parts := make([]stats.Snapshot, len(a.ws))
	for i, w := range a.ws {
		p := filepath.Join(w.dir, server.StatsFile)
		if s, err := stats.Read(p); err == nil {
			w.snap = s
		}
		if running && !w.exited() {
			if st, err := os.Stat(p); err == nil && time.Since(st.ModTime()) > max(staleAfter, 5*a.c.opts.StatsInterval) {
				return fmt.Errorf("worker %d (pid %d): stats not refreshed for %v; not updating %s",
					i, a.pids[i], time.Since(st.ModTime()).Round(time.Second), server.StatsFile)
			}
		}
		parts[i] = w.snap
	}
	s := stats.Sum(parts)
	wan, lan := legs(a.c)
	s.Name = a.c.name
	s.Splitting = true
	s.Role = a.c.role
	s.PID = os.Getpid()
	s.Running = running
	s.Listening = s.Listening && running
	s.Updated = time.Now().UTC().Format(time.RFC3339Nano)
	s.UptimeS = time.Since(a.start).Seconds()
	s.WanBufferBytes = wan.Buf
	s.LanBufferBytes = lan.Buf
	s.ListenPorts = []int{a.c.opts.Port, a.c.opts.Port + 1}
	s.Options = a.c.opts.Map()
	s.PipeBytesPerDirection = a.c.opts.PipeBytes
	s.OpenFileLimit = parts[0].OpenFileLimit // the same in every worker
	if a.c.opts.ConnLog {
		s.ConnectionLogPath = filepath.Join(a.c.stateDir, server.ConnsFile)
	}
	s.Workers = len(a.ws)
	s.WorkerPIDs = a.pids
	s.BufferPackets, s.BufferLimitBytes, s.AckReserve = parts[0].BufferPackets, parts[0].BufferLimitBytes, parts[0].AckReserve
	s.Error = failure
	return stats.WriteAtomic(filepath.Join(a.c.stateDir, server.StatsFile), s)
}
