package trafficgen

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Sizer draws flow sizes in bytes (at least 1). Draw is called only from
// the scheduler's goroutine, with the scheduler's own seeded generator.
type Sizer interface {
	Draw(rng *rand.Rand) uint64
	// Mean is the distribution's mean in bytes (+Inf where it has none).
	Mean() float64
	String() string
}

// Fixed is one size for every flow.
type Fixed uint64

// Draw returns the fixed size.
func (f Fixed) Draw(*rand.Rand) uint64 { return uint64(f) }

// Mean returns the fixed size.
func (f Fixed) Mean() float64  { return float64(f) }
func (f Fixed) String() string { return fmt.Sprintf("fixed:%d", uint64(f)) }

// Exponential sizes with the given mean.
type Exponential struct{ MeanBytes float64 }

// Draw returns an exponential draw, rounded up to whole bytes.
func (e Exponential) Draw(rng *rand.Rand) uint64 { return clampSize(e.MeanBytes * rng.ExpFloat64()) }

// Mean returns the configured mean.
func (e Exponential) Mean() float64  { return e.MeanBytes }
func (e Exponential) String() string { return fmt.Sprintf("exp:%g", e.MeanBytes) }

// Pareto sizes: P(X > x) = (Min/x)^Shape for x >= Min, cut at Max when Max > 0
// (a draw above Max is Max, so the largest flow stays bounded).
type Pareto struct {
	Shape, Min, Max float64
}

// Draw inverts the Pareto CDF at a uniform draw in (0, 1].
func (p Pareto) Draw(rng *rand.Rand) uint64 {
	u := 1 - rng.Float64() // (0, 1]: never divides by zero
	x := p.Min / math.Pow(u, 1/p.Shape)
	if p.Max > 0 && x > p.Max {
		x = p.Max
	}
	return clampSize(x)
}

// Mean of the (capped) Pareto distribution.
func (p Pareto) Mean() float64 {
	if p.Max <= 0 {
		if p.Shape <= 1 {
			return math.Inf(1)
		}
		return p.Shape * p.Min / (p.Shape - 1)
	}
	// E[min(X, M)] = Min + integral from Min to M of (Min/x)^a dx.
	a, m, c := p.Shape, p.Min, p.Max
	if a == 1 {
		return m + m*math.Log(c/m)
	}
	return m + math.Pow(m, a)*(math.Pow(c, 1-a)-math.Pow(m, 1-a))/(1-a)
}

func (p Pareto) String() string {
	if p.Max > 0 {
		return fmt.Sprintf("pareto:%g:%g:%g", p.Shape, p.Min, p.Max)
	}
	return fmt.Sprintf("pareto:%g:%g", p.Shape, p.Min)
}

// Empirical sizes from a CDF table: points (size, P(X <= size)), sizes
// increasing, probabilities non-decreasing and ending at 1. A draw inverts the
// CDF, interpolating linearly in size between points (below the first point
// the first size is drawn).
type Empirical struct {
	Source string
	Sizes  []float64
	Probs  []float64
}

// Draw inverts the table at a uniform draw.
func (e *Empirical) Draw(rng *rand.Rand) uint64 {
	u := rng.Float64()
	i := sort.SearchFloat64s(e.Probs, u) // first index with Probs[i] >= u
	if i >= len(e.Probs) {
		i = len(e.Probs) - 1
	}
	if i == 0 || e.Probs[i] == e.Probs[i-1] {
		return clampSize(e.Sizes[i])
	}
	f := (u - e.Probs[i-1]) / (e.Probs[i] - e.Probs[i-1])
	return clampSize(e.Sizes[i-1] + f*(e.Sizes[i]-e.Sizes[i-1]))
}

// Mean of the interpolated table.
func (e *Empirical) Mean() float64 {
	m := e.Sizes[0] * e.Probs[0]
	for i := 1; i < len(e.Sizes); i++ {
		m += (e.Probs[i] - e.Probs[i-1]) * (e.Sizes[i] + e.Sizes[i-1]) / 2
	}
	return m
}

func (e *Empirical) String() string { return "table:" + e.Source }

