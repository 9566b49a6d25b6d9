//go:build linux

package main

import (
	"encoding/binary"
	"sync"
	"time"

	"satbed/emulator/internal/netns"
	"satbed/emulator/rawsock"
)

// tap records kernel timestamps of UDP frames with a given port seen on an
// interface, keyed by direction (to or from the port) and the sequence
// number in the first 8 payload bytes. Kernel timestamps make the one-way
// delay independent of how quickly the end-host programs are scheduled.
type tap struct {
	mu   sync.Mutex
	seen map[tapKey]time.Time
	sock *rawsock.Socket
	done chan struct{}
}

type tapKey struct {
	toPort bool
	seq    uint64
}

func openTap(ns, ifname string, port int) (*tap, error) {
	t := &tap{seen: map[tapKey]time.Time{}, done: make(chan struct{})}
	err := netns.Do(ns, func() error {
		s, err := rawsock.Open(ifname, rawsock.Options{KeepOutgoing: true, RcvBuf: 4 << 20, SndBuf: 1 << 16})
		t.sock = s
		return err
	})
	if err != nil {
		return nil, err
	}
	go t.loop(uint16(port))
	return t, nil
}

func (t *tap) loop(port uint16) {
	defer close(t.done)
	buf := make([]byte, 2048)
	for {
		n, age, err := t.sock.Read(buf)
		if err != nil {
			return
		}
		at := time.Now().Add(-age)
		f := buf[:n]
		if n < 14+20+8+8 || binary.BigEndian.Uint16(f[12:]) != 0x0800 || f[23] != 17 {
			continue
		}
		ip := f[14:]
		ihl := int(ip[0]&0x0f) * 4
		if len(ip) < ihl+16 {
			continue
		}
		udp := ip[ihl:]
		sp, dp := binary.BigEndian.Uint16(udp), binary.BigEndian.Uint16(udp[2:])
		if sp != port && dp != port {
			continue
		}
		k := tapKey{toPort: dp == port, seq: binary.BigEndian.Uint64(udp[8:])}
		t.mu.Lock()
		if _, dup := t.seen[k]; !dup {
			t.seen[k] = at
		}
		t.mu.Unlock()
	}
}

func (t *tap) close() map[tapKey]time.Time {
	_ = t.sock.SetReadDeadline(time.Now())
	<-t.done
	t.sock.Close()
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.seen
}

// emulatedRTTs pairs the two taps' records: for each probe, forward delay
// (sender tap -> receiver tap) plus return delay (receiver tap -> sender
// tap), which excludes the echo program's turnaround.
func emulatedRTTs(sender, receiver map[tapKey]time.Time) []time.Duration {
	var out []time.Duration
	for k, t0 := range sender {
		if !k.toPort {
			continue
		}
		t1, ok1 := receiver[k]
		t2, ok2 := receiver[tapKey{false, k.seq}]
		t3, ok3 := sender[tapKey{false, k.seq}]
		if ok1 && ok2 && ok3 {
			out = append(out, t1.Sub(t0)+t3.Sub(t2))
		}
	}
	return out
}
