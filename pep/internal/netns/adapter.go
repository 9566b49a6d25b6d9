package netns

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// PEPNode drives one PEP adapter inside a PEP namespace of a Chain, the
// way satbed does: `ip netns exec NS ADAPTER verb` with the contract's
// environment.
type PEPNode struct {
	NS       string
	Adapter  string // path to pep/adapters/<name>
	StateDir string
	Role     string
	BinDir   string
	Opts     string
	RateBps  int64
	RTTms    int
	LANDev   string // overrides the LAN port name (tests of bad configuration)
	BER      string // SATBED_BER ("" = 0)
}

// Env is the contract environment for this node.
func (p *PEPNode) Env() []string {
	lan := LAN
	if p.LANDev != "" {
		lan = p.LANDev
	}
	return append(os.Environ(),
		"SATBED_PEP_LAN="+lan,
		"SATBED_PEP_WAN="+WAN,
		"SATBED_PEP_BRIDGE="+Bridge,
		fmt.Sprintf("SATBED_RATE_BPS=%d", p.RateBps),
		fmt.Sprintf("SATBED_RTT_MS=%d", p.RTTms),
		"SATBED_BER="+cmp.Or(p.BER, "0"),
		"SATBED_BUFFER_BYTES=0",
		"SATBED_PEP_OPTS="+p.Opts,
		"SATBED_STATE_DIR="+p.StateDir,
		"SATBED_BIN_DIR="+p.BinDir,
		"SATBED_PEP_ROLE="+p.Role,
	)
}

// Call runs the adapter with verb and returns stdout, stderr and the
// error (non-nil for a non-zero exit).
func (p *PEPNode) Call(verb string) (string, string, error) {
	cmd := exec.Command("ip", "netns", "exec", p.NS, p.Adapter, verb)
	cmd.Env = p.Env()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// Kill stops a pepd left behind by a failed test (the adapter's pid file
// names it), so the namespace can disappear.
func (p *PEPNode) Kill() {
	b, err := os.ReadFile(p.StateDir + "/pepd.pid")
	if err != nil {
		return
	}
	pid := strings.TrimSpace(string(b))
	if pid != "" {
		exec.Command("kill", "-KILL", pid).Run()
	}
}
