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

// lateCounts is a copy of a histogram's buckets: cumulative as taken, or
// the difference of two copies for the frames sent between them.
type lateCounts [lateBuckets]uint64

// counts copies the buckets (each read atomically, the whole not: a frame
// added meanwhile is in this copy or the next).
func (h *lateHist) counts() *lateCounts {
	var c lateCounts
	for i := range c {
		c[i] = h.b[i].Load()
	}
	return &c
}

// since returns c - prev (prev nil: c itself).
func (c *lateCounts) since(prev *lateCounts) *lateCounts {
	d := *c
	if prev != nil {
		for i := range d {
			d[i] -= prev[i]
		}
	}
	return &d
}

// quantiles returns the upper edges of the buckets holding the given
// quantiles (0 when empty), none above mx, which also stands for the
// overflow bucket's edge.
func (c *lateCounts) quantiles(mx time.Duration, qs ...float64) []time.Duration {
	var total uint64
	for _, n := range c {
		total += n
	}
	out := make([]time.Duration, len(qs))
	if total == 0 {
		return out
	}
	for j, q := range qs {
		target := uint64(q*float64(total-1)) + 1
		var cum uint64
		for i, n := range c {
			cum += n
			if cum >= target {
				out[j] = mx
				if i < lateBuckets-1 {
					out[j] = min(upperEdge(i), mx)
				}
				break
			}
		}
	}
	return out
}

// quantiles returns the quantiles of all frames so far and the maximum.
func (h *lateHist) quantiles(qs ...float64) ([]time.Duration, time.Duration) {
	mx := time.Duration(h.max.Load())
	return h.counts().quantiles(mx, qs...), mx
}
