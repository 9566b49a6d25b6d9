package bridge

import (
	"slices"
	"testing"
	"time"
)

func TestDelayLineFullAndOrder(t *testing.T) {
	d := newDelayLine(3) // rounds up to 4
	for i := 0; i < 4; i++ {
		if !d.push(frame{n: i, due: time.Duration(i)}) {
			t.Fatalf("push %d refused", i)
		}
	}
	if d.push(frame{n: 4, due: 4}) {
		t.Fatal("a full line took a fifth frame")
	}
	if d.len() != 4 {
		t.Fatalf("len %d", d.len())
	}
	out := d.popDue(1, nil, 10)
	if len(out) != 2 || out[0].n != 0 || out[1].n != 1 {
		t.Fatalf("popDue(1) = %v", out)
	}
	if due, ok := d.front(); !ok || due != 2 {
		t.Fatalf("front = %v %v", due, ok)
	}
	if !d.push(frame{n: 4, due: 4}) {
		t.Fatal("push after pop refused")
	}
	out = d.popDue(10, out[:0], 2)
	if len(out) != 2 || out[0].n != 2 || out[1].n != 3 {
		t.Fatalf("popDue max 2 = %v", out)
	}
}

// One producer and one consumer at full speed: every frame arrives once,
// in order (run with -race), while the producer also moves the due times of
// frames the consumer may be popping, as a live change does.
func TestDelayLineConcurrent(t *testing.T) {
	const n = 200000
	d := newDelayLine(64)
	go func() {
		for i := 0; i < n; {
			if d.push(frame{n: i, seq: uint64(i), due: time.Duration(i)}) {
				if i > 8 {
					d.retime(uint64(i-8), time.Duration(i-8))
				}
				i++
			}
			d.signal()
		}
	}()
	next := 0
	var out []frame
	deadline := time.After(30 * time.Second)
	for next < n {
		if _, ok := d.front(); !ok {
			select {
			case <-d.notify:
			case <-deadline:
				t.Fatalf("stuck at %d of %d", next, n)
			}
			continue
		}
		out = d.popDue(time.Duration(n), out[:0], 16)
		for _, f := range out {
			if f.n != next {
				t.Fatalf("got frame %d, want %d", f.n, next)
			}
			next++
		}
	}
}

// retime moves the frames with the given seqs and only them, wherever they
// stand in the ring (wrapped or not), one after another as a live change
// does; a seq no longer (or never) in the line changes nothing.
func TestDelayLineRetime(t *testing.T) {
	tests := []struct {
		name   string
		first  []uint64        // pushed into a ring of 4, due 10*seq
		popped int             // then sent
		then   []uint64        // then pushed (wrapping the ring)
		seqs   []uint64        // moved to 99, in this order
		want   []time.Duration // dues left, in order
	}{
		{"newest", []uint64{0, 1, 2, 3}, 0, nil, []uint64{3}, []time.Duration{0, 10, 20, 99}},
		{"oldest", []uint64{0, 1, 2, 3}, 0, nil, []uint64{0}, []time.Duration{99, 10, 20, 30}},
		{"wrapped", []uint64{0, 1, 2, 3}, 3, []uint64{4, 5}, []uint64{5}, []time.Duration{30, 40, 99}},
		{"already sent", []uint64{0, 1, 2, 3}, 3, []uint64{4, 5}, []uint64{1}, []time.Duration{30, 40, 50}},
		{"never in the line", []uint64{0, 1, 3}, 0, nil, []uint64{2}, []time.Duration{0, 10, 30}},
		{"a queue, wrapped", []uint64{0, 1, 2, 3}, 3, []uint64{4, 5}, []uint64{4, 5}, []time.Duration{30, 99, 99}},
		{"a queue with a frame never in the line", []uint64{0, 1, 3, 4}, 0, nil, []uint64{1, 2, 3}, []time.Duration{0, 99, 99, 40}},
		{"a queue after an earlier change", []uint64{0, 1, 2, 3}, 0, nil, []uint64{2, 3, 1, 2}, []time.Duration{0, 99, 99, 99}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newDelayLine(4)
			push := func(seqs []uint64) {
				for _, seq := range seqs {
					if !d.push(frame{seq: seq, due: time.Duration(10 * seq)}) {
						t.Fatalf("push %d refused", seq)
					}
				}
			}
			push(tc.first)
			if got := d.popDue(1<<40, nil, tc.popped); len(got) != tc.popped {
				t.Fatalf("popped %d, want %d", len(got), tc.popped)
			}
			push(tc.then)
			for _, seq := range tc.seqs {
				d.retime(seq, 99)
			}
			var got []time.Duration
			for d.len() > 0 {
				// One at a time: a frame moved later must not block the check.
				for _, f := range d.popDue(1<<40, nil, 1) {
					got = append(got, f.due)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("dues %v, want %v", got, tc.want)
			}
		})
	}
}
