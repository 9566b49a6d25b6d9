package bridge

import (
	"sync/atomic"
	"time"
)

const (
	lateBucket  = 5 * time.Microsecond
	lateBuckets = 2000 // 10 ms; later frames land in the last bucket
)

// lateHist records how late frames leave relative to their due time: the
// emulator's own delay error, independent of queueing.
type lateHist struct {
	b   [lateBuckets]atomic.Uint64
	max atomic.Int64
}

func (h *lateHist) add(late time.Duration) {
	if late < 0 {
		late = 0
	}
	i := int(late / lateBucket)
	if i >= lateBuckets {
		i = lateBuckets - 1
	}
	h.b[i].Add(1)
	for {
		m := h.max.Load()
		if int64(late) <= m || h.max.CompareAndSwap(m, int64(late)) {
			return
		}
	}
}

// quantiles returns the upper edges of the buckets holding the given
// quantiles (0 when empty), and the maximum.
func (h *lateHist) quantiles(qs ...float64) ([]time.Duration, time.Duration) {
	var counts [lateBuckets]uint64
	var total uint64
	for i := range counts {
		counts[i] = h.b[i].Load()
		total += counts[i]
	}
	out := make([]time.Duration, len(qs))
	if total == 0 {
		return out, 0
	}
	for j, q := range qs {
		target := uint64(q*float64(total-1)) + 1
		var cum uint64
		for i, c := range counts {
			cum += c
			if cum >= target {
				out[j] = time.Duration(i+1) * lateBucket
				break
			}
		}
	}
	return out, time.Duration(h.max.Load())
}
