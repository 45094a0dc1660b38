package throughput

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/xlbproject/xlb/bench/stats"
	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/progrun"
	"golang.org/x/sys/unix"
)

// generate runs gen_tx repeat times in live-frames mode with the generator
// end as the ingress device: every XDP_TX is a transmit on it. It must run
// on the namespace's thread (the ingress ifindex is resolved in the
// caller's namespace). A run cut short by a signal is not repeated
// (gen_seq counts what was made).
func (h *harness) generate(repeat uint32) error {
	// The program writes the whole frame.
	_, err := progrun.Run(progrun.XDP{Prog: h.objs.GenTx, Data: make([]byte, genFrame), Ifindex: h.genIdx,
		Repeat: repeat, Flags: progrun.FlagLiveFrames})
	if err != nil {
		return fmt.Errorf("live frames: %w", err)
	}
	return nil
}

// snap is the counters at one instant.
type snap struct {
	at  time.Time
	seq uint64
	rx  tputGenStats
	fwd map[string]uint64
	cpu uint64 // ns: the forwarder's NAPI thread (split), the generator's thread and ksoftirqd (shared)
}

func (h *harness) rxStats() (tputGenStats, error) {
	var per []tputGenStats
	var s tputGenStats
	if err := h.objs.GenRx.Lookup(uint32(0), &per); err != nil {
		return s, fmt.Errorf("read gen_rx: %w", err)
	}
	for _, p := range per {
		s.Rx += p.Rx
		s.Encap += p.Encap
		s.Plain += p.Plain
		s.Bad += p.Bad
		s.Bytes += p.Bytes
		s.LatN += p.LatN
		s.LatSum += p.LatSum
	}
	return s, nil
}

func (h *harness) snapshot() (snap, error) {
	var s snap
	var err error
	if s.rx, err = h.rxStats(); err != nil {
		return s, err
	}
	s.at = time.Now()
	if err := h.objs.GenSeq.Get(&s.seq); err != nil {
		return s, fmt.Errorf("read gen_seq: %w", err)
	}
	if s.fwd, err = h.dp.Stats(); err != nil {
		return s, err
	}
	for _, pid := range []int{h.fwdPid, h.genTid, h.softirqPid} {
		if pid == 0 || (pid == h.genTid && h.o.Placement != PlacementShared) {
			continue
		}
		n, err := taskRuntime(pid)
		if err != nil {
			return s, fmt.Errorf("cpu time of task %d: %w", pid, err)
		}
		s.cpu += n
	}
	return s, nil
}

// backends reads the per-backend counts (summed over CPUs), index b-1 for
// backend 10.0.1.b.
func (h *harness) backends() ([]uint64, error) {
	out := make([]uint64, h.o.Backends)
	for b := range out {
		var per []uint64
		if err := h.objs.GenBackend.Lookup(uint32(b+1), &per); err != nil {
			return nil, fmt.Errorf("read gen_backend: %w", err)
		}
		for _, v := range per {
			out[b] += v
		}
	}
	return out, nil
}

