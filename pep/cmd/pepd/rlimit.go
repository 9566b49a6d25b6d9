package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// fdReserve is what pepd needs besides two sockets per split connection:
// listeners, log and stats files, the poller, the pipe pool's spares and
// pipes of directions moving data (two descriptors each).
const fdReserve = 256

// raiseFileLimit lifts RLIMIT_NOFILE towards what maxConns split
// connections need. Past the hard limit that takes CAP_SYS_RESOURCE
// (root on a host, not in a default container); without it the soft
// limit goes up to the hard one. It returns the limit in force.
func raiseFileLimit(maxConns int, nrOpenFile string) (uint64, error) {
	want := uint64(2*maxConns + fdReserve)
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("getrlimit NOFILE: %w", err)
	}
	if lim.Cur >= want {
		return lim.Cur, nil
	}
	if lim.Max < want {
		target := want
		if n, err := readUint(nrOpenFile); err == nil && n < target {
			target = n // the kernel's ceiling for any process
		}
		if target > lim.Max && unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: target, Max: target}) == nil {
			return target, nil
		}
	}
	cur := min(want, lim.Max)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: cur, Max: lim.Max}); err != nil {
		return lim.Cur, fmt.Errorf("setrlimit NOFILE %d: %w", cur, err)
	}
	return cur, nil
}

// connsAllowed is how many split connections limit descriptors hold.
func connsAllowed(limit uint64) int {
	if limit < fdReserve+2 {
		return 1
	}
	return int((limit - fdReserve) / 2)
}

func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}
