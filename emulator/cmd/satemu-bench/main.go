//go:build linux

// Command satemu-bench builds a sender <-> satemu <-> receiver namespace
// chain and prints satemu's measured figures: wire rate, RTT error under
// load, packet error rate against the formula, and capacity. It prints
// numbers; it does not pass or fail. Needs root.
//
//	go build -o bin/satemu ./emulator/cmd/satemu
//	go run ./emulator/cmd/satemu-bench -satemu bin/satemu
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"satbed/emulator/internal/netns"
	"satbed/emulator/link"
)

type bench struct {
	bin   string
	flags []string
	chain *netns.Chain
	dir   string
	port  int

	capRates []float64
	genPrio  int    // compare: the load generator's SCHED_FIFO priority
	keep     string // compare: directory for each satemu run's time series and CPU samples
}

func main() {
	bin := flag.String("satemu", "bin/satemu", "satemu binary")
	extra := flag.String("flags", "", "extra satemu flags, e.g. \"-rt-priority 50\"")
	only := flag.String("only", "rate,rtt,per,capacity", "comma-separated sections to run (also: compare, satemu against the kernel's HTB)")
	paths := flag.String("paths", "tpacket,socket", "compare: satemu packet paths (-io values) to run")
	genPrio := flag.Int("gen-rt-priority", 1, "compare: run the load generator under SCHED_FIFO at this priority (0 = off), below satemu's threads")
	cmpRates := flag.String("compare-rates", "1e8,1e9,2e9,5e9", "compare: comma-separated rates (bit/s)")
	keep := flag.String("keep", "", "compare: copy each satemu run's emulator_timeseries.csv and the /proc/stat samples (cpu.csv) into this directory")
	capRates := flag.String("capacity-rates", "", "comma-separated rates (bit/s) to try in the capacity section instead of the 8M/100M/1G search")
	flag.Parse()
	if !netns.Root() {
		fmt.Fprintln(os.Stderr, "satemu-bench: needs root to build namespaces")
		os.Exit(2)
	}
	if _, err := os.Stat(*bin); err != nil {
		fmt.Fprintln(os.Stderr, "satemu-bench:", err)
		os.Exit(2)
	}
	chain, err := netns.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, "satemu-bench:", err)
		os.Exit(1)
	}
	defer chain.Close()
	dir, err := os.MkdirTemp("", "satemu-bench")
	if err != nil {
		fmt.Fprintln(os.Stderr, "satemu-bench:", err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	b := &bench{bin: *bin, flags: strings.Fields(*extra), chain: chain, dir: dir, port: 9000, genPrio: *genPrio, keep: *keep}
	for _, r := range strings.Split(*capRates, ",") {
		if v, err := strconv.ParseFloat(r, 64); err == nil && v > 0 {
			b.capRates = append(b.capRates, v)
		}
	}
	c0, err := readCPU()
	if err != nil {
		fmt.Fprintln(os.Stderr, "satemu-bench:", err)
		os.Exit(1)
	}
	t0 := time.Now()
	fmt.Printf("satemu-bench: %d CPUs, load average %s, satemu flags %q\n", numCPU(), loadavg(), *extra)
	defer func() {
		c, _ := readCPU()
		el := time.Since(t0).Seconds()
		fmt.Printf("\nsatemu-bench: done in %.0f s, load average %s, machine busy %.0f%% and steal %.1f%% of %d CPUs (/proc/stat)\n",
			el, loadavg(), (c.busy-c0.busy)/(c.total-c0.total)*100, stealShare(c0, c)*100, numCPU())
	}()
	for _, s := range strings.Split(*only, ",") {
		var err error
		switch s {
		case "rate":
			err = b.rate()
		case "rtt":
			err = b.rtt()
		case "per":
			err = b.per()
		case "capacity":
			err = b.capacity()
		case "compare":
			var rates []float64
			for _, r := range strings.Split(*cmpRates, ",") {
				v, perr := strconv.ParseFloat(r, 64)
				if perr != nil || v <= 0 {
					fmt.Fprintf(os.Stderr, "satemu-bench: -compare-rates: bad rate %q\n", r)
					os.Exit(2)
				}
				rates = append(rates, v)
			}
			err = b.compare(strings.Split(*paths, ","), rates)
		default:
			err = fmt.Errorf("unknown section %q", s)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "satemu-bench:", s+":", err)
			chain.Close()
			os.Exit(1)
		}
	}
}

