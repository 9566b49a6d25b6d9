package saratoga

import (
	"math/rand/v2"
	"reflect"
	"testing"
)

func TestRangeSetHoles(t *testing.T) {
	tests := []struct {
		name   string
		adds   []Hole
		limit  uint64
		maxN   int
		holes  []Hole
		cut    bool
		contig uint64
	}{
		{"empty", nil, 100, 10, []Hole{{0, 100}}, false, 0},
		{"prefix", []Hole{{0, 50}}, 50, 10, nil, false, 50},
		{"gap", []Hole{{0, 10}, {20, 30}}, 30, 10, []Hole{{10, 20}}, false, 10},
		{"merge adjacent", []Hole{{0, 10}, {10, 20}}, 20, 10, nil, false, 20},
		{"fill between", []Hole{{0, 10}, {20, 30}, {10, 20}}, 30, 10, nil, false, 30},
		{"overlap", []Hole{{5, 15}, {0, 8}, {12, 40}}, 40, 10, nil, false, 40},
		{"leading hole", []Hole{{10, 20}}, 20, 10, []Hole{{0, 10}}, false, 0},
		{"truncated list", []Hole{{1, 2}, {3, 4}, {5, 6}}, 6, 2, []Hole{{0, 1}, {2, 3}}, true, 0},
		{"tail below limit", []Hole{{0, 10}}, 15, 10, []Hole{{10, 15}}, false, 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var s rangeSet
			for _, a := range tc.adds {
				s.add(a.Start, a.End)
			}
			h, cut := s.holes(tc.limit, tc.maxN)
			if !reflect.DeepEqual(h, tc.holes) || cut != tc.cut {
				t.Fatalf("holes = %v %v, want %v %v (set %v)", h, cut, tc.holes, tc.cut, s.r)
			}
			if c := s.contiguous(); c != tc.contig {
				t.Fatalf("contiguous = %d, want %d", c, tc.contig)
			}
		})
	}
}

// TestRangeSetRandom compares the set against a bitmap.
func TestRangeSetRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 200; iter++ {
		const n = 300
		var bits [n]bool
		var s rangeSet
		for k := 0; k < 40; k++ {
			a := rng.IntN(n)
			b := a + rng.IntN(20)
			if b > n {
				b = n
			}
			want := 0
			for i := a; i < b; i++ {
				if !bits[i] {
					want++
					bits[i] = true
				}
			}
			if got := s.add(uint64(a), uint64(b)); got != uint64(want) {
				t.Fatalf("add(%d,%d) new = %d, want %d", a, b, got, want)
			}
			for i := 1; i < len(s.r); i++ {
				if s.r[i].Start <= s.r[i-1].End {
					t.Fatalf("ranges not disjoint/sorted: %v", s.r)
				}
			}
		}
		holes, _ := s.holes(n, n)
		var missing [n]bool
		for _, h := range holes {
			for i := h.Start; i < h.End; i++ {
				missing[i] = true
			}
		}
		for i := 0; i < n; i++ {
			if missing[i] == bits[i] {
				t.Fatalf("byte %d: received %v but hole %v", i, bits[i], missing[i])
			}
		}
	}
}
