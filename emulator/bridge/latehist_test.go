package bridge

import (
	"testing"
	"time"
)

func TestLateHistQuantiles(t *testing.T) {
	us, ms := time.Microsecond, time.Millisecond
	for _, tc := range []struct {
		name          string
		lates         []time.Duration
		p50, p99, max time.Duration
	}{
		{"empty", nil, 0, 0, 0},
		{"negative counts as on time", []time.Duration{-3 * us}, 0, 0, 0},
		{"fine tier: upper edge of the 5 us bucket", []time.Duration{3 * us, 12 * us, 40 * us}, 15 * us, 15 * us, 40 * us},
		{"fine tier: never above the max", []time.Duration{12 * us, 12 * us, 13 * us}, 13 * us, 13 * us, 13 * us},
		// 98 frames on time and 2 at 37.2 ms: p99 falls in the 1 ms tier.
		{"coarse tier keeps a slow link's tail", append(make([]time.Duration, 98), 37200*us, 37200*us), 5 * us, 37200 * us, 37200 * us},
		{"coarse bucket edge", append(make([]time.Duration, 98), 20400*us, 25*ms), 5 * us, 21 * ms, 25 * ms},
		{"beyond 1 s lands in the last bucket, max exact", append(make([]time.Duration, 1), 3*time.Second, 3*time.Second), 3 * time.Second, 3 * time.Second, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h lateHist
			for _, l := range tc.lates {
				h.add(l)
			}
			q, mx := h.quantiles(0.5, 0.99)
			if q[0] != tc.p50 || q[1] != tc.p99 || mx != tc.max {
				t.Fatalf("p50 %v p99 %v max %v, want %v %v %v", q[0], q[1], mx, tc.p50, tc.p99, tc.max)
			}
		})
	}
}

func TestLateHistBucketsAreContiguous(t *testing.T) {
	for i := 1; i < lateBuckets; i++ {
		lo := upperEdge(i - 1)
		if bucketOf(lo) != i {
			t.Fatalf("lateness %v: bucket %d, want %d", lo, bucketOf(lo), i)
		}
		if bucketOf(lo-1) != i-1 {
			t.Fatalf("lateness %v: bucket %d, want %d", lo-1, bucketOf(lo-1), i-1)
		}
	}
}
