package report

import (
	"context"
	"fmt"
	"runtime"
	"strings"

	"github.com/xlbproject/xlb/bench/throughput"
	"github.com/xlbproject/xlb/internal/datapath"
)

// tput measures live-frame throughput (the Mpps targets) with
// bench/throughput: the forwarder attached to a veth end (native XDP,
// then generic), a generator program making frames with
// BPF_F_TEST_XDP_LIVE_FRAMES, counted at the receiver, for the paper's
// three traffic kinds (Fig. 9); and the latency the forwarder adds per
// packet.
func (b *runner) tput(ctx context.Context) error {
	native, split, generic := throughput.DefaultOptions(), throughput.DefaultOptions(), throughput.DefaultOptions()
	if b.o.Smoke {
		native, split, generic = throughput.SmokeOptions(), throughput.SmokeOptions(), throughput.SmokeOptions()
		generic.Baseline = false
	}
	generic.Mode, generic.LatencyProbes = datapath.ModeGeneric, 0
	// The forwarder's NAPI thread alone on the measured CPU, generator and
	// receiver on the other: the other honest reading of "one core".
	split.Placement, split.Baseline, split.LatencyProbes = throughput.PlacementSplit, false, 0
	native.Methods = throughput.AllMethods()
	opts := []*throughput.Options{&native, &generic}
	if runtime.NumCPU() > 1 {
		opts = []*throughput.Options{&native, &split, &generic}
	}
	var all []throughput.Results
	for _, o := range opts {
		if b.o.CPU != o.CPU {
			o.CPU = b.o.CPU
			if o.GenCPU == o.CPU {
				o.GenCPU = (o.CPU + 1) % runtime.NumCPU()
			}
		}
		if b.o.Verbose {
			o.Logf = func(format string, args ...any) { b.printf("    "+format+"\n", args...) }
		}
		where := fmt.Sprintf("generator, forwarder and receiver on CPU %d", o.CPU)
		if o.Placement == throughput.PlacementSplit {
			where = fmt.Sprintf("forwarder on CPU %d, generator and receiver on CPU %d", o.CPU, o.GenCPU)
		}
		b.printf("  %s XDP, %s placement (%s); %d runs of %s after %s warm-up; baseline %v, %d latency probes\n",
			o.Mode, o.Placement, where, o.Runs, o.Duration, o.Warmup, o.Baseline, o.LatencyProbes)
		res, err := throughput.Measure(ctx, *o)
		if err != nil {
			return fmt.Errorf("%s: %w", o.Mode, err)
		}
		all = append(all, res)
		group := "mpps_one_core"
		if o.Mode == datapath.ModeGeneric {
			group = "mpps_generic_xdp"
		} else if o.Placement == throughput.PlacementSplit {
			group = "mpps_one_core_split"
		}
		headline := map[throughput.Traffic]float64{throughput.SYN: res.SynMpps,
			throughput.Established: res.EstablishedMpps, throughput.Constant: res.ConstantMpps}
		for _, f := range res.Figures {
			prefix := "throughput." + string(o.Mode) + "_" + string(f.Traffic)
			if o.Placement == throughput.PlacementSplit {
				prefix = "throughput." + string(o.Mode) + "_split_" + string(f.Traffic)
			}
			detail := fmt.Sprintf("one CPU doing the measured work (%.0f ns CPU per packet, busy %.0f%%); received %.2f Mpps",
				f.CPUNs, 100*f.Busy, f.Mpps)
			if o.Placement == throughput.PlacementSplit {
				detail = fmt.Sprintf("the forwarder's NAPI thread alone on CPU %d, generator and receiver on CPU %d (%.0f ns CPU per packet, busy %.0f%%); received %.2f Mpps",
					o.CPU, o.GenCPU, f.CPUNs, 100*f.Busy, f.Mpps)
			}
			if f.ForwarderOnlyMpps > 0 {
				detail += fmt.Sprintf("; forwarder alone %.2f Mpps (%.0f ns)", f.ForwarderOnlyMpps, f.ForwarderOnlyNs)
			}
			b.put(group+"."+string(f.Traffic), headline[f.Traffic], "Mpps", detail)
			b.r.set(prefix+"_received_mpps", f.Mpps)
			b.r.set(prefix+"_cpu_ns", f.CPUNs)
			b.r.set(prefix+"_busy", f.Busy)
			if f.ForwarderOnlyMpps > 0 {
				b.r.set(prefix+"_forwarder_only_mpps", f.ForwarderOnlyMpps)
				b.r.set(prefix+"_forwarder_only_ns", f.ForwarderOnlyNs)
			}
			if f.Latency != nil {
				b.put(prefix+"_latency_added_ns", f.Latency.Added, "ns",
					fmt.Sprintf("median %.0f with the forwarder vs %.0f with a reflector (paper: ~350 ns)", f.Latency.Median, f.Latency.BaselineMedian))
			}
		}
		for _, f := range res.Baseline {
			b.r.set("throughput."+string(o.Mode)+"_"+string(f.Traffic)+"_reflect_mpps", f.CapacityMpps)
		}
		b.putTputMethods(res)
		if o.Mode == datapath.ModeNative && o.Placement == throughput.PlacementShared {
			b.tputTargets(group, res, headline)
		}
	}
	b.r.Details.Throughput = all
	b.r.md["tput"] = tputMarkdown(all) + b.tputMethodsMarkdown(all)
	return nil
}

