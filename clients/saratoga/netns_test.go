package saratoga

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// TestNetnsGetPut runs the saratoga binary as a server in one network
// namespace and as a client in another, joined by a veth pair on
// 10.99.99.0/24, and checks get and put deliver identical files.
func TestNetnsGetPut(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	for _, tool := range []string{"ip", "ethtool"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found", tool)
		}
	}
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "saratoga")
	build := exec.Command("go", "build", "-o", bin, "./cmd/saratoga")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v: %s", err, out)
	}

	var rnd [2]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatal(err)
	}
	id := hex.EncodeToString(rnd[:])
	nsA, nsB := "t"+id+"sa", "t"+id+"sb"
	vA, vB := "t"+id+"va", "t"+id+"vb"
	run(t, "ip", "netns", "add", nsA)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", nsA).Run() })
	run(t, "ip", "netns", "add", nsB)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", nsB).Run() })
	run(t, "ip", "link", "add", vA, "netns", nsA, "type", "veth", "peer", "name", vB, "netns", nsB)
	for _, c := range []struct{ ns, dev, addr string }{{nsA, vA, "10.99.99.1/24"}, {nsB, vB, "10.99.99.2/24"}} {
		run(t, "ip", "-n", c.ns, "addr", "add", c.addr, "dev", c.dev)
		run(t, "ip", "-n", c.ns, "link", "set", c.dev, "up")
		run(t, "ip", "-n", c.ns, "link", "set", "lo", "up")
		run(t, "ip", "netns", "exec", c.ns, "ethtool", "-K", c.dev, "tso", "off", "gso", "off", "gro", "off", "tx", "off")
	}

	root := t.TempDir()
	want := writeRandom(t, filepath.Join(root, "file.bin"), 3<<20, 77)
	var srvLog bytes.Buffer
	srv := exec.Command("ip", "netns", "exec", nsA, bin, "serve", "-root", root, "-listen", "10.99.99.1:7542",
		"-rate", "40000000", "-checksum", "sha1")
	srv.Stderr = &srvLog
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Wait() }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		// ip netns exec execs the binary, so the signal reaches it.
		_ = srv.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-srvDone:
			return err
		case <-time.After(10 * time.Second):
			_ = srv.Process.Kill()
			<-srvDone
			return os.ErrDeadlineExceeded
		}
	}
	t.Cleanup(func() { _ = stop() })
	waitUDPListener(t, nsA, 7542)

	out := filepath.Join(t.TempDir(), "got.bin")
	get := exec.Command("ip", "netns", "exec", nsB, bin, "get", "-server", "10.99.99.1:7542", "-file", "file.bin",
		"-out", out, "-timeout", "10s")
	stdout, err := get.Output()
	if err != nil {
		t.Fatalf("get: %v: %s\nserver log:\n%s", err, stderrOf(err), srvLog.String())
	}
	var sum Summary
	if err := json.Unmarshal(bytes.TrimSpace(stdout), &sum); err != nil {
		t.Fatalf("get output %q: %v", stdout, err)
	}
	if sum.Checksum != "sha1" || !sum.ChecksumOK || sum.Bytes != uint64(len(want)) {
		t.Errorf("get summary %+v", sum)
	}
	sameFile(t, out, want)
	t.Logf("get: %s", bytes.TrimSpace(stdout))

	put := exec.Command("ip", "netns", "exec", nsB, bin, "put", "-server", "10.99.99.1:7542", "-file", out,
		"-name", "back.bin", "-rate", "40000000", "-timeout", "10s")
	stdout, err = put.Output()
	if err != nil {
		t.Fatalf("put: %v: %s\nserver log:\n%s", err, stderrOf(err), srvLog.String())
	}
	sameFile(t, filepath.Join(root, "back.bin"), want)
	t.Logf("put: %s", bytes.TrimSpace(stdout))

	if err := stop(); err != nil {
		t.Errorf("server did not exit cleanly on SIGTERM: %v\n%s", err, srvLog.String())
	}
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// waitUDPListener returns once a socket in namespace ns is bound to UDP port
// (the server is ready), not after a guessed sleep.
func waitUDPListener(t *testing.T, ns string, port int) {
	t.Helper()
	want := fmt.Sprintf(":%d ", port)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		out, _ := exec.Command("ip", "netns", "exec", ns, "ss", "-Hlun").Output()
		if strings.Contains(string(out), want) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("nothing bound to UDP port %d in %s after 10 s", port, ns)
}
