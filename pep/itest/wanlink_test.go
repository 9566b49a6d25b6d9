package itest

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"satbed/pep/internal/netns"
)

// What the WAN link between the PEP nodes does to frames, set on the
// egress of each PEP node's WAN port with nft's netdev egress hook: it
// sees frames sent on packet sockets too (the wan=rate leg's), which
// ingress filters do not, and this kernel has neither netem nor tc's
// matchall.

// wanEgressScript is the nft script for a table of that hook.
func wanEgressScript(table, policy, rules string) string {
	return fmt.Sprintf("nft -f - <<'X'\ntable netdev %s {\n chain out { type filter hook egress device \"wan\" priority 0; policy %s;\n%s }\n}\nX",
		table, policy, rules)
}

var (
	// outageDown drops every frame leaving the port; outageUp ends it.
	outageDown = wanEgressScript("outage", "drop", "")
	outageUp   = "nft delete table netdev outage"
)

// berRules drops each frame with the probability that a bit-error rate
// ber hits at least one of its bits (the tunnel's CRC-32C discards such
// a frame, so dropping it is what the receiver sees), by 64-byte length
// classes at each class's largest length.
func berRules(ber float64) string {
	var b strings.Builder
	for lo := 0; lo < 1600; lo += 64 {
		hi := lo + 63
		p := -math.Expm1(float64(8*(hi+4)) * math.Log1p(-ber)) // +4: the FCS
		fmt.Fprintf(&b, "  meta length %d-%d numgen random mod 1000000 < %d counter drop\n", lo, hi, int(p*1e6))
	}
	return b.String()
}

// wanEgress runs a table's script on both PEP nodes' WAN ports and
// deletes the table when the test ends.
func wanEgress(t *testing.T, b *bed, table, script string) {
	t.Helper()
	for _, ns := range b.chain.PEPs {
		if out, err := netns.Exec(ns, "sh", "-c", script); err != nil {
			t.Fatalf("nft table %s in %s: %v %s", table, ns, err, out)
		}
	}
	t.Cleanup(func() {
		for _, ns := range b.chain.PEPs {
			netns.Exec(ns, "sh", "-c", "nft delete table netdev "+table+" 2>/dev/null; true")
		}
	})
}
