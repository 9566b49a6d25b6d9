package trafficgen

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseSizes(t *testing.T) {
	table := filepath.Join(t.TempDir(), "t.cdf")
	if err := os.WriteFile(table, []byte("# comment\n100 0.5\n1000 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		spec, want string
		mean       float64
	}{
		{"1500", "fixed:1500", 1500},
		{"fixed:64K", "fixed:65536", 65536},
		{"exp:1M", "exp:1.048576e+06", 1 << 20},
		{"pareto:1.5:10K", "pareto:1.5:10240", 30720},
		{"pareto:1:1000:10000", "pareto:1:1000:10000", 1000 + 1000*math.Log(10)},
		{"table:" + table, "table:" + table, 0.5*100 + 0.5*550},
	}
	for _, c := range cases {
		s, err := ParseSizes(c.spec)
		if err != nil {
			t.Errorf("%s: %v", c.spec, err)
			continue
		}
		if s.String() != c.want || math.Abs(s.Mean()-c.mean) > 1e-6*c.mean {
			t.Errorf("%s: got %s mean %g, want %s mean %g", c.spec, s, s.Mean(), c.want, c.mean)
		}
	}
	for _, bad := range []string{"", "0", "-5", "fixed:", "exp:1:2", "pareto:0:10", "pareto:1.2", "pareto:1.2:10:5",
		"lognormal:3", "table:/nonexistent", "exp:NaN", "fixed:1e300"} {
		if _, err := ParseSizes(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestParseTableRejects(t *testing.T) {
	for name, text := range map[string]string{
		"empty":          "# nothing\n",
		"three fields":   "100 0.5 x\n1000 1\n",
		"not numbers":    "abc 1\n",
		"sizes decrease": "1000 0.5\n100 1\n",
		"probs decrease": "100 0.6\n1000 0.5\n2000 1\n",
		"prob above 1":   "100 1.5\n",
		"last not 1":     "100 0.5\n1000 0.9\n",
		"size zero":      "0 1\n",
	} {
		if _, err := ParseTable(strings.NewReader(text), name); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// Sample means of seeded draws land near the distribution's mean.
func TestDrawMeans(t *testing.T) {
	for _, s := range []Sizer{
		Fixed(1000),
		Exponential{50_000},
		Pareto{Shape: 2.5, Min: 1000},
		Pareto{Shape: 1.2, Min: 1000, Max: 1e6},
		&Empirical{Source: "two", Sizes: []float64{100, 1000}, Probs: []float64{0.5, 1}},
	} {
		rng := rand.New(rand.NewPCG(1, 2))
		const n = 200_000
		sum := 0.0
		for range n {
			x := s.Draw(rng)
			if x < 1 {
				t.Fatalf("%s drew %d", s, x)
			}
			sum += float64(x)
		}
		if got, want := sum/n, s.Mean(); math.Abs(got-want) > 0.03*want+1 {
			t.Errorf("%s: sample mean %g, want about %g", s, got, want)
		}
	}
}

// The same seed gives the same sizes.
func TestDrawSeeded(t *testing.T) {
	s := Exponential{1000}
	a, b := rand.New(rand.NewPCG(7, 7)), rand.New(rand.NewPCG(7, 7))
	for range 100 {
		if s.Draw(a) != s.Draw(b) {
			t.Fatal("same seed, different draws")
		}
	}
}

// TestSurgeTable: the shipped table parses, is heavy-tailed (a small share of
// flows carries most bytes) and its quoted median and mean hold.
func TestSurgeTable(t *testing.T) {
	s, err := ParseSizes("table:tables/surge-web.cdf")
	if err != nil {
		t.Fatal(err)
	}
	e := s.(*Empirical)
	if m := e.Mean(); m < 40_000 || m > 50_000 {
		t.Errorf("mean %g, the header says about 44,300", m)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 400_000
	draws := make([]float64, n)
	total, big, bigBytes := 0.0, 0, 0.0
	for i := range draws {
		x := float64(e.Draw(rng))
		draws[i] = x
		total += x
		if x > 133_000 {
			big++
			bigBytes += x
		}
	}
	below := 0
	for _, x := range draws {
		if x <= 11_600 {
			below++
		}
	}
	if f := float64(below) / n; math.Abs(f-0.5) > 0.01 {
		t.Errorf("P(X <= 11.6 KB) = %g, want about 0.5", f)
	}
	if f, fb := float64(big)/n, bigBytes/total; f > 0.04 || fb < 0.4 {
		t.Errorf("flows above 133 KB: %.3f of flows carry %.3f of bytes; want a heavy tail", f, fb)
	}
}

// FuzzParseTable: a table file never panics the parser, and an accepted
// table only ever draws sizes within its range.
func FuzzParseTable(f *testing.F) {
	f.Add("100 0.5\n1000 1\n")
	f.Add("# c\n1 0\n2 1 # tail\n")
	f.Add("1e3 1")
	f.Fuzz(func(t *testing.T, text string) {
		e, err := ParseTable(strings.NewReader(text), "fuzz")
		if err != nil {
			return
		}
		rng := rand.New(rand.NewPCG(1, 1))
		lo, hi := e.Sizes[0], e.Sizes[len(e.Sizes)-1]
		for range 50 {
			x := float64(e.Draw(rng))
			if x < math.Floor(lo) || x > math.Ceil(hi) {
				t.Fatalf("drew %g outside [%g, %g]", x, lo, hi)
			}
		}
	})
}
