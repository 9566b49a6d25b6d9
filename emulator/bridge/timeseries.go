package bridge

import (
	"encoding/csv"
	"io"
	"strconv"
)

// TimeseriesHeader lists the columns of emulator_timeseries.csv. Counters
// are cumulative since start; queue_*, in_flight and the link parameters
// are instantaneous.
var TimeseriesHeader = []string{
	"t_s", "direction", "frames_in", "bytes_in", "frames_out", "bytes_out",
	"drop_queue", "drop_ber", "drop_gilbert_elliott", "drop_outage",
	"tx_errors", "rx_kernel_drops", "queue_packets", "queue_bytes", "in_flight",
	"rate_bps", "delay_ms", "ber", "up",
}

// TimeseriesWriter writes one CSV row per direction per sample.
type TimeseriesWriter struct {
	w *csv.Writer
}

// NewTimeseriesWriter writes the header to w.
func NewTimeseriesWriter(w io.Writer) (*TimeseriesWriter, error) {
	t := &TimeseriesWriter{w: csv.NewWriter(w)}
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
		row := []string{
			strconv.FormatFloat(s.TimeS, 'f', 3, 64), name,
			u(d.FramesIn), u(d.BytesIn), u(d.FramesOut), u(d.BytesOut),
			u(d.Drops["queue"]), u(d.Drops["ber"]), u(d.Drops["gilbert_elliott"]), u(d.Drops["outage"]),
			u(d.TxErrors), u(d.RxKernelDrops), strconv.Itoa(d.QueuePackets), strconv.Itoa(d.QueueBytes),
			strconv.Itoa(d.InFlight), f(d.RateBps), f(d.DelayMs), f(d.BER), strconv.FormatBool(d.Up),
		}
		if err := t.w.Write(row); err != nil {
			return err
		}
	}
	t.w.Flush()
	return t.w.Error()
}
