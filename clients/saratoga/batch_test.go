package saratoga

import (
	"bytes"
	"net"
	"slices"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
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
	for name, listen := range map[string]func(string, string) (net.PacketConn, error){
		"net.ListenPacket": net.ListenPacket, "ListenUDP": ListenUDP,
	} {
		t.Run(name, func(t *testing.T) {
			rx, err := listen("udp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer rx.Close()
			SetSocketBuffers(rx, 1<<20)
			tx, err := listen("udp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Close()
			var frames [][]byte
			for i, n := range []int{96, 1424, 1424, 1440, 1424, 1424, 1424, 700, 1440, 1440} {
				frames = append(frames, bytes.Repeat([]byte{byte(i + 1)}, n))
			}
			b := newBatchSender(tx, rx.LocalAddr())
			b.sendBatch(frames)
			msgs := make([]ipv4.Message, 4)
			for i := range msgs {
				msgs[i].Buffers = [][]byte{make([]byte, maxDatagram)}
			}
			got := 0
			for got < len(frames) {
				n, err := batchIO(rx).ReadBatch(msgs, 0)
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range msgs[:n] {
					want := frames[got]
					if b := m.Buffers[0][:m.N]; !bytes.Equal(b, want) {
						t.Fatalf("datagram %d: %d bytes of %d, want %d bytes of %d", got, len(b), b[0], len(want), want[0])
					}
					if m.Addr.String() != tx.LocalAddr().String() {
						t.Errorf("from %v, want %v", m.Addr, tx.LocalAddr())
					}
					got++
				}
			}
			t.Logf("segmentation offload used: %v", gsoSupported && !b.gsoOff.Load())
		})
	}
}

// TestListenUDPWakesReaders: a reader blocked on an empty socket returns
// when the socket is closed or its read deadline is set to now.
func TestListenUDPWakesReaders(t *testing.T) {
	for _, stop := range []string{"close", "deadline"} {
		t.Run(stop, func(t *testing.T) {
			c, err := ListenUDP("udp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			done := make(chan error, 1)
			go func() {
				_, _, err := c.ReadFrom(make([]byte, 100))
				done <- err
			}()
			time.Sleep(50 * time.Millisecond) // let it block (it returns either way)
			if stop == "close" {
				err = c.Close()
			} else {
				err = c.SetReadDeadline(time.Now())
			}
			if err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("read returned no error")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("reader not woken")
			}
			if _, _, err := c.ReadFrom(make([]byte, 100)); err == nil {
				t.Error("a later read succeeded")
			}
		})
	}
}