// tputTargets notes the native shared placement's figures on their
// targets (mpps_one_core) and records each over the reflector's, the
// same chain with an XDP_TX-only program in the forwarder's place
// (vs_reflector).
func (b *runner) tputTargets(group string, res throughput.Results, headline map[throughput.Traffic]float64) {
	for _, f := range res.Figures {
		note := fmt.Sprintf("%.0f ns CPU per packet for generator + forwarder + receiver", f.CPUNs)
		if f.ForwarderOnlyMpps > 0 {
			note += fmt.Sprintf("; forwarder alone %.2f Mpps (%.0f ns)", f.ForwarderOnlyMpps, f.ForwarderOnlyNs)
		}
		for _, bf := range res.Baseline {
			if bf.Traffic == f.Traffic {
				note += fmt.Sprintf("; an XDP_TX-only program in its place: %.2f Mpps", bf.CapacityMpps)
				if bf.CapacityMpps > 0 {
					b.put("vs_reflector."+string(f.Traffic), headline[f.Traffic]/bf.CapacityMpps, "×",
						fmt.Sprintf("%.2f Mpps over %.2f Mpps of the chain with an XDP_TX-only program in the forwarder's place", headline[f.Traffic], bf.CapacityMpps))
				}
			}
		}
		b.targetNote(group+"."+string(f.Traffic), "%s", note)
	}
}

func tputMarkdown(all []throughput.Results) string {
	var s strings.Builder
	s.WriteString("`bench/throughput`: the forwarder attached (native, then generic XDP) to one end of a veth pair in a private " +
		"namespace; a generator program makes 64-byte frames with `BPF_F_TEST_XDP_LIVE_FRAMES` (a new flow per packet for " +
		"SYN, 10,000 established flows round robin, one constant 5-tuple), a counting program at the other end checks and " +
		"counts the encapsulated frames. Mpps on one core = 1000 / (CPU ns per packet of the measured work: with the shared " +
		"placement the whole chain, generator + forwarder + receiver, on one CPU); \"forwarder alone\" subtracts the same " +
		"chain with a program that only answers XDP_TX (the reflector). Medians over the runs.\n\n")
	s.WriteString("| XDP | placement | traffic | Mpps on one core | CPU ns/packet | received Mpps | reflector Mpps on one core | forwarder alone: ns (Mpps) | latency added, ns |\n|---|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range all {
		for _, f := range r.Figures {
			refl, alone, lat := "—", "—", "—"
			for _, bf := range r.Baseline {
				if bf.Traffic == f.Traffic {
					refl = fmt.Sprintf("%.2f", bf.CapacityMpps)
				}
			}
			if f.ForwarderOnlyMpps > 0 {
				alone = fmt.Sprintf("%.0f (%.2f)", f.ForwarderOnlyNs, f.ForwarderOnlyMpps)
			}
			if f.Latency != nil {
				lat = fmt.Sprintf("%.0f", f.Latency.Added)
			}
			fmt.Fprintf(&s, "| %s | %s | %s | %.2f | %.0f | %.2f | %s | %s | %s |\n", r.Mode, r.Placement, f.Traffic,
				f.CapacityMpps, f.CPUNs, f.Mpps, refl, alone, lat)
		}
	}
	return s.String()
}