// ParseTable reads a CDF table: one "size probability" pair per line,
// whitespace separated; '#' starts a comment.
func ParseTable(r io.Reader, source string) (*Empirical, error) {
	e := &Empirical{Source: source}
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		text, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 2 {
			return nil, fmt.Errorf("%s line %d: want \"size probability\", got %q", source, line, strings.TrimSpace(text))
		}
		size, err1 := strconv.ParseFloat(fields[0], 64)
		prob, err2 := strconv.ParseFloat(fields[1], 64)
		switch {
		case err1 != nil || err2 != nil:
			return nil, fmt.Errorf("%s line %d: not numbers: %q", source, line, strings.TrimSpace(text))
		case !(size >= 1) || size > MaxSize:
			return nil, fmt.Errorf("%s line %d: size %g outside 1..%d", source, line, size, uint64(MaxSize))
		case !(prob >= 0 && prob <= 1):
			return nil, fmt.Errorf("%s line %d: probability %g outside [0, 1]", source, line, prob)
		case len(e.Sizes) > 0 && size <= e.Sizes[len(e.Sizes)-1]:
			return nil, fmt.Errorf("%s line %d: sizes must increase", source, line)
		case len(e.Probs) > 0 && prob < e.Probs[len(e.Probs)-1]:
			return nil, fmt.Errorf("%s line %d: probabilities must not decrease", source, line)
		}
		e.Sizes = append(e.Sizes, size)
		e.Probs = append(e.Probs, prob)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	if len(e.Sizes) == 0 {
		return nil, fmt.Errorf("%s: no points", source)
	}
	if last := e.Probs[len(e.Probs)-1]; math.Abs(last-1) > 1e-9 {
		return nil, fmt.Errorf("%s: the last probability is %g, want 1", source, last)
	}
	e.Probs[len(e.Probs)-1] = 1
	return e, nil
}

// ParseSizes parses a size distribution:
//
//	BYTES or fixed:BYTES         every flow the same size
//	exp:MEAN                     exponential with that mean
//	pareto:SHAPE:MIN[:MAX]       Pareto, optionally capped at MAX
//	table:PATH                   empirical CDF table (see ParseTable)
//
// BYTES, MEAN, MIN and MAX take an optional K, M or G suffix (powers of 1024).
func ParseSizes(spec string) (Sizer, error) {
	kind, rest, found := strings.Cut(spec, ":")
	if !found {
		kind, rest = "fixed", spec
	}
	args := strings.Split(rest, ":")
	switch kind {
	case "fixed":
		if len(args) != 1 {
			return nil, fmt.Errorf("sizes %q: want fixed:BYTES", spec)
		}
		n, err := parseBytes(args[0])
		if err != nil {
			return nil, fmt.Errorf("sizes %q: %w", spec, err)
		}
		return Fixed(clampSize(n)), nil
	case "exp":
		if len(args) != 1 {
			return nil, fmt.Errorf("sizes %q: want exp:MEAN", spec)
		}
		m, err := parseBytes(args[0])
		if err != nil {
			return nil, fmt.Errorf("sizes %q: %w", spec, err)
		}
		return Exponential{m}, nil
	case "pareto":
		if len(args) != 2 && len(args) != 3 {
			return nil, fmt.Errorf("sizes %q: want pareto:SHAPE:MIN[:MAX]", spec)
		}
		shape, err := strconv.ParseFloat(args[0], 64)
		if err != nil || !(shape > 0) || math.IsInf(shape, 0) {
			return nil, fmt.Errorf("sizes %q: shape must be a positive number", spec)
		}
		p := Pareto{Shape: shape}
		if p.Min, err = parseBytes(args[1]); err != nil {
			return nil, fmt.Errorf("sizes %q: %w", spec, err)
		}
		if len(args) == 3 {
			if p.Max, err = parseBytes(args[2]); err != nil {
				return nil, fmt.Errorf("sizes %q: %w", spec, err)
			}
			if p.Max < p.Min {
				return nil, fmt.Errorf("sizes %q: MAX below MIN", spec)
			}
		}
		return p, nil
	case "table":
		f, err := os.Open(rest)
		if err != nil {
			return nil, fmt.Errorf("sizes %q: %w", spec, err)
		}
		defer f.Close()
		return ParseTable(f, rest)
	}
	return nil, fmt.Errorf("sizes %q: unknown kind %q (fixed, exp, pareto, table)", spec, kind)
}

func parseBytes(s string) (float64, error) {
	mult := 1.0
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'K', 'k':
			mult, s = 1<<10, s[:n-1]
		case 'M', 'm':
			mult, s = 1<<20, s[:n-1]
		case 'G', 'g':
			mult, s = 1<<30, s[:n-1]
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v*mult >= 1) || v*mult > MaxSize {
		return 0, fmt.Errorf("bytes %q: want a number from 1 to %d, optional K/M/G", s, uint64(MaxSize))
	}
	return v * mult, nil
}

func clampSize(x float64) uint64 {
	switch {
	case !(x >= 1): // also NaN
		return 1
	case x >= MaxSize:
		return MaxSize
	}
	return uint64(math.Ceil(x))
}
