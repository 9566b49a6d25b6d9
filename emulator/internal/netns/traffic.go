//go:build linux

package netns

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// WireOverhead is what a UDP payload gains on the wire as satemu counts it
// (Ethernet 14 + IPv4 20 + UDP 8).
const WireOverhead = 42

// ListenUDP opens a UDP socket in ns bound to addr.
func ListenUDP(ns, addr string) (*net.UDPConn, error) {
	var c *net.UDPConn
	err := Do(ns, func() error {
		ua, err := net.ResolveUDPAddr("udp4", addr)
		if err != nil {
			return err
		}
		c, err = net.ListenUDP("udp4", ua)
		return err
	})
	if err == nil {
		_ = c.SetReadBuffer(8 << 20)
		_ = c.SetWriteBuffer(8 << 20)
	}
	return c, err
}

// Sink counts datagrams arriving on a socket.
type Sink struct {
	mu      sync.Mutex
	arrival []time.Time
	size    []int
	seqs    []uint64
}

// RunSink reads c until it is closed. The first 8 payload bytes are taken
// as a sequence number. Arrivals carry the kernel's receive time
// (SO_TIMESTAMPNS), not the time this goroutine got to read them: on a
// loaded machine the reader runs late and in bursts, which would bend every
// rate measured from the arrivals.
func (s *Sink) RunSink(c *net.UDPConn) {
	stamped := enableRxTimestamps(c) == nil
	buf := make([]byte, 65536)
	oob := make([]byte, 128)
	for {
		n, oobn, _, _, err := c.ReadMsgUDP(buf, oob)
		if err != nil {
			return
		}
		now := time.Now()
		if stamped {
			if t, ok := rxTimestamp(oob[:oobn]); ok {
				now = t
			}
		}
		var seq uint64
		if n >= 8 {
			seq = binary.BigEndian.Uint64(buf)
		}
		s.mu.Lock()
		s.arrival = append(s.arrival, now)
		s.size = append(s.size, n)
		s.seqs = append(s.seqs, seq)
		s.mu.Unlock()
	}
}

func enableRxTimestamps(c *net.UDPConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}); err != nil {
		return err
	}
	return serr
}

// rxTimestamp finds the SCM_TIMESTAMPNS control message in oob.
func rxTimestamp(oob []byte) (time.Time, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return time.Time{}, false
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS &&
			len(m.Data) >= int(unsafe.Sizeof(unix.Timespec{})) {
			ts := (*unix.Timespec)(unsafe.Pointer(&m.Data[0]))
			return time.Unix(ts.Unix()), true
		}
	}
	return time.Time{}, false
}

// Count returns the number of datagrams received.
func (s *Sink) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.arrival)
}

// Seqs returns the received sequence numbers in arrival order.
func (s *Sink) Seqs() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]uint64(nil), s.seqs...)
}

// WireRate returns the wire bit rate (payload + WireOverhead) of datagrams
// that arrived in [from, to].
func (s *Sink) WireRate(from, to time.Time) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return wireRate(s.arrival, s.size, from, to)
}

// wireRate is the least-squares slope of the bytes received so far against
// the arrival time. Bytes over the time between the first and the last
// arrival would rest the whole figure on two timestamps, and one of them
// late by 60 ms moves a 3 s window by 2 %; a slope through every arrival
// hardly notices a few late ones.
func wireRate(arrival []time.Time, size []int, from, to time.Time) float64 {
	var n, sumT, sumB, sumTT, sumTB float64
	var t0 time.Time
	var bytes int
	for i, at := range arrival {
		if at.Before(from) || at.After(to) {
			continue
		}
		if n == 0 {
			t0 = at
		}
		bytes += size[i] + WireOverhead
		t := at.Sub(t0).Seconds()
		b := float64(bytes)
		n++
		sumT += t
		sumB += b
		sumTT += t * t
		sumTB += t * b
	}
	if n < 2 {
		return 0
	}
	den := n*sumTT - sumT*sumT
	if den <= 0 {
		return 0
	}
	return 8 * (n*sumTB - sumT*sumB) / den
}

// Blast sends datagrams of payload bytes to dst at rateBps wire rate for
// dur (or until ctx ends) and returns how many it sent. Sequence numbers
// start at 0. Datagrams go out in sendmmsg batches so the sender costs
// little CPU next to the emulator it measures.
func Blast(ctx context.Context, c *net.UDPConn, dst *net.UDPAddr, payload int, rateBps float64, dur time.Duration) (int, error) {
	const batch = 32
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var sa unix.RawSockaddrInet4
	sa.Family = unix.AF_INET
	sa.Port = uint16(dst.Port>>8) | uint16(dst.Port&0xff)<<8
	copy(sa.Addr[:], dst.IP.To4())
	bufs := make([][]byte, batch)
	iovs := make([]unix.Iovec, batch)
	msgs := make([]unix.Mmsghdr, batch)
	for i := range bufs {
		bufs[i] = make([]byte, max(payload, 1))
		iovs[i].Base = &bufs[i][0]
		iovs[i].SetLen(payload)
		msgs[i].Hdr.Name = (*byte)(unsafe.Pointer(&sa))
		msgs[i].Hdr.Namelen = unix.SizeofSockaddrInet4
		msgs[i].Hdr.Iov = &iovs[i]
		msgs[i].Hdr.Iovlen = 1
	}
	start := time.Now()
	bytesPerSec := rateBps / 8
	sent := 0
	for ctx.Err() == nil {
		el := time.Since(start)
		if el >= dur {
			break
		}
		allowed := int(bytesPerSec*el.Seconds()/float64(payload+WireOverhead)) + 1
		if sent >= allowed {
			time.Sleep(100 * time.Microsecond)
			continue
		}
		m := min(allowed-sent, batch)
		for i := 0; i < m; i++ {
			if payload >= 8 {
				binary.BigEndian.PutUint64(bufs[i], uint64(sent+i))
			}
		}
		var n int
		var serr error
		err := rc.Write(func(fd uintptr) bool {
			r, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&msgs[0])), uintptr(m), 0, 0, 0)
			switch errno {
			case 0:
				n = int(r)
			case unix.EAGAIN:
				return false
			case unix.ENOBUFS, unix.EINTR:
				// Full device or interrupted: retry after a pause.
			default:
				serr = errno
			}
			return true
		})
		if err == nil {
			err = serr
		}
		if err != nil {
			return sent, err
		}
		if n == 0 {
			time.Sleep(100 * time.Microsecond)
		}
		sent += n
	}
	return sent, nil
}