func numCPU() int {
	data, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(data), "processor\t:")
}

func loadavg() string {
	data, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// run starts satemu with cfg, runs f, stops satemu.
func (b *bench) run(cfg string, f func(emu *netns.Satemu) error) error {
	emu, err := b.chain.StartSatemu(b.bin, b.dir, []byte(cfg), b.flags...)
	if err != nil {
		return err
	}
	ferr := f(emu)
	if err := emu.Stop(); err != nil {
		return errors.Join(ferr, err)
	}
	return ferr
}

func (b *bench) pair() (snd, rcv *net.UDPConn, dst *net.UDPAddr, err error) {
	b.port++
	rcv, err = netns.ListenUDP(b.chain.Recv, fmt.Sprintf("%s:%d", netns.ReceiverIP, b.port))
	if err != nil {
		return nil, nil, nil, err
	}
	snd, err = netns.ListenUDP(b.chain.Sender, netns.SenderIP+":0")
	if err != nil {
		rcv.Close()
		return nil, nil, nil, err
	}
	return snd, rcv, &net.UDPAddr{IP: net.ParseIP(netns.ReceiverIP), Port: b.port}, nil
}

func num(m map[string]any, k string) float64 {
	v, _ := m[k].(float64)
	return v
}

func drops(m map[string]any, k string) float64 {
	d, _ := m["drops"].(map[string]any)
	v, _ := d[k].(float64)
	return v
}

// warmARP resolves both neighbours so the first measured frames do not wait
// for ARP through the delayed link.
func (b *bench) warmARP() error {
	out, err := netns.Command(b.chain.Sender, "ping", "-n", "-c", "1", "-W", "5", netns.ReceiverIP).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ping: %w: %s", err, out)
	}
	return nil
}

// blastMeasure offers load for dur and returns the receiver's wire rate
// over [skip, dur], satemu's output rate over the same window, and the
// a_to_b counters at the end.
func (b *bench) blastMeasure(emu *netns.Satemu, offered float64, dur, skip time.Duration) (rcvRate, emuRate, inRate float64, st map[string]any, err error) {
	snd, rcv, dst, err := b.pair()
	if err != nil {
		return 0, 0, 0, nil, err
	}
	defer snd.Close()
	defer rcv.Close()
	var sink netns.Sink
	go sink.RunSink(rcv)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	var s0 map[string]any
	var t0 time.Time
	go func() {
		time.Sleep(skip)
		t0 = time.Now()
		s0, _ = emu.DirStats("a_to_b")
	}()
	errc := make(chan error, 1)
	go func() { _, err := netns.Blast(ctx, snd, dst, 1500-netns.WireOverhead, offered, dur); errc <- err }()
	time.Sleep(dur)
	s1, err := emu.DirStats("a_to_b")
	t1 := time.Now()
	if err != nil {
		return 0, 0, 0, nil, err
	}
	if err := <-errc; err != nil {
		return 0, 0, 0, nil, err
	}
	rcvRate = sink.WireRate(start.Add(skip), t1)
	if s0 != nil {
		emuRate = (num(s1, "bytes_out") - num(s0, "bytes_out")) * 8 / t1.Sub(t0).Seconds()
		inRate = (num(s1, "bytes_in") - num(s0, "bytes_in")) * 8 / t1.Sub(t0).Seconds()
	}
	time.Sleep(100 * time.Millisecond)
	return rcvRate, emuRate, inRate, s1, nil
}

