package bridge

import (
	"encoding/csv"
	"io"
	"strconv"
	"time"
)

// TimeseriesHeader lists the columns of emulator_timeseries.csv. Counters
// are cumulative since start; queue_*, in_flight and the link parameters
// are instantaneous; late_* is the departure lateness of the frames sent
// since the previous row (0 if none), so a stall shows in the rows it hit
// instead of vanishing into the run's quantiles. Columns added later go at
// the end, so a reader that counts columns still finds the older ones.
var TimeseriesHeader = []string{
	"t_s", "direction", "frames_in", "bytes_in", "frames_out", "bytes_out",
	"drop_queue", "drop_ber", "drop_gilbert_elliott", "drop_outage",
	"tx_errors", "rx_kernel_drops", "queue_packets", "queue_bytes", "in_flight",
	"rate_bps", "delay_ms", "ber", "up", "late_p50_us", "late_p99_us", "late_max_us",
	"drop_loss", "loss",
}

// TimeseriesWriter writes one CSV row per direction per sample.
type TimeseriesWriter struct {
	w    *csv.Writer
	prev map[string]*lateCounts // each direction's histogram at the previous row
}

// NewTimeseriesWriter writes the header to w.
func NewTimeseriesWriter(w io.Writer) (*TimeseriesWriter, error) {
	t := &TimeseriesWriter{w: csv.NewWriter(w), prev: map[string]*lateCounts{}}
	if err := t.w.Write(TimeseriesHeader); err != nil {
		return nil, err
	}
	t.w.Flush()
	return t, t.w.Error()
}

// Write appends the rows for one snapshot and flushes them.
func (t *TimeseriesWriter) Write(s Stats) error {
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	for _, name := range []string{AToB, BToA} {
		d := s.Dirs[name]
		var late []time.Duration
		if d.late != nil {
			// q = 1 is the highest bucket used: the interval's maximum, as that
			// bucket's upper edge (5 us wide below 10 ms).
			late = d.late.since(t.prev[name]).quantiles(d.lateMax, 0.5, 0.99, 1)
			t.prev[name] = d.late
		} else {
			late = make([]time.Duration, 3)
		}
		row := []string{
			strconv.FormatFloat(s.TimeS, 'f', 3, 64), name,
			u(d.FramesIn), u(d.BytesIn), u(d.FramesOut), u(d.BytesOut),
			u(d.Drops["queue"]), u(d.Drops["ber"]), u(d.Drops["gilbert_elliott"]), u(d.Drops["outage"]),
			u(d.TxErrors), u(d.RxKernelDrops), strconv.Itoa(d.QueuePackets), strconv.Itoa(d.QueueBytes),
			strconv.Itoa(d.InFlight), f(d.RateBps), f(d.DelayMs), f(d.BER), strconv.FormatBool(d.Up),
			u(uint64(late[0].Microseconds())), u(uint64(late[1].Microseconds())), u(uint64(late[2].Microseconds())),
			u(d.Drops["loss"]), f(d.Loss),
		}
		if err := t.w.Write(row); err != nil {
			return err
		}
	}
	t.w.Flush()
	return t.w.Error()
}