// run is one measured run of traffic t through p.
func (h *harness) run(ctx context.Context, t Traffic, p *ebpf.Program) (Run, error) {
	var r Run
	if err := h.use(p); err != nil {
		return r, err
	}
	if err := h.setGenerator(t, false); err != nil {
		return r, err
	}
	before, err := h.snapshot()
	if err != nil {
		return r, err
	}
	bBefore, err := h.backends()
	if err != nil {
		return r, err
	}
	var stop atomic.Bool
	type window struct {
		s1, s2 snap
		err    error
	}
	wc := make(chan window, 1)
	go func() {
		var w window
		defer func() { stop.Store(true); wc <- w }()
		// The window's ends are read at SCHED_FIFO 2, above the NAPI
		// threads: otherwise a saturated forwarder thread (and the
		// generator) can delay the reads of one snapshot by tens of ms.
		// The thread is never unlocked: Go ends it with the goroutine.
		runtime.LockOSThread()
		if w.err = setFIFO(unix.Gettid(), 2); w.err != nil {
			return
		}
		select {
		case <-time.After(h.o.Warmup):
		case <-ctx.Done():
			w.err = ctx.Err()
			return
		}
		if w.s1, w.err = h.snapshot(); w.err != nil {
			return
		}
		select {
		case <-time.After(h.o.Duration):
		case <-ctx.Done():
			w.err = ctx.Err()
			return
		}
		w.s2, w.err = h.snapshot()
	}()
	var genErr error
	for !stop.Load() {
		if genErr = h.generate(1 << 16); genErr != nil {
			break
		}
	}
	stop.Store(true)
	w := <-wc
	if genErr != nil {
		return r, genErr
	}
	if w.err != nil {
		return r, w.err
	}
	time.Sleep(20 * time.Millisecond) // the rings drain
	after, err := h.snapshot()
	if err != nil {
		return r, err
	}
	bAfter, err := h.backends()
	if err != nil {
		return r, err
	}
	s1, s2 := w.s1, w.s2
	r.Seconds = s2.at.Sub(s1.at).Seconds()
	r.Offered = s2.seq - s1.seq
	r.RxTotal = s2.rx.Rx - s1.rx.Rx
	r.RxBad = s2.rx.Bad - s1.rx.Bad
	if p == h.xlb {
		r.Received = s2.rx.Encap - s1.rx.Encap
	} else {
		r.Received = s2.rx.Plain - s1.rx.Plain
	}
	r.Mpps = float64(r.Received) / r.Seconds / 1e6
	r.Forwarder = map[string]uint64{}
	for k, v := range s2.fwd {
		if d := v - s1.fwd[k]; d != 0 {
			r.Forwarder[k] = d
		}
	}
	r.CPU = time.Duration(s2.cpu - s1.cpu)
	r.Backends = make([]uint64, len(bAfter))
	for i := range bAfter {
		r.Backends[i] = bAfter[i] - bBefore[i]
	}
	txs := txStat(h.method)
	if tx, rx := after.fwd[txs]-before.fwd[txs], after.rx.Encap-before.rx.Encap; tx > rx {
		r.LostAfterForwarder = tx - rx
	}
	return r, h.check(t, p, r, before, after)
}

// check verifies a run: the receiver saw only what it should, and the
// forwarder's counters agree with the receiver's and with the traffic.
func (h *harness) check(t Traffic, p *ebpf.Program, r Run, before, after snap) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s through %s: %s (run %+v)", ErrCheck, t, progName(h, p),
			fmt.Sprintf(format, args...), r)
	}
	if r.Received == 0 {
		return fail("nothing received")
	}
	// Every frame the receiver saw over the whole run (read with the
	// rings drained, so exact) is one of the three kinds.
	if rx, kinds := after.rx.Rx-before.rx.Rx, (after.rx.Encap-before.rx.Encap)+(after.rx.Plain-before.rx.Plain)+(after.rx.Bad-before.rx.Bad); rx != kinds {
		return fail("the receiver saw %d frames but classified %d", rx, kinds)
	}
	if r.RxBad != 0 || after.rx.Bad != before.rx.Bad {
		return fail("%d frames at the receiver were neither encapsulated toward a backend nor the generated frame",
			after.rx.Bad-before.rx.Bad)
	}
	if p != h.xlb {
		if after.rx.Encap != before.rx.Encap {
			return fail("encapsulated frames without the forwarder")
		}
		return nil
	}
	if after.rx.Plain != before.rx.Plain {
		return fail("unencapsulated frames came back through the forwarder")
	}
	for k, v := range r.Forwarder {
		if strings.HasPrefix(k, "drop_") || strings.HasPrefix(k, "pass_") || k == "forward_redirect" {
			return fail("forwarder counted %s=%d", k, v)
		}
	}
	txs := txStat(h.method)
	tx := r.Forwarder[txs]
	// The window's ends read the receiver's and the forwarder's counters
	// one after the other while frames flow (and the reading thread may
	// be preempted in between): loose here, exact over the whole run.
	if diff := math.Abs(float64(tx) - float64(r.Received)); diff > 4096+float64(tx)/20 {
		return fail("forwarder sent %d, receiver got %d", tx, r.Received)
	}
	sent, got := after.fwd[txs]-before.fwd[txs], after.rx.Encap-before.rx.Encap
	if got > sent || r.LostAfterForwarder > sent/100 {
		return fail("over the run the forwarder sent %d, the receiver got %d", sent, got)
	}
	want := "ct_hit"
	if t == SYN {
		want = "ct_miss"
	}
	if h.method == NATReply {
		want = "nat_reply" // a reply matches no VIP: no conntrack lookup
	}
	if got := r.Forwarder[want]; float64(got) < 0.99*float64(tx) {
		return fail("%s=%d of %d forwarded", want, got, tx)
	}
	var sum uint64
	for _, n := range r.Backends {
		sum += n
	}
	if sum != after.rx.Encap-before.rx.Encap {
		return fail("per-backend counts sum to %d, encapsulated frames %d", sum, after.rx.Encap-before.rx.Encap)
	}
	return nil
}

