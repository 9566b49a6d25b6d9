package bridge

import (
	"bytes"
	"encoding/csv"
	"io"
	"slices"
	"testing"
	"time"
)

// Readers that count columns keep working: the columns that existed before
// loss keep their names and places.
func TestTimeseriesHeaderKeepsOlderColumns(t *testing.T) {
	older := []string{
		"t_s", "direction", "frames_in", "bytes_in", "frames_out", "bytes_out",
		"drop_queue", "drop_ber", "drop_gilbert_elliott", "drop_outage",
		"tx_errors", "rx_kernel_drops", "queue_packets", "queue_bytes", "in_flight",
		"rate_bps", "delay_ms", "ber", "up", "late_p50_us", "late_p99_us", "late_max_us",
	}
	if !slices.Equal(TimeseriesHeader[:len(older)], older) {
		t.Errorf("header %v does not start with the older columns %v", TimeseriesHeader, older)
	}
	if got := TimeseriesHeader[len(older):]; !slices.Equal(got, []string{"drop_loss", "loss"}) {
		t.Errorf("new columns %v", got)
	}
}

// Each row's late_* columns cover only the frames sent since the previous
// row: a 30 ms stall shows in its own row and not in the rows around it.
func TestTimeseriesLatenessPerInterval(t *testing.T) {
	var h lateHist
	row := func() Stats {
		d := DirStats{late: h.counts(), lateMax: time.Duration(h.max.Load())}
		return Stats{Dirs: map[string]DirStats{AToB: d, BToA: {}}}
	}
	var buf bytes.Buffer
	tw, err := NewTimeseriesWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		h.add(20 * time.Microsecond)
	}
	steps := []func(){
		func() {},
		func() { h.add(30 * time.Millisecond) },
		func() {},
		func() { h.add(40 * time.Microsecond); h.add(0) },
	}
	for _, step := range steps {
		step()
		if err := tw.Write(row()); err != nil {
			t.Fatal(err)
		}
	}
	recs, col := readTimeseries(t, &buf)
	want := [][3]string{{"20", "20", "20"}, {"30000", "30000", "30000"}, {"0", "0", "0"}, {"5", "5", "45"}}
	var got [][3]string
	for _, r := range recs[1:] {
		if r[col["direction"]] == AToB {
			got = append(got, [3]string{r[col["late_p50_us"]], r[col["late_p99_us"]], r[col["late_max_us"]]})
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d a_to_b rows, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d: late p50/p99/max %v, want %v", i, got[i], want[i])
		}
	}
}

// readTimeseries reads a written timeseries back: its rows and each
// column's index by name (columns are found by name, never by place).
func readTimeseries(t *testing.T, r io.Reader) ([][]string, map[string]int) {
	t.Helper()
	recs, err := csv.NewReader(r).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, name := range recs[0] {
		col[name] = i
	}
	return recs, col
}
