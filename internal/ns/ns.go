//go:build linux

// Package ns holds the network-namespace primitives that the emulator's and
// pepd's integration tests and benchmarks share: unique names, commands in
// the root namespace or inside a named one, and Go code run inside one.
// Each caller builds its own chain of namespaces on top.
package ns

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Root reports whether the process can build namespaces.
func Root() bool { return os.Geteuid() == 0 }

// Prefix returns "t" plus four random hex digits, so parallel runs never
// collide on namespace or interface names.
func Prefix() (string, error) {
	var rb [2]byte
	if _, err := rand.Read(rb[:]); err != nil {
		return "", fmt.Errorf("random prefix: %w", err)
	}
	return "t" + hex.EncodeToString(rb[:]), nil
}

// Run executes a command in the root namespace and returns its combined output.
func Run(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err,
			strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Command returns a command that runs inside namespace ns.
func Command(ns string, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

// Exec runs a command inside namespace ns and returns its combined output.
func Exec(ns string, args ...string) (string, error) {
	return Run("ip", append([]string{"netns", "exec", ns}, args...)...)
}

// Delete removes namespace ns if it exists (its veths and bridges go with it).
func Delete(ns string) error {
	if _, err := os.Stat("/run/netns/" + ns); err != nil {
		return nil
	}
	_, err := Run("ip", "netns", "del", ns)
	return err
}

// Do runs f on an OS thread switched into namespace ns. Sockets f creates
// stay in ns after it returns, so they can be used from any goroutine.
func Do(ns string, f func() error) error {
	fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("netns %s: %w", ns, err)
	}
	defer unix.Close(fd)
	errc := make(chan error, 1)
	// A fresh goroutine whose thread is discarded afterwards (it exits
	// locked), so no other goroutine ever runs in the wrong namespace.
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		errc <- f()
	}()
	if err := <-errc; err != nil {
		return fmt.Errorf("in netns %s: %w", ns, err)
	}
	return nil
}
