package stats

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
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
