package saratoga

import (
	"bytes"
	"net"
	"slices"
	"testing"
	"time"
)

func TestGSORuns(t *testing.T) {
	frame := func(n int) []byte { return make([]byte, n) }
	for _, tc := range []struct {
		name  string
		sizes []int
		runs  [][]int // frame sizes per datagram handed to the kernel
	}{
		{"one size", []int{1424, 1424, 1424}, [][]int{{1424, 1424, 1424}}},
		{"short last chunk ends a run", []int{1424, 1424, 900}, [][]int{{1424, 1424, 900}}},
		// A timestamped frame (16 bytes longer) starts a new run, which
		// the next untimestamped frame may end.
		{"longer frame splits", []int{1424, 1424, 1440, 1424, 1424}, [][]int{{1424, 1424}, {1440, 1424}, {1424}}},
		{"metadata first", []int{96, 1424, 1424}, [][]int{{96}, {1424, 1424}}},
		{"byte limit", slices.Repeat([]int{1440}, 50), [][]int{slices.Repeat([]int{1440}, 45), slices.Repeat([]int{1440}, 5)}},
		{"segment limit", slices.Repeat([]int{100}, 70), [][]int{slices.Repeat([]int{100}, 64), slices.Repeat([]int{100}, 6)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var frames [][]byte
			for _, n := range tc.sizes {
				frames = append(frames, frame(n))
			}
			b := &batchSender{}
			var got [][]int
			for _, m := range b.gsoRuns(frames) {
				var run []int
				for _, f := range m.Buffers {
					run = append(run, len(f))
				}
				if (len(run) > 1) != (len(m.OOB) > 0) {
					t.Errorf("run %v: control message %d bytes", run, len(m.OOB))
				}
				got = append(got, run)
			}
			if !slices.EqualFunc(got, tc.runs, slices.Equal) {
				t.Errorf("runs %v, want %v", got, tc.runs)
			}
		})
	}
}

// TestSendBatchFrames sends a batch of mixed frame sizes through a real
// UDP socket and checks that the peer receives exactly those datagrams, in
// order, whether or not the kernel took the segmented path.
func TestSendBatchFrames(t *testing.T) {
	rx, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	SetSocketBuffers(rx, 1<<20)
	tx, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	var frames [][]byte
	for i, n := range []int{96, 1424, 1424, 1440, 1424, 1424, 1424, 700, 1440, 1440} {
		f := bytes.Repeat([]byte{byte(i + 1)}, n)
		frames = append(frames, f)
	}
	b := newBatchSender(tx, rx.LocalAddr())
	b.sendBatch(frames)
	buf := make([]byte, maxDatagram)
	for i, want := range frames {
		_ = rx.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, _, err := rx.ReadFrom(buf)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !bytes.Equal(buf[:n], want) {
			t.Fatalf("datagram %d: %d bytes of %d, want %d bytes of %d", i, n, buf[0], len(want), want[0])
		}
	}
	t.Logf("segmentation offload used: %v", gsoSupported && !b.gsoOff.Load())
}
