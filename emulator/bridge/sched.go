package bridge

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// RTBudget is the kernel's real-time bandwidth limit
// (kernel.sched_rt_runtime_us of kernel.sched_rt_period_us): once the
// SCHED_FIFO threads on a CPU have run for RuntimeUs in a period, the kernel
// stops them for the rest of it. With the default 950000 of 1000000 that is a
// stall of up to 50 ms once a second, which a transmit thread busy at
// 1 Gbit/s on a veth (the send runs the receiver's stack inline) reaches.
type RTBudget struct {
	RuntimeUs int64 `json:"rt_runtime_us"` // < 0: no limit
	PeriodUs  int64 `json:"rt_period_us"`
}

// Limited reports whether the kernel throttles real-time threads.
func (b RTBudget) Limited() bool { return b.RuntimeUs >= 0 && b.PeriodUs > 0 }

// Share is the fraction of a CPU real-time threads may use (1 if unlimited).
func (b RTBudget) Share() float64 {
	if !b.Limited() {
		return 1
	}
	return float64(b.RuntimeUs) / float64(b.PeriodUs)
}

// ReadRTBudget reads the limit from /proc/sys/kernel.
func ReadRTBudget() (RTBudget, error) {
	var b RTBudget
	for _, f := range []struct {
		name string
		v    *int64
	}{{"sched_rt_runtime_us", &b.RuntimeUs}, {"sched_rt_period_us", &b.PeriodUs}} {
		data, err := os.ReadFile("/proc/sys/kernel/" + f.name)
		if err != nil {
			return b, fmt.Errorf("RT budget: %w", err)
		}
		if *f.v, err = strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64); err != nil {
			return b, fmt.Errorf("RT budget: %s: %w", f.name, err)
		}
	}
	return b, nil
}

// RTShareOfBudget is the default RTShare: a transmit thread may use half of
// the real-time budget. The kernel counts every real-time thread on a CPU
// against one budget (the other direction, receive loops under
// -rx-rt-priority, real-time work outside satemu), so one thread must stay
// well below it.
const RTShareOfBudget = 0.5

// promoteBelow: a demoted thread returns to SCHED_FIFO once its share is
// below limit/promoteBelow. At 1 Gbit/s a thread at nice -20 uses 31-57%
// of a CPU per 100 ms against 80-90% under SCHED_FIFO (it wakes less often
// and sends more frames per wake-up); with limit/2 (24%) it dipped below
// once in a run, went back to real time and was demoted again.
const promoteBelow = 4

// rtWindow is how often a transmit thread measures its own CPU share.
const rtWindow = 100 * time.Millisecond

// txSched keeps one transmit thread under SCHED_FIFO while its CPU share
// stays below limit, and at nice -20 (SCHED_OTHER) while it is above; back
// to real time once the share falls below a quarter of the limit. A thread about to
// exhaust the kernel's real-time budget is better off ordinary at the
// highest weight (the CFS scheduler still gives it about 99% of a contended
// CPU against nice 0) than stopped for 50 ms.
type txSched struct {
	name     string
	prio     int     // SCHED_FIFO priority; 0 = never real time
	limit    float64 // CPU share that ends real time; 0 = no limit
	warn     func(format string, args ...any)
	rt       bool
	winStart time.Duration // clock at the window's start
	cpuStart time.Duration // the thread's CPU time then
	switches *atomic.Uint64
	realtime *atomic.Bool
	// The thread's CPU time and the class change; the calling thread's
	// own (threadCPU, setRT) except in tests.
	cpu func() time.Duration
	set func(rt bool) bool
}

func newTxSched(name string, prio int, limit float64, warn func(string, ...any), d *Dir) *txSched {
	s := &txSched{name: name, prio: prio, limit: limit, warn: warn, switches: &d.txSwitches, realtime: &d.txRealtime, cpu: threadCPU}
	s.set = func(rt bool) bool {
		if rt {
			return setSched(unix.SCHED_FIFO, s.prio, s.name, s.warn)
		}
		return setSched(unix.SCHED_NORMAL, 0, s.name, s.warn)
	}
	return s
}

// start applies the initial class on the calling (locked) thread: real
// time, or without a priority the ordinary class a busy thread is demoted
// to (nice -20 and a short slice), so a departure still preempts the
// cell's other work on a shared CPU.
func (s *txSched) start(now time.Duration) {
	s.winStart, s.cpuStart = now, s.cpu()
	if s.prio > 0 {
		s.rt = s.set(true)
		s.realtime.Store(s.rt)
		return
	}
	s.set(false)
}

// tick measures the thread's share once per rtWindow and moves it between
// the classes. Called from the transmit loop with the current clock.
func (s *txSched) tick(now time.Duration) {
	if s.prio == 0 || s.limit <= 0 || now-s.winStart < rtWindow {
		return
	}
	cpu := s.cpu()
	share := float64(cpu-s.cpuStart) / float64(now-s.winStart)
	s.winStart, s.cpuStart = now, cpu
	switch {
	case s.rt && share > s.limit:
		if s.set(false) {
			s.rt = false
			if s.switches.Add(1) == 1 && s.warn != nil {
				s.warn("%s: used %.0f%% of a CPU over %v; SCHED_FIFO above %.0f%% would run into the kernel's real-time throttle (sched_rt_runtime_us), which stops it for up to 50 ms a second: nice -20 until its share falls below %.0f%%",
					s.name, share*100, rtWindow, s.limit*100, s.limit/promoteBelow*100)
			}
		}
	case !s.rt && share < s.limit/promoteBelow:
		if s.set(true) {
			s.rt = true
			s.switches.Add(1)
		}
	}
	s.realtime.Store(s.rt)
}

// customSlice is the scheduler slice asked for under SCHED_OTHER: the
// EEVDF scheduler (Linux 6.12+) lets a waking task with a shorter slice
// preempt the running one, so a departure does not wait out another
// thread's default 3 ms slice. Older kernels ignore it.
const customSlice = 100 * time.Microsecond

// setSched puts the calling thread under policy (SCHED_FIFO at prio, or
// SCHED_OTHER at nice -20), warning if that is not permitted.
func setSched(policy, prio int, what string, warn func(string, ...any)) bool {
	attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: uint32(policy), Priority: uint32(prio)}
	if policy == unix.SCHED_NORMAL {
		attr.Nice = -20
		attr.Runtime = uint64(customSlice)
	}
	if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
		if warn != nil {
			warn("%s: scheduling policy %d priority %d not set (%v); it may fall behind under load", what, policy, prio, err)
		}
		return false
	}
	return true
}

// threadCPU is the calling thread's CPU time.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