func (b *bench) rate() error {
	fmt.Println("\n== wire rate at 8 Mbit/s (1500-byte frames, offered 12 Mbit/s, measured from 1.5 s to 6 s)")
	for _, c := range []struct{ name, dir string }{
		{"rate 8M", `{"rate_bps":8000000,"delay_ms":10}`},
		{"rate 8M ceil 10M cburst 128k", `{"rate_bps":8000000,"ceil_bps":10000000,"cburst_bytes":131072,"delay_ms":10}`},
	} {
		cfg := fmt.Sprintf(`{"seed":1,"a_to_b":%s,"b_to_a":{"delay_ms":10}}`, c.dir)
		err := b.run(cfg, func(emu *netns.Satemu) error {
			if err := b.warmARP(); err != nil {
				return err
			}
			rr, er, _, _, err := b.blastMeasure(emu, 12e6, 6*time.Second, 1500*time.Millisecond)
			if err != nil {
				return err
			}
			fmt.Printf("%-30s receiver %.4f Mbit/s (%+.2f%%), satemu output %.4f Mbit/s (%+.2f%%)\n",
				c.name, rr/1e6, (rr/8e6-1)*100, er/1e6, (er/8e6-1)*100)
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) rtt() error {
	fmt.Println("\n== RTT error at 600 ms RTT (300 ms each way), 64-byte UDP probes every 10 ms for 8 s")
	cases := []struct {
		name, cfg string
		load      float64
	}{
		{"8 Mbit/s link, idle", `{"seed":1,"a_to_b":{"rate_bps":8000000,"delay_ms":300},"b_to_a":{"rate_bps":8000000,"delay_ms":300}}`, 0},
		// 75%: at 95% a burst from the (user-space, preemptible) load
		// sender leaves a queue that drains at 5% of the rate, and the probes
		// then measure queueing, not delay error.
		{"8 Mbit/s link, 6 Mbit/s UDP load a->b", `{"seed":1,"a_to_b":{"rate_bps":8000000,"delay_ms":300},"b_to_a":{"rate_bps":8000000,"delay_ms":300}}`, 6e6},
		{"unshaped link, 100 Mbit/s UDP load a->b", `{"seed":1,"a_to_b":{"delay_ms":300},"b_to_a":{"delay_ms":300}}`, 100e6},
	}
	for _, c := range cases {
		err := b.run(c.cfg, func(emu *netns.Satemu) error {
			if err := b.warmARP(); err != nil {
				return err
			}
			snd, rcv, dst, err := b.pair()
			if err != nil {
				return err
			}
			defer snd.Close()
			defer rcv.Close()
			go netns.Echo(rcv)
			ts, err := openTap(b.chain.Sender, b.chain.SenderIf, b.port)
			if err != nil {
				return err
			}
			tr, err := openTap(b.chain.Recv, b.chain.RecvIf, b.port)
			if err != nil {
				ts.close()
				return err
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if c.load > 0 {
				ls, lr, ld, err := b.pair()
				if err != nil {
					return err
				}
				defer ls.Close()
				defer lr.Close()
				go func() {
					buf := make([]byte, 2048)
					for {
						if _, err := lr.Read(buf); err != nil {
							return
						}
					}
				}()
				go func() { _, _ = netns.Blast(ctx, ls, ld, 1500-netns.WireOverhead, c.load, 10*time.Second) }()
				time.Sleep(time.Second)
			}
			rtts := netns.Probe(snd, dst, 10*time.Millisecond, 8*time.Second, 800*time.Millisecond)
			cancel()
			emRTT := emulatedRTTs(ts.close(), tr.close())
			st, err := emu.DirStats("a_to_b")
			if err != nil {
				return err
			}
			const want = 600 * time.Millisecond
			ms := func(d time.Duration) float64 { return float64(d-want) / 1e6 }
			fmt.Printf("%s\n  wire (kernel timestamps at both end interfaces): n=%d  RTT error p50 %+.3f ms  p99 %+.3f ms  max %+.3f ms\n",
				c.name, len(emRTT), ms(netns.Quantile(emRTT, 0.5)), ms(netns.Quantile(emRTT, 0.99)), ms(netns.Quantile(emRTT, 1)))
			fmt.Printf("  application (UDP echo, user-space timestamps): n=%d  RTT error p50 %+.3f ms  p99 %+.3f ms  max %+.3f ms\n",
				len(rtts), ms(netns.Quantile(rtts, 0.5)), ms(netns.Quantile(rtts, 0.99)), ms(netns.Quantile(rtts, 1)))
			fmt.Printf("  satemu departure lateness a->b: p50 %.0f us  p99 %.0f us  max %.0f us\n",
				num(st, "tx_late_p50_us"), num(st, "tx_late_p99_us"), num(st, "tx_late_max_us"))
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// wilson returns the 95% Wilson score interval for k successes in n trials.
func wilson(k, n float64) (lo, hi float64) {
	const z = 1.959964
	p := k / n
	den := 1 + z*z/n
	c := (p + z*z/(2*n)) / den
	h := z * math.Sqrt(p*(1-p)/n+z*z/(4*n*n)) / den
	return c - h, c + h
}

func (b *bench) per() error {
	const ber = 1e-5
	const n = 40000
	fmt.Printf("\n== packet error rate at BER %g, %d frames per size (frame size = Ethernet header + payload)\n", ber, n)
	for _, size := range []int{64, 576, 1500} {
		cfg := fmt.Sprintf(`{"seed":11,"a_to_b":{"ber":%g},"b_to_a":{}}`, ber)
		err := b.run(cfg, func(emu *netns.Satemu) error {
			if err := b.warmARP(); err != nil {
				return err
			}
			snd, rcv, dst, err := b.pair()
			if err != nil {
				return err
			}
			defer snd.Close()
			defer rcv.Close()
			var sink netns.Sink
			go sink.RunSink(rcv)
			before, err := emu.DirStats("a_to_b")
			if err != nil {
				return err
			}
			// 10000 frames/s: far below capacity, so no other loss.
			rate := 10000 * float64(size) * 8
			sent, err := netns.Blast(context.Background(), snd, dst, size-netns.WireOverhead, rate, time.Duration(n/10000)*time.Second)
			if err != nil {
				return err
			}
			time.Sleep(200 * time.Millisecond)
			st, err := emu.DirStats("a_to_b")
			if err != nil {
				return err
			}
			in := num(st, "frames_in") - num(before, "frames_in")
			berDrops := drops(st, "ber") - drops(before, "ber")
			lost := float64(sent - sink.Count())
			want := link.PER(ber, size)
			lo, hi := wilson(berDrops, in)
			flag := "inside"
			if want < lo || want > hi {
				flag = "OUTSIDE"
			}
			fmt.Printf("%5d-byte frames: formula %.5f  measured %.5f (95%% CI %.5f..%.5f, formula %s)  end-to-end loss %.5f of %d sent\n",
				size, want, berDrops/in, lo, hi, flag, lost/float64(sent), sent)
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) capacity() error {
	fmt.Println("\n== capacity with 300 ms one-way delay (1500-byte frames, offered 1.1 x rate, 5 s, measured after 1.5 s;")
	fmt.Println("   queue = 1 s at the rate, so sender burstiness does not cause drops)")
	fmt.Println("   holds = satemu output within 2% of min(rate, input), no kernel receive drops, departure lateness p99 <= 500 us")
	targets := []float64{8e6, 100e6, 1e9}
	if b.capRates != nil {
		targets = b.capRates
	}
	for _, target := range targets {
		rates := []float64{target}
		if target >= 1e9 && b.capRates == nil {
			rates = []float64{1e9, 700e6, 500e6, 300e6, 200e6}
		}
		best := 0.0
		for _, r := range rates {
			qb := max(int(r/8), 1<<20)
			cfg := fmt.Sprintf(`{"seed":1,"a_to_b":{"rate_bps":%g,"delay_ms":300,"queue_packets":0,"queue_bytes":%d},"b_to_a":{"delay_ms":300}}`, r, qb)
			var ok bool
			err := b.run(cfg, func(emu *netns.Satemu) error {
				if err := b.warmARP(); err != nil {
					return err
				}
				rr, er, in, st, err := b.blastMeasure(emu, 1.1*r, 5*time.Second, 1500*time.Millisecond)
				if err != nil {
					return err
				}
				late := num(st, "tx_late_p99_us")
				kd := num(st, "rx_kernel_drops")
				want := math.Min(r, in)
				ok = math.Abs(er/want-1) <= 0.02 && late <= 500 && kd == 0
				verdict := "holds"
				switch {
				case ok && in < 0.98*r:
					verdict = "holds at the offered rate (sender-limited)"
					ok = false
				case ok:
				case in < 0.98*r && kd == 0:
					// The sender could not offer the rate: not the emulator's limit.
					verdict = "FAILS (sender-limited)"
				default:
					verdict = "FAILS"
				}
				fmt.Printf("rate %7.1f Mbit/s: satemu input %8.2f, output %8.2f Mbit/s (%+.2f%%), receiver %8.2f Mbit/s, lateness p99 %4.0f us, kernel rx drops %.0f, queue drops %.0f -> %s\n",
					r/1e6, in/1e6, er/1e6, (er/r-1)*100, rr/1e6, late, kd, drops(st, "queue"), verdict)
				return nil
			})
			if err != nil {
				return err
			}
			if ok {
				best = r
				break
			}
		}
		fmt.Printf("   target %.0f Mbit/s: highest rate that holds %.0f Mbit/s\n", target/1e6, best/1e6)
	}
	return nil
}
