package bridge

import (
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
// in order (run with -race).
func TestDelayLineConcurrent(t *testing.T) {
	const n = 200000
	d := newDelayLine(64)
	go func() {
		for i := 0; i < n; {
			if d.push(frame{n: i, due: time.Duration(i)}) {
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
