package bridge

import (
	"sync/atomic"
	"time"
)

// Two tiers: 5 us buckets up to 10 ms resolve the sub-millisecond timing a
// fast link needs; 1 ms buckets up to 1 s keep a slow link's tail (a T1
// frame lasts 7.8 ms, and a virtual machine's descheduled vCPU can stall a
// wake-up for tens of ms) a number instead of "10 ms or more".
const (
	fineBucket    = 5 * time.Microsecond
	fineBuckets   = 2000 // up to 10 ms
	coarseBucket  = time.Millisecond
	coarseBuckets = 990 // 10 ms to 1 s; later frames land in the last bucket
	fineSpan      = fineBucket * fineBuckets
	lateBuckets   = fineBuckets + coarseBuckets
)

// lateHist records how late frames leave relative to their due time: the
// emulator's own delay error, independent of queueing.
type lateHist struct {
	b   [lateBuckets]atomic.Uint64
	max atomic.Int64
}

func bucketOf(late time.Duration) int {
	if late < fineSpan {
		return int(late / fineBucket)
	}
	return min(fineBuckets+int((late-fineSpan)/coarseBucket), lateBuckets-1)
}

// upperEdge is the largest lateness bucket i holds.
func upperEdge(i int) time.Duration {
	if i < fineBuckets {
		return time.Duration(i+1) * fineBucket
	}
	return fineSpan + time.Duration(i-fineBuckets+1)*coarseBucket
}

func (h *lateHist) add(late time.Duration) {
	late = max(late, 0)
	h.b[bucketOf(late)].Add(1)
	for {
		m := h.max.Load()
		if int64(late) <= m || h.max.CompareAndSwap(m, int64(late)) {
			return
		}
	}
}

// quantiles returns the upper edges of the buckets holding the given
// quantiles, never above the maximum (0 when empty), and the maximum.
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
	mx := time.Duration(h.max.Load())
	for j, q := range qs {
		target := uint64(q*float64(total-1)) + 1
		var cum uint64
		for i, c := range counts {
			cum += c
			if cum >= target {
				// The overflow bucket has no upper edge but the maximum.
				out[j] = mx
				if i < lateBuckets-1 {
					out[j] = min(upperEdge(i), mx)
				}
				break
			}
		}
	}
	return out, mx
}
