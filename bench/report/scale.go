package report

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/xlbproject/xlb/bench/stats"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/plan"
	"github.com/xlbproject/xlb/internal/state"
	"github.com/xlbproject/xlb/internal/testenv/genconfig"
	"golang.org/x/sys/unix"
)

// scale measures what a second core gives, for the model of
// docs/PERFORMANCE.md ("Scaling with cores"): planning the 3,000
// services of the control part with GOMAXPROCS 1 (one table worker)
// against GOMAXPROCS 2 (two), and the forwarder's tracked ACK hit on one
// pinned CPU against two CPUs at once, each with its own flow (as RSS
// spreads flows). One and two alternate, round by round, so that the
// machine's other load weighs on both alike.
func (b *runner) scale(ctx context.Context) error {
	if runtime.NumCPU() < 2 {
		return fmt.Errorf("%w: one CPU here, two needed", errUnavailable)
	}
	rounds, repeat := 7, uint32(2_000_000)
	if b.o.Smoke {
		rounds, repeat = 2, 100_000
	}
	var md strings.Builder
	if err := b.scalePlan(ctx, rounds, &md); err != nil {
		return err
	}
	if err := b.scaleHit(ctx, rounds, repeat, &md); err != nil {
		return err
	}
	b.r.md["scale"] = md.String()
	return nil
}

// scalePlan times plan.Planner.Plan of the control part's config (3,000
// services x 30 backends, M = 16381) into an empty state, with
// GOMAXPROCS and table workers 1, then 2, rounds times.
func (b *runner) scalePlan(ctx context.Context, rounds int, md *strings.Builder) error {
	cfg, err := config.Parse(genconfig.Control(ctlServices, ctlBackends, ctlTable, -1, 0), "bench.yaml")
	if err != nil {
		return fmt.Errorf("parse: %w", err)
	}
	desired := cfg.Desired()
	lim := plan.Limits{MaxServices: 4096, MaxReals: ctlMaxReals}
	prev := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(prev)
	b.printf("  plan of %d services x %d backends (M = %d) into an empty state, GOMAXPROCS 1 then 2 (table workers alike), %d rounds\n",
		ctlServices, ctlBackends, ctlTable, rounds)
	var one, two []float64
	for range rounds {
		for _, procs := range []int{1, 2} {
			if err := ctx.Err(); err != nil {
				return err
			}
			runtime.GOMAXPROCS(procs)
			runtime.GC()
			p := plan.NewPlanner(lim)
			p.SetWorkers(procs)
			start := time.Now()
			if _, err := p.Plan(state.Empty(), plan.Input{Desired: desired}); err != nil {
				return fmt.Errorf("plan: %w", err)
			}
			d := ms(time.Since(start))
			if procs == 1 {
				one = append(one, d)
			} else {
				two = append(two, d)
			}
		}
	}
	m1, m2 := stats.Median(one), stats.Median(two)
	b.put("scale.plan_3000_1cpu_ms", m1, "ms", "GOMAXPROCS 1, one table worker (median)")
	b.put("scale.plan_3000_2cpu_ms", m2, "ms", "GOMAXPROCS 2, two table workers, alternate runs (median)")
	b.put("scale.plan_speedup_2cpu", m1/m2, "×", "plan time on 1 CPU over plan time on 2")
	fmt.Fprintf(md, "Planning 3,000 services × 30 backends (M = 16381) into an empty state, %d rounds alternating:\n\n", rounds)
	md.WriteString("| CPUs (GOMAXPROCS, table workers) | plan ms, median | runs |\n|---:|---:|---|\n")
	fmt.Fprintf(md, "| 1 | %s | %s |\n| 2 | %s | %s |\n\nSpeedup on 2: %.2f×.\n\n", fmtNum(m1), fmtRuns(one), fmtNum(m2), fmtRuns(two), m1/m2)
	return nil
}

// scaleHit loads the forwarder with the sync part's service (a TCP VIP,
// four backends, GRE) and times a tracked ACK hit: repeat packets of one
// flow through BPF_PROG_TEST_RUN (the kernel's time per packet) on CPU
// b.o.CPU alone, then on CPUs 0 and 1 at once, each its own flow.
func (b *runner) scaleHit(ctx context.Context, rounds int, repeat uint32, md *strings.Builder) error {
	dir, err := privatePinDir("scale")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	dp, err := datapath.Load(datapath.Options{Interface: "lo", PinDir: dir, ConntrackEntries: 1 << 16,
		MaxServices: 16, MaxReals: 64, Logger: quietLogger()})
	if err != nil {
		return err
	}
	defer dp.Close()
	if _, err := dp.Apply(syncBenchState()); err != nil {
		return err
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		return err
	}
	frames := [2][]byte{scaleFrame(40000), scaleFrame(40001)}
	alone := b.o.CPU
	b.printf("  tracked TCP ACK hit v4 (BPF_PROG_TEST_RUN, %d packets a run): CPU %d alone, then CPUs 0 and 1 at once, %d rounds\n",
		repeat, alone, rounds)
	var oneMpps, twoMpps, oneNs, twoNs []float64
	for r := range rounds + 1 { // round 0 warms up: each CPU's slice learns its flow
		if err := ctx.Err(); err != nil {
			return err
		}
		ns, err := hitsOn(dp.Program(), lo.Index, []int{alone}, [][]byte{frames[alone%2]}, repeat)
		if err != nil {
			return err
		}
		both, err := hitsOn(dp.Program(), lo.Index, []int{0, 1}, frames[:], repeat)
		if err != nil {
			return err
		}
		if r == 0 {
			continue
		}
		oneNs, oneMpps = append(oneNs, ns[0]), append(oneMpps, 1e3/ns[0])
		twoNs, twoMpps = append(twoNs, (both[0]+both[1])/2), append(twoMpps, 1e3/both[0]+1e3/both[1])
	}
	m1, m2 := stats.Median(oneMpps), stats.Median(twoMpps)
	b.put("scale.ack_hit_1cpu_ns", stats.Median(oneNs), "ns", fmt.Sprintf("CPU %d alone", alone))
	b.put("scale.ack_hit_2cpu_ns", stats.Median(twoNs), "ns", "each of CPUs 0 and 1, both busy (mean of the two, median of rounds)")
	b.put("scale.ack_hit_1cpu_mpps", m1, "Mpps", "one CPU: 1000 / ns per packet")
	b.put("scale.ack_hit_2cpu_mpps", m2, "Mpps", "two CPUs: the sum of each CPU's rate")
	b.put("scale.ack_hit_speedup_2cpu", m2/m1, "×", "two CPUs' packet rate over one's")
	fmt.Fprintf(md, "A tracked TCP ACK hit v4 (the sync part's service, GRE; BPF_PROG_TEST_RUN, %d packets a run, the kernel's time per packet), "+
		"%d rounds alternating one CPU alone and two at once, each CPU its own flow:\n\n", repeat, rounds)
	md.WriteString("| CPUs | ns per packet per CPU, median | Mpps in all, median | runs, Mpps |\n|---:|---:|---:|---|\n")
	fmt.Fprintf(md, "| 1 | %s | %s | %s |\n| 2 | %s | %s | %s |\n\nSpeedup on 2: %.2f×.\n",
		fmtNum(stats.Median(oneNs)), fmtNum(m1), fmtRuns(oneMpps), fmtNum(stats.Median(twoNs)), fmtNum(m2), fmtRuns(twoMpps), m2/m1)
	return nil
}

