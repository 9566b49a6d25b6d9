package saratoga

import "sort"

// rangeSet is a set of disjoint, non-adjacent half-open byte ranges kept in
// ascending order. A receiver holds one per transfer; with a hole-driven
// protocol it stays small (one entry per outstanding hole plus one).
type rangeSet struct {
	r []Hole
}

// add inserts [start, end) and reports how many bytes were new.
func (s *rangeSet) add(start, end uint64) uint64 {
	if end <= start {
		return 0
	}
	// First range whose end is >= start: candidates for merging.
	i := sort.Search(len(s.r), func(k int) bool { return s.r[k].End >= start })
	j := i
	covered := uint64(0)
	ns, ne := start, end
	for j < len(s.r) && s.r[j].Start <= end {
		lo, hi := max(s.r[j].Start, start), min(s.r[j].End, end)
		if hi > lo {
			covered += hi - lo
		}
		ns = min(ns, s.r[j].Start)
		ne = max(ne, s.r[j].End)
		j++
	}
	merged := Hole{ns, ne}
	switch {
	case i == j:
		s.r = append(s.r, Hole{})
		copy(s.r[i+1:], s.r[i:])
		s.r[i] = merged
	default:
		s.r[i] = merged
		s.r = append(s.r[:i+1], s.r[j:]...)
	}
	return (end - start) - covered
}

// contiguous returns the end of the range starting at 0 (0 if none).
func (s *rangeSet) contiguous() uint64 {
	if len(s.r) > 0 && s.r[0].Start == 0 {
		return s.r[0].End
	}
	return 0
}

// highest returns the end of the highest range.
func (s *rangeSet) highest() uint64 {
	if len(s.r) == 0 {
		return 0
	}
	return s.r[len(s.r)-1].End
}

// complete reports whether [0, size) is fully covered.
func (s *rangeSet) complete(size uint64) bool {
	return size == 0 || s.contiguous() >= size
}

// holes returns the gaps below limit, at most maxN of them, and whether the
// list was cut short.
func (s *rangeSet) holes(limit uint64, maxN int) ([]Hole, bool) {
	var out []Hole
	next := uint64(0)
	for _, r := range s.r {
		if r.Start >= limit {
			break
		}
		if r.Start > next {
			if len(out) == maxN {
				return out, true
			}
			out = append(out, Hole{next, r.Start})
		}
		next = r.End
	}
	if next < limit {
		if len(out) == maxN {
			return out, true
		}
		out = append(out, Hole{next, limit})
	}
	return out, false
}