func progName(h *harness, p *ebpf.Program) string {
	if p == h.xlb {
		return "xlb (" + string(h.method) + ")"
	}
	return "reflect"
}

// checkSample has gen_count copy one encapsulated frame and checks it in
// Go: GRE from the node to a backend (outer checksum included), carrying
// the generated packet unchanged from its IP header on.
func (h *harness) checkSample(ctx context.Context, t Traffic) error {
	if err := h.use(h.xlb); err != nil {
		return err
	}
	if err := h.setGenerator(t, false); err != nil {
		return err
	}
	if err := h.objs.RxWant.Set(uint32(1)); err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		if err := h.generate(64); err != nil {
			return err
		}
		time.Sleep(5 * time.Millisecond)
		var want uint32
		if err := h.objs.RxWant.Get(&want); err != nil {
			return err
		}
		if want == 0 {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%w: no encapsulated frame sampled", ErrCheck)
		}
	}
	var b [88]byte
	if err := h.objs.RxSample.Get(&b); err != nil {
		return err
	}
	tun, err := packet.ParseTunnel(b[:])
	if err != nil {
		return fmt.Errorf("%w: sampled frame: %v", ErrCheck, err)
	}
	if tun.Kind != "gre" || tun.Outer != nodeV4 || !slices.Equal(b[:6], genMAC) || !slices.Equal(b[6:12], nodeMAC) {
		return fmt.Errorf("%w: sampled frame %s %s -> %s, MACs % x", ErrCheck, tun.Kind, tun.Outer, tun.Backend, b[:12])
	}
	a := tun.Backend.As4()
	if a[0] != 10 || a[1] != 0 || a[2] != 1 || a[3] < 1 || int(a[3]) > h.o.Backends {
		return fmt.Errorf("%w: sampled frame to %s, not a backend", ErrCheck, tun.Backend)
	}
	fr := frame(t)
	inner := tun.Inner
	if len(inner) != len(fr)-14 || !slices.Equal(inner[16:20], fr[14+16:14+20]) || inner[9] != packet.ProtoTCP ||
		inner[33] != fr[14+33] {
		return fmt.Errorf("%w: sampled frame's inner packet % x, sent % x", ErrCheck, inner, fr[14:])
	}
	return nil
}