// scaleFrame is a TCP ACK from a client to the sync part's VIP.
func scaleFrame(sport uint16) []byte {
	f := packet.Flow{Src: netip.MustParseAddr("192.0.2.10"), Dst: syncVIP, SrcPort: sport, DstPort: 80,
		Proto: packet.ProtoTCP}
	return f.Frame()
}

// hitsOn runs frames[i] repeat times on cpus[i], all at once (each on a
// fresh OS thread pinned to its CPU, discarded afterwards), and returns
// each CPU's time per packet in ns. Every run must forward (XDP_TX).
func hitsOn(prog *ebpf.Program, ifindex int, cpus []int, frames [][]byte, repeat uint32) ([]float64, error) {
	type res struct {
		i   int
		ns  float64
		err error
	}
	out := make(chan res, len(cpus))
	start := make(chan struct{})
	for i, cpu := range cpus {
		go func() {
			runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
			var set unix.CPUSet
			set.Set(cpu)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				out <- res{i, 0, fmt.Errorf("pin to cpu %d: %w", cpu, err)}
				return
			}
			<-start
			ret, ns, err := testRun(prog, frames[i], ifindex, repeat)
			if err == nil && ret != datapath.XDPTX {
				err = fmt.Errorf("cpu %d: verdict %d, want XDP_TX", cpu, ret)
			}
			out <- res{i, ns, err}
		}()
	}
	close(start)
	ns := make([]float64, len(cpus))
	var first error
	for range cpus {
		r := <-out
		ns[r.i] = r.ns
		if r.err != nil && first == nil {
			first = r.err
		}
	}
	return ns, first
}

// fmtRuns lists figures for a table cell.
func fmtRuns(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmtNum(x)
	}
	return strings.Join(s, ", ")
}

// testRunAttr is the test member of union bpf_attr (uapi/linux/bpf.h).
type testRunAttr struct {
	progFD, retval, dataSizeIn, dataSizeOut uint32
	dataIn, dataOut                         uint64
	repeat, duration                        uint32
	ctxSizeIn, ctxSizeOut                   uint32
	ctxIn, ctxOut                           uint64
	flags, cpu, batchSize                   uint32
	_                                       uint32
}

// bpfProgTestRun is the BPF_PROG_TEST_RUN command of bpf(2).
const bpfProgTestRun = 10

// testRun runs prog over frame repeat times in the kernel as if it had
// arrived on ifindex (an xdp_md context: Program.Benchmark gives none, and
// the forwarder passes packets of other interfaces) and returns the
// verdict and the kernel's time per run in ns (time off the CPU left out).
// An interrupted run is started again.
func testRun(prog *ebpf.Program, frame []byte, ifindex int, repeat uint32) (uint32, float64, error) {
	ctx := [6]uint32{1: uint32(len(frame)), 3: uint32(ifindex)}
	out := make([]byte, len(frame)+256)
	for {
		attr := testRunAttr{progFD: uint32(prog.FD()), dataSizeIn: uint32(len(frame)), dataSizeOut: uint32(len(out)),
			dataIn: uint64(uintptr(unsafe.Pointer(&frame[0]))), dataOut: uint64(uintptr(unsafe.Pointer(&out[0]))),
			repeat: repeat, ctxSizeIn: uint32(unsafe.Sizeof(ctx)), ctxIn: uint64(uintptr(unsafe.Pointer(&ctx[0])))}
		_, _, errno := unix.Syscall(unix.SYS_BPF, bpfProgTestRun, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
		runtime.KeepAlive(frame)
		runtime.KeepAlive(out)
		runtime.KeepAlive(&ctx)
		switch errno {
		case 0:
			return attr.retval, float64(attr.duration), nil
		case unix.EINTR:
			continue
		default:
			return 0, 0, fmt.Errorf("BPF_PROG_TEST_RUN: %w", errno)
		}
	}
}
