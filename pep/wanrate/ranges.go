package wanrate

import "sort"

// ranges is a set of disjoint, non-adjacent half-open ranges in ascending
// order: what a receiver holds above its cumulative offset, reported as
// SACK blocks.
type ranges struct{ r []Range }

// add inserts [start, end).
func (s *ranges) add(start, end uint64) {
	if end <= start {
		return
	}
	i := sort.Search(len(s.r), func(k int) bool { return s.r[k].End >= start })
	j := i
	ns, ne := start, end
	for j < len(s.r) && s.r[j].Start <= end {
		ns, ne = min(ns, s.r[j].Start), max(ne, s.r[j].End)
		j++
	}
	if i == j {
		s.r = append(s.r, Range{})
		copy(s.r[i+1:], s.r[i:])
		s.r[i] = Range{ns, ne}
		return
	}
	s.r[i] = Range{ns, ne}
	s.r = append(s.r[:i+1], s.r[j:]...)
}

// contains reports whether [start, end) is wholly inside one range.
func (s *ranges) contains(start, end uint64) bool {
	i := sort.Search(len(s.r), func(k int) bool { return s.r[k].End >= end })
	return i < len(s.r) && s.r[i].Start <= start
}

// trimBelow drops everything below off.
func (s *ranges) trimBelow(off uint64) {
	k := 0
	for k < len(s.r) && s.r[k].End <= off {
		k++
	}
	s.r = s.r[k:]
	if len(s.r) > 0 && s.r[0].Start < off {
		s.r[0].Start = off
	}
}

// blocks returns at most n ranges, lowest first: the ones nearest the
// cumulative offset matter most to the sender's repair.
func (s *ranges) blocks(n int) []Range {
	if len(s.r) < n {
		n = len(s.r)
	}
	return s.r[:n]
}