// latency sends n single stamped packets of t through p (one test run
// each, waiting for the receiver between them) and returns their one-way
// times in ns, from gen_tx's clock read to gen_count's.
func (h *harness) latency(ctx context.Context, t Traffic, p *ebpf.Program, n int) (lat []float64, err error) {
	if err := h.use(p); err != nil {
		return nil, err
	}
	if err := h.setGenerator(t, true); err != nil {
		return nil, err
	}
	defer func() {
		if e := h.objs.GenStamp.Set(uint32(0)); e != nil && err == nil {
			err = e
		}
	}()
	for len(lat) < n {
		var next uint32
		if err := h.objs.LatNext.Get(&next); err != nil {
			return nil, err
		}
		chunk := min(n-len(lat), latSamples)
		for i := range chunk {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if err := h.generate(1); err != nil {
				return nil, err
			}
			deadline := time.Now().Add(100 * time.Millisecond)
			for {
				var got uint32
				if err := h.objs.LatNext.Get(&got); err != nil {
					return nil, err
				}
				if got-next > uint32(i) {
					break
				}
				if time.Now().After(deadline) {
					return nil, fmt.Errorf("%w: probe %d of %s through %s not received", ErrCheck, len(lat)+i, t, progName(h, p))
				}
				time.Sleep(10 * time.Microsecond)
			}
		}
		var all [latSamples]uint64
		if err := h.objs.LatSamples.Get(&all); err != nil {
			return nil, err
		}
		for i := range uint32(chunk) {
			lat = append(lat, float64(all[(next+i)%latSamples]))
		}
	}
	return lat, nil
}

// latSamples is GEN_LAT_SAMPLES of gen_tput.h.
const latSamples = 4096

// quantile of samples (nearest rank).
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(min(i, len(s)-1), 0)]
}

func mean(v []float64) float64 {
	var sum float64
	for _, x := range v {
		sum += x
	}
	if len(v) == 0 {
		return 0
	}
	return sum / float64(len(v))
}

// measureAll runs every traffic kind: Runs runs of the forwarder (and of
// gen_reflect with Baseline, interleaved), then the latency probes.
func (h *harness) measureAll(ctx context.Context, res *Results) error {
	o := h.o
	for _, t := range o.Traffic {
		if err := h.checkSample(ctx, t); err != nil {
			return err
		}
		fx := Figure{Traffic: t, Program: "xlb"}
		fb := Figure{Traffic: t, Program: "reflect"}
		for i := range o.Runs {
			progs := []*ebpf.Program{h.xlb}
			if o.Baseline {
				progs = append(progs, h.reflector)
				if i%2 == 1 {
					progs[0], progs[1] = progs[1], progs[0]
				}
			}
			for _, p := range progs {
				r, err := h.run(ctx, t, p)
				if err != nil {
					return err
				}
				f := &fx
				if p != h.xlb {
					f = &fb
				}
				f.Runs = append(f.Runs, r)
				o.Logf("%s %s %-11s %-7s run %d: %6.3f Mpps (offered %.3f; cpu %.0f%% busy, %.1f ns/pkt) %v",
					o.Mode, o.Placement, t, f.Program, i+1, r.Mpps, float64(r.Offered)/r.Seconds/1e6,
					100*r.CPU.Seconds()/r.Seconds, float64(r.CPU.Nanoseconds())/float64(r.Received), r.Forwarder)
			}
		}
		fx.summarize(o.Placement == PlacementSplit)
		if o.Baseline {
			fb.summarize(o.Placement == PlacementSplit)
			if fx.CPUNs > 0 && fb.CPUNs > 0 {
				fx.ForwarderOnlyNs = fx.CPUNs - fb.CPUNs
				if fx.ForwarderOnlyNs > 0 {
					fx.ForwarderOnlyMpps = 1e3 / fx.ForwarderOnlyNs
				}
				fx.ForwarderOnlyBestNs = fx.BestCPUNs - fb.BestCPUNs
			}
		}
		line := fmt.Sprintf("%s %s %-11s: xlb %.3f Mpps, %.1f ns/pkt of cpu, best %.1f (one cpu: %.3f Mpps, busy %.0f%%)",
			o.Mode, o.Placement, t, fx.Mpps, fx.CPUNs, fx.BestCPUNs, fx.CapacityMpps, 100*fx.Busy)
		if o.Baseline {
			line += fmt.Sprintf("; reflect %.3f Mpps, %.1f ns/pkt, best %.1f; forwarder alone %.1f ns/pkt = %.2f Mpps, best %.1f",
				fb.Mpps, fb.CPUNs, fb.BestCPUNs, fx.ForwarderOnlyNs, fx.ForwarderOnlyMpps, fx.ForwarderOnlyBestNs)
		}
		o.Logf("%s", line)
		res.Figures = append(res.Figures, fx)
		if o.Baseline {
			res.Baseline = append(res.Baseline, fb)
		}
		switch t {
		case SYN:
			res.SynMpps, res.SynForwarderOnlyMpps = fx.CapacityMpps, fx.ForwarderOnlyMpps
		case Established:
			res.EstablishedMpps, res.EstablishedForwarderOnlyMpps = fx.CapacityMpps, fx.ForwarderOnlyMpps
		case Constant:
			res.ConstantMpps, res.ConstantForwarderOnlyMpps = fx.CapacityMpps, fx.ForwarderOnlyMpps
		}
	}
	if len(o.Methods) > 0 {
		if err := h.measureMethods(ctx, res); err != nil {
			return err
		}
	}
	if o.LatencyProbes == 0 {
		return nil
	}
	// Probes run with both NAPI polls in softirq context on CPU, inside
	// the probe's own test run: with threaded NAPI the time would be
	// mostly the two kernel threads' wakeups (tens of microseconds here).
	if err := h.unthread(); err != nil {
		return err
	}
	for i := range res.Figures {
		f := &res.Figures[i]
		hx, err := h.latency(ctx, f.Traffic, h.xlb, o.LatencyProbes)
		if err != nil {
			return err
		}
		hb, err := h.latency(ctx, f.Traffic, h.reflector, o.LatencyProbes)
		if err != nil {
			return err
		}
		l := &Latency{Probes: o.LatencyProbes, Median: quantile(hx, 0.5), P99: quantile(hx, 0.99),
			Mean: mean(hx), Min: quantile(hx, 0), BaselineMedian: quantile(hb, 0.5), BaselineMin: quantile(hb, 0)}
		l.Added = l.Median - l.BaselineMedian
		f.Latency = l
		o.Logf("%s %-11s latency: median %.0f ns (p99 %.0f, min %.0f) vs reflector %.0f (min %.0f): added %.0f ns",
			o.Mode, f.Traffic, l.Median, l.P99, l.Min, l.BaselineMedian, l.BaselineMin, l.Added)
	}
	return nil
}

