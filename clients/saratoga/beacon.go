package saratoga

import (
	"context"
	"net"
	"os"
	"time"
)

// A BEACON (draft -21, BEACON frame) announces a peer: its endpoint
// identifier, the largest descriptor it handles, whether it will send and
// receive, and optionally its free space. Beacons are advisory: nothing
// waits for one. The client sends one before its first REQUEST; a server
// given -beacon-to sends them periodically; received beacons are counted
// and logged, never answered.

// localEID names this host in beacons: "saratoga:" plus the host name.
func localEID() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "localhost"
	}
	return "saratoga:" + h
}

// localBeacon describes this implementation; dir, if set, is the directory
// whose free space is advertised.
func localBeacon(dir string) *Beacon {
	b := &Beacon{Descriptor: D128, TxWilling: WillingYes, RxWilling: WillingYes, EID: localEID()}
	if dir != "" {
		if kib, ok := freeKiB(dir); ok {
			b.HasFree, b.FreeDesc, b.FreeSpace = true, DescriptorFor(kib), kib
		}
	}
	return b
}

// beaconLoop sends a beacon to each address every interval until ctx ends.
func beaconLoop(ctx context.Context, conn net.PacketConn, to []net.Addr, every time.Duration, dir string) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		// The free space changes as files arrive, so each beacon is fresh.
		if b, err := localBeacon(dir).Append(nil); err == nil {
			for _, a := range to {
				_, _ = conn.WriteTo(b, a)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