// Echo answers every datagram on c with the same bytes until c is closed.
func Echo(c *net.UDPConn) {
	buf := make([]byte, 65536)
	for {
		n, from, err := c.ReadFromUDP(buf)
		if err != nil {
			return
		}
		_, _ = c.WriteToUDP(buf[:n], from)
	}
}

// Probe sends a small timestamped datagram to an echo server every
// interval for dur and returns the round-trip times of the answers.
func Probe(c *net.UDPConn, dst *net.UDPAddr, interval, dur, wait time.Duration) []time.Duration {
	var mu sync.Mutex
	sentAt := map[uint64]time.Time{}
	var rtts []time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			now := time.Now()
			if n < 8 {
				continue
			}
			seq := binary.BigEndian.Uint64(buf)
			mu.Lock()
			if t, ok := sentAt[seq]; ok {
				rtts = append(rtts, now.Sub(t))
				delete(sentAt, seq)
			}
			mu.Unlock()
		}
	}()
	buf := make([]byte, 64)
	start := time.Now()
	for seq := uint64(0); time.Since(start) < dur; seq++ {
		binary.BigEndian.PutUint64(buf, seq)
		mu.Lock()
		sentAt[seq] = time.Now()
		mu.Unlock()
		_, _ = c.WriteToUDP(buf, dst)
		time.Sleep(interval)
	}
	time.Sleep(wait)
	_ = c.SetReadDeadline(time.Now())
	<-done
	mu.Lock()
	defer mu.Unlock()
	return append([]time.Duration(nil), rtts...)
}

// Quantile returns the q-quantile of ds (sorted copy; nearest rank).
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(q * float64(len(s)-1))
	return s[i]
}

// Satemu is a running satemu process in the chain's emulator namespace.
type Satemu struct {
	Cmd      *exec.Cmd
	Control  string
	StatsDir string
	stderr   *os.File
}

// StartSatemu writes cfg to dir, starts bin (with extra flags) in the
// emulator namespace and waits until the control socket answers.
func (c *Chain) StartSatemu(bin, dir string, cfg []byte, extra ...string) (*Satemu, error) {
	cfgPath := filepath.Join(dir, "satemu.json")
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		return nil, err
	}
	s := &Satemu{Control: filepath.Join(dir, "ctl.sock"), StatsDir: filepath.Join(dir, "stats")}
	errf, err := os.Create(filepath.Join(dir, "satemu.stderr"))
	if err != nil {
		return nil, err
	}
	s.stderr = errf
	args := append([]string{"-a", c.EmuA, "-b", c.EmuB, "-config", cfgPath,
		"-control", s.Control, "-stats-dir", s.StatsDir}, extra...)
	s.Cmd = Command(c.Emulator, bin, args...)
	s.Cmd.Stdout, s.Cmd.Stderr = errf, errf
	if err := s.Cmd.Start(); err != nil {
		errf.Close()
		return nil, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := s.Request(`{"op":"get"}`); err == nil {
			return s, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = s.Cmd.Process.Kill()
	_ = s.Cmd.Wait()
	errf.Close()
	msg, _ := os.ReadFile(errf.Name())
	return nil, fmt.Errorf("satemu did not become ready: %s", msg)
}

// Request sends one control request and returns the decoded response.
func (s *Satemu) Request(req string) (map[string]any, error) {
	conn, err := net.DialTimeout("unix", s.Control, time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte(req + "\n")); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(conn).ReadBytes('\n')
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// DirStats fetches one direction's counters through the control socket.
func (s *Satemu) DirStats(dir string) (map[string]any, error) {
	m, err := s.Request(`{"op":"stats"}`)
	if err != nil {
		return nil, err
	}
	st, _ := m["stats"].(map[string]any)
	dirs, _ := st["directions"].(map[string]any)
	d, ok := dirs[dir].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("no stats for %s in %v", dir, m)
	}
	return d, nil
}

// Stop sends SIGTERM (the ip-netns-exec child execs satemu, so the signal
// reaches it) and waits; it returns the exit error, if any.
func (s *Satemu) Stop() error {
	defer s.stderr.Close()
	_ = s.Cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- s.Cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		_ = s.Cmd.Process.Kill()
		<-done
		return errors.New("satemu did not stop within 5 s of SIGTERM")
	}
}
