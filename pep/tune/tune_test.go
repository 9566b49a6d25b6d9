package tune

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestBDPBuffer(t *testing.T) {
	tests := []struct {
		name   string
		rate   int64
		rtt    float64
		factor float64
		want   int
	}{
		{"global hawk 8M 600ms x2", 8_000_000, 600, 2, 1_200_000},
		{"T1 500ms x2", 1_544_000, 500, 2, 193_000},
		{"zero rtt autotunes", 8_000_000, 0, 2, 0},
		{"zero rate autotunes", 0, 600, 2, 0},
		{"tiny clamps up", 64_000, 10, 1, MinBuf},
		{"huge clamps down", 100_000_000_000, 1000, 4, MaxBuf},
		{"fractional rounds up", 1_000_001, 1000, 1, 125_001},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := BDPBuffer(tt.rate, tt.rtt, tt.factor)
			if got != tt.want {
				t.Fatalf("BDPBuffer(%d, %v, %v) = %d, want %d", tt.rate, tt.rtt, tt.factor, got, tt.want)
			}
		})
	}
}

func TestCheckCC(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "cc")
	if err := os.WriteFile(p, []byte("reno bbr cubic\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	avail, err := AvailableCC(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckCC("bbr", avail); err != nil {
		t.Fatal(err)
	}
	if err := CheckCC("", avail); err != nil {
		t.Fatal(err)
	}
	err = CheckCC("vegas", avail)
	if err == nil || !strings.Contains(err.Error(), "available: reno bbr cubic") {
		t.Fatalf("CheckCC(vegas) = %v", err)
	}
	if _, err := AvailableCC(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("want error for missing file")
	}
}

// TestApply checks the options land on a real socket; buffer forcing needs
// CAP_NET_ADMIN, so that part only runs as root.
func TestApply(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	rc, err := ln.(*net.TCPListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	avail, err := AvailableCC(CCProcFile)
	if err != nil || len(avail) == 0 {
		t.Skip("no congestion control list")
	}
	leg := Leg{CC: avail[0], MSS: 1200, NoDelay: true, KeepAlive: 120 * time.Second}
	if os.Geteuid() == 0 {
		leg.Buf = 1 << 20
	}
	var applyErr error
	var gotCC string
	var gotBuf, gotIdle, gotIntvl int
	if err := rc.Control(func(fd uintptr) {
		applyErr = leg.ApplyPre(int(fd))
		if applyErr == nil {
			applyErr = leg.ApplyPost(int(fd))
		}
		gotIdle, _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
		gotIntvl, _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPINTVL)
		gotCC, _ = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
		gotBuf, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
	}); err != nil {
		t.Fatal(err)
	}
	if applyErr != nil {
		t.Fatal(applyErr)
	}
	if strings.TrimRight(gotCC, "\x00") != avail[0] {
		t.Fatalf("cc = %q, want %q", gotCC, avail[0])
	}
	if gotIdle != 120 || gotIntvl != 30 {
		t.Fatalf("keepalive idle %d interval %d, want 120 and 30", gotIdle, gotIntvl)
	}
	if leg.Buf > 0 && gotBuf < leg.Buf {
		t.Fatalf("rcvbuf = %d, want >= %d", gotBuf, leg.Buf)
	}
}
