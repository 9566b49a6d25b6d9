package access

import (
	"net"
	"testing"
	"time"
)

// TestAllowGrantsFromTheBudgetAsItIsNow: Allow waits for data with the
// budget it saw before the wait; a tick that lowers the budget meanwhile
// (the WAN side filled) must bound the grant that follows. Taken from the
// budget as it was, a grant let pepd's WAN side pass its cap by tens of
// kilobytes (250,400 of 217,200 bytes in the suite's access test).
func TestAllowGrantsFromTheBudgetAsItIsNow(t *testing.T) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	src, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	lan, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	defer lan.Close()
	rc, err := lan.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	// A long tick: Allow's wait for data outlasts the test's steps.
	c := NewConn(Config{Tick: 5 * time.Second}, rc, nil, Hooks{})
	c.budget.Store(100_000)
	granted := make(chan int, 1)
	go func() { granted <- c.Allow(64<<10, make(chan struct{})) }()
	// Allow has seen 100,000 and waits for data (nothing is queued). If it
	// has not got that far yet, it sees the lowered budget from the start
	// and the test proves nothing, but cannot fail.
	time.Sleep(200 * time.Millisecond)
	c.still(func() { c.budget.Store(1_000) })
	if _, err := src.Write(make([]byte, 10_000)); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-granted:
		if n > 1_000 {
			t.Errorf("granted %d bytes with 1,000 left in the budget", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Allow never returned")
	}
}
