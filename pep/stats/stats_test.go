package stats

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

func TestWriteAtomic(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "stats.json")
	for i := int64(1); i <= 3; i++ {
		if err := WriteAtomic(p, Snapshot{Name: "pepd", ConnectionsSplit: i, Splitting: true}); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"name", "connections_split", "connections_active", "bytes_lan_to_wan", "bytes_wan_to_lan"} {
		if _, ok := m[k]; !ok {
			t.Fatalf("contract field %q missing from %s", k, b)
		}
	}
	if m["connections_split"].(float64) != 3 {
		t.Fatalf("got %s", b)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("temporary files left behind: %v", ents)
	}
}

func TestConnLog(t *testing.T) {
	p := filepath.Join(t.TempDir(), "conns.jsonl")
	l, err := OpenConnLog(p)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 3; i++ {
		if err := l.Add(Record{ID: i, Side: "lan", Result: "closed"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		n++
		if r.ID != uint64(n) {
			t.Fatalf("line %d has id %d", n, r.ID)
		}
	}
	if n != 3 {
		t.Fatalf("%d lines, want 3", n)
	}
}

// TestConnLogSharedFile has two logs (two workers) append to one file
// with buffers that fill mid-record; every line must stay whole.
func TestConnLogSharedFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "conns.jsonl")
	const perLog = 3000
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for w := 0; w < 2; w++ {
		l, err := OpenConnLog(p)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perLog; i++ {
				r := Record{ID: uint64(2*i + w + 1), Side: "lan", Result: "closed", Error: strings.Repeat("x", i%97)}
				if err := l.Add(r); err != nil {
					errs <- err
					return
				}
			}
			errs <- l.Close()
		}()
	}
	wg.Wait()
	for w := 0; w < 2; w++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[uint64]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("torn line %q: %v", sc.Text(), err)
		}
		seen[r.ID] = true
	}
	if len(seen) != 2*perLog {
		t.Fatalf("%d distinct records, want %d", len(seen), 2*perLog)
	}
}

func TestSum(t *testing.T) {
	tests := []struct {
		name  string
		parts []Snapshot
		want  Snapshot
	}{
		{name: "none", want: Snapshot{}},
		{name: "one worker", parts: []Snapshot{{ConnectionsActive: 3, ConnectionsSplit: 5, BytesLanToWan: 7, Listening: true}},
			want: Snapshot{ConnectionsActive: 3, ConnectionsSplit: 5, BytesLanToWan: 7, Listening: true}},
		{name: "counters add, one listener is enough", parts: []Snapshot{
			{ConnectionsActive: 4900, ConnectionsSplit: 5000, BytesLanToWan: 10, BytesWanToLan: 1, ConnectionsHighWater: 4950, PipesInUse: 2, ResetsPropagated: 1, Listening: false},
			{ConnectionsActive: 5100, ConnectionsSplit: 5100, BytesLanToWan: 20, BytesWanToLan: 2, ConnectionsHighWater: 5100, PipesInUse: 1, ConnectionsRefused: 4, Listening: true},
		}, want: Snapshot{ConnectionsActive: 10000, ConnectionsSplit: 10100, BytesLanToWan: 30, BytesWanToLan: 3,
			ConnectionsHighWater: 10050, PipesInUse: 3, ResetsPropagated: 1, ConnectionsRefused: 4, Listening: true}},
		{name: "the buffer's configuration is shared, its high waters are the most any held", parts: []Snapshot{
			{BufferPackets: 200, BufferLimitBytes: 289600, AckReserve: 0.8, BufferWanCapBytes: 217200, BufferBytes: 10, BufferHighWaterBytes: 300000, BufferWanHighWaterBytes: 200000},
			{BufferPackets: 200, BufferLimitBytes: 289600, AckReserve: 0.8, BufferWanCapBytes: 217200, BufferBytes: 5, BufferHighWaterBytes: 290000, BufferWanHighWaterBytes: 217200},
		}, want: Snapshot{BufferPackets: 200, BufferLimitBytes: 289600, AckReserve: 0.8, BufferWanCapBytes: 217200, BufferBytes: 15, BufferHighWaterBytes: 300000, BufferWanHighWaterBytes: 217200}},
		{name: "all paused", parts: []Snapshot{{ConnectionsActive: 1}, {ConnectionsActive: 1}},
			want: Snapshot{ConnectionsActive: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Sum(tt.parts); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Sum = %+v\nwant  %+v", got, tt.want)
			}
		})
	}
}

// FuzzRead: a stats file as another process (or a lab's PEP) leaves it:
// anything decodes or fails with an error, and sums of what decodes add up.
func FuzzRead(f *testing.F) {
	f.Add([]byte(`{"name":"pepd","connections_split":3,"splitting":true}`))
	f.Add([]byte(`{"connections_split":-1,"bytes_lan_to_wan":9223372036854775807}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "stats.json")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Read(p)
		if err != nil {
			return
		}
		if sum := Sum([]Snapshot{s, s}); sum.ConnectionsSplit != 2*s.ConnectionsSplit {
			t.Fatalf("sum of two %d is %d", s.ConnectionsSplit, sum.ConnectionsSplit)
		}
	})
}
