package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"satbed/emulator/bridge"
	"satbed/emulator/config"
	"satbed/emulator/control"
)

// TestControlLossRoundTrip drives loss through the control socket as a
// client does: get reports it (as written and effective), set changes it
// live in one direction or both, stats report the loss in force and its
// counter, and a refused set changes nothing.
func TestControlLossRoundTrip(t *testing.T) {
	cfg, err := config.Decode([]byte(`{"a_to_b":{"ber":1e-6},"b_to_a":{"loss":0.02}}`))
	if err != nil {
		t.Fatal(err)
	}
	// No ports: get, set and stats never touch them.
	br, err := bridge.New(cfg, 1, func() time.Duration { return time.Second }, nil, nil, bridge.Options{IO: ioSocket})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ctl.sock")
	srv, err := control.Listen(path, handler{br, ioSocket})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rd := bufio.NewReader(conn)
	request := func(req string) map[string]any {
		t.Helper()
		if _, err := conn.Write([]byte(req + "\n")); err != nil {
			t.Fatal(err)
		}
		line, err := rd.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		var r map[string]any
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("%s -> %q: %v", req, line, err)
		}
		return r
	}
	// get's loss per direction, as written and effective; absent keys fail.
	losses := func() [2][2]any {
		t.Helper()
		r := request(`{"op":"get"}`)
		dirs, _ := r["config"].(map[string]any)["directions"].(map[string]any)
		var out [2][2]any
		for i, name := range []string{bridge.AToB, bridge.BToA} {
			d, _ := dirs[name].(map[string]any)
			c, _ := d["config"].(map[string]any)
			e, _ := d["effective"].(map[string]any)
			out[i] = [2]any{c["loss"], e["loss"]}
		}
		return out
	}
	want := func(ab, ba float64) [2][2]any { return [2][2]any{{ab, ab}, {ba, ba}} }

	if got := losses(); got != want(0, 0.02) {
		t.Fatalf("get at start: loss (config, effective) %v, want %v", got, want(0, 0.02))
	}
	if r := request(`{"op":"set","dir":"a_to_b","params":{"loss":0.1}}`); r["ok"] != true {
		t.Fatalf("set: %v", r)
	}
	if got := losses(); got != want(0.1, 0.02) {
		t.Errorf("get after set: %v, want %v", got, want(0.1, 0.02))
	}
	r := request(`{"op":"stats"}`)
	ab, _ := r["stats"].(map[string]any)["directions"].(map[string]any)[bridge.AToB].(map[string]any)
	drops, _ := ab["drops"].(map[string]any)
	if ab["loss"] != 0.1 || ab["ber"] != 1e-6 || drops["loss"] != 0.0 {
		t.Errorf("stats a_to_b: loss %v ber %v drops %v, want 0.1, 1e-6 and a loss counter at 0", ab["loss"], ab["ber"], drops)
	}
	for _, bad := range []struct{ params, msg string }{
		{`{"loss":1}`, "a_to_b: loss 1 outside [0,1)"},
		{`{"loss":-0.1}`, "a_to_b: loss -0.1 outside [0,1)"},
		{`{"loss":"10%"}`, "cannot unmarshal string into Go struct field Direction.loss"},
	} {
		r := request(`{"op":"set","dir":"both","params":` + bad.params + `}`)
		if r["ok"] != false || !strings.Contains(r["error"].(string), bad.msg) {
			t.Errorf("set %s: %v, want an error with %q", bad.params, r, bad.msg)
		}
	}
	if got := losses(); got != want(0.1, 0.02) {
		t.Errorf("get after refused sets: %v, want %v", got, want(0.1, 0.02))
	}
	if r := request(`{"op":"set","dir":"both","params":{"loss":0}}`); r["ok"] != true {
		t.Fatalf("set both: %v", r)
	}
	if got := losses(); got != want(0, 0) {
		t.Errorf("get after set both to 0: %v, want %v", got, want(0, 0))
	}
}