// unthread puts both devices' NAPI back in softirq context and moves the
// calling (generator) thread to CPU: a test run's frames are then
// forwarded and received in that run's softirq processing on CPU, which
// tracks the flows in the same connection-table slice as the measurement.
func (h *harness) unthread() error {
	if h.o.Placement == PlacementSplit {
		for _, dev := range []string{h.nodeIf, h.genIf} {
			if err := os.WriteFile(filepath.Join(h.sysfs, "class/net", dev, "threaded"), []byte("0"), 0o644); err != nil {
				return fmt.Errorf("threaded NAPI off on %s: %w", dev, err)
			}
		}
		h.fwdPid, h.rxPid = 0, 0
	}
	return pinThread(h.o.CPU)
}

// summarize sets the figure's medians from its runs.
func (f *Figure) summarize(split bool) {
	var mpps, ns, busy []float64
	for _, r := range f.Runs {
		mpps = append(mpps, r.Mpps)
		if r.Received > 0 && r.CPU > 0 {
			ns = append(ns, float64(r.CPU.Nanoseconds())/float64(r.Received))
			busy = append(busy, r.CPU.Seconds()/r.Seconds)
		}
	}
	f.Mpps, f.CPUNs, f.Busy = stats.Median(mpps), stats.Median(ns), stats.Median(busy)
	if len(ns) > 0 {
		f.BestCPUNs = slices.Min(ns)
	}
	if f.Mpps > 0 {
		f.NsPerPacket = 1e3 / f.Mpps
	}
	if f.CPUNs > 0 {
		f.CapacityMpps = 1e3 / f.CPUNs
	}
	if split {
		f.ForwarderNs = f.CPUNs
	}
}
