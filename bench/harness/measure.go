package harness

import (
	"fmt"
	"slices"

	"github.com/xlbproject/xlb/bench/stats"
)

// measureAll runs every scenario of h.o against every target, interleaved.
func (h *harness) measureAll() ([]Results, error) {
	sc, err := scenarioOf(TCPHit4)
	if err != nil {
		return nil, err
	}
	loop, err := h.harness(sc.flow.Frame())
	if err != nil {
		return nil, err
	}
	h.o.Logf("test-run loop alone (XDP_TX program): %.0f ns/packet", loop)
	calib := map[FlowMode][]float64{}
	for _, s := range h.o.Scenarios {
		sc, err := scenarioOf(s)
		if err != nil {
			return nil, err
		}
		c, err := h.scenario(sc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s, err)
		}
		calib[sc.mode] = append(calib[sc.mode], c...)
	}
	var all []Results
	for _, t := range h.targets {
		t.res.Harness = loop
		for m, c := range calib {
			t.res.Wrapper[m] = stats.Median(c)
		}
		all = append(all, t.res)
	}
	return all, nil
}

// harness times bench_tx run directly: the kernel's test-run loop.
func (h *harness) harness(frame []byte) (float64, error) {
	var runs []float64
	for range h.o.Runs {
		ret, ns, _, err := h.testRun(h.base.BenchTx, frame, h.o.Repeat)
		if err != nil {
			return 0, err
		}
		if ret != xdpTX {
			return 0, fmt.Errorf("%w: bench_tx returned %d", ErrVerdict, ret)
		}
		runs = append(runs, float64(ns))
	}
	return stats.Median(runs), nil
}

// scenario measures one scenario on every target: prepare each table,
// prime the flows, then Runs rounds (round); every target's run is paired
// with a calibration run of the wrapper alone with the same frame and
// flow mode, so that drift and neighbours hit all targets and their
// calibrations alike. It returns the calibration runs.
func (h *harness) scenario(sc scenario) ([]float64, error) {
	frame := sc.flow.Frame()
	repeat := h.o.Repeat
	if sc.fill == fillEachRun {
		repeat = min(repeat, h.o.Entries/4)
	}
	for _, t := range h.targets {
		if err := h.empty(t); err != nil {
			return nil, fmt.Errorf("%s: %w", t, err)
		}
	}
	for i, t := range h.targets {
		if sc.fill == fillFull {
			fill, err := h.prefill(t, frame, sc, uint32(i))
			if err != nil {
				return nil, fmt.Errorf("%s: pre-fill: %w", t, err)
			}
			t.res.Fill = fill
		}
	}
	base, flows := uint32(0), uint32(0)
	switch sc.mode {
	case NewFlows:
		base = baseNew
	case CycleFlow:
		base, flows = baseCycle, h.o.CycleFlows
	}
	if err := h.setFlow(frame, sc.mode, sc.varOff, base, flows); err != nil {
		return nil, err
	}
	h.sent = benchXlbStatXLB_STAT_FORWARD_TX
	if sc.expect == benchXlbStatXLB_STAT_NAT_REPLY { // natreply.go
		if err := h.trackNAT(sc, base, flows); err != nil {
			return nil, err
		}
		h.sent = benchXlbStatXLB_STAT_NAT_REPLY
	}
	// Prime: the flows of a hit scenario are tracked before the runs (a
	// cycle of K packets leaves the wrapper at flow 0 again). Two targets
	// may share a table (the forwarder with the FIB lookup off and on): the
	// second one's prime hits.
	for _, t := range h.targets {
		var n uint32
		switch sc.mode {
		case SameFlow:
			n = 1
		case CycleFlow:
			n = flows
		}
		if n == 0 {
			continue
		}
		if _, err := h.measure(t, frame, n, anyStat); err != nil {
			return nil, fmt.Errorf("%s: prime: %w", t, err)
		}
	}
	figs := make([]Figure, len(h.targets))
	var all []float64
	for r := range h.o.Runs {
		c, err := h.round(sc, frame, repeat, r, figs)
		if err != nil {
			return nil, err
		}
		all = append(all, c...)
	}
	for i, t := range h.targets {
		f := &figs[i]
		f.Scenario, f.Mode = sc.name, sc.mode
		f.Raw = stats.Median(f.Runs)
		f.Wrapper = stats.Median(f.Calib)
		diff := make([]float64, len(f.Runs))
		for k := range diff {
			diff[k] = f.Runs[k] - f.Calib[k]
		}
		f.Ns = stats.Median(diff)
		f.Best = slices.Min(f.Runs) - slices.Min(f.Calib)
		f.Rel = relative(f, &figs[0])
		t.res.Figures = append(t.res.Figures, *f)
		h.o.Logf("%-28s %-15s %6.1f ns/packet (best %.0f; raw %.0f, wrapper %.0f; runs %v, wrapper runs %v)",
			t, sc.name, f.Ns, f.Best, f.Raw, f.Wrapper, f.Runs, f.Calib)
	}
	return all, nil
}

// prefill puts t's table in the state "every entry in use": new flows
// (from a range the measurement never uses, one per target index i, as
// targets may share a table) until the LRU tables have evicted, and for
// the way table until every bucket has seen ~32 flows (a bucket with a
// free way is then ~1e-8 likely).
func (h *harness) prefill(t *target, frame []byte, sc scenario, i uint32) (float64, error) {
	if t.table == TableNone {
		return 1, nil
	}
	n := uint64(h.o.Entries) * 5 / 4
	if t.table == TableXLB {
		n = uint64(h.o.Entries) * 4
	}
	if err := h.setFlow(frame, NewFlows, sc.varOff, baseFill+i*fillRange, 0); err != nil {
		return 0, err
	}
	for done := uint64(0); done < n; {
		chunk := uint32(min(n-done, 1<<20))
		if _, err := h.measure(t, frame, chunk, benchXlbStatXLB_STAT_CT_MISS); err != nil {
			return 0, err
		}
		done += uint64(chunk)
	}
	fill, err := h.fill(t)
	if err != nil {
		return 0, fmt.Errorf("table occupancy: %w", err)
	}
	h.o.Logf("%s: pre-filled with %d flows: %.4f of %d entries in use", t, n, fill, h.o.Entries)
	if fill < 0.99 {
		return fill, fmt.Errorf("table only %.3f full after %d new flows", fill, n)
	}
	return fill, nil
}

func stopSuffix(s Stage) string {
	if s == StopNone {
		return ""
	}
	return " (stop: " + s.String() + ")"
}

// sliceLen is the most packets of one slice of a run (round).
const sliceLen = 1 << 15

// sliceSizes splits a run of repeat packets into slices of at most
// sliceLen, as even as they can be; a run that must start from an empty
// table (fillEachRun) is one slice.
func sliceSizes(repeat uint32, fill fillMode) []uint32 {
	n := max((repeat+sliceLen-1)/sliceLen, 1)
	if fill == fillEachRun {
		n = 1
	}
	sizes := make([]uint32, n)
	for i := range sizes {
		sizes[i] = repeat / n
		if uint32(i) < repeat%n {
			sizes[i]++
		}
	}
	return sizes
}

// roundOrder is the order of round r's runs of n targets in k slices:
// slice by slice, every target once, the targets rotated one place at
// each slice (counted over all rounds), so that each is first, second, ...
// equally often. Each step is {slice, target}.
func roundOrder(r, k, n int) [][2]int {
	var steps [][2]int
	for s := range k {
		g := r*k + s
		for j := range n {
			steps = append(steps, [2]int{s, (j + g) % n})
		}
	}
	return steps
}

// round is run r of every target, each taken in slices (sliceSizes)
// interleaved with the other targets' (roundOrder), each slice just after
// a calibration slice of the same size. Long runs one target after the
// other would leave each run to whatever the neighbours did during it
// (on a shared machine, swings of 10-30% from one 50 ms run to the next);
// short slices side by side put every target through the same spells.
// A run's figure is the mean over its slices, per packet. It appends
// run r to figs (one per target) and returns the calibrations.
func (h *harness) round(sc scenario, frame []byte, repeat uint32, r int, figs []Figure) ([]float64, error) {
	sizes := sliceSizes(repeat, sc.fill)
	ns := make([]float64, len(h.targets))
	cal := make([]float64, len(h.targets))
	for _, st := range roundOrder(r, len(sizes), len(h.targets)) {
		n, i := sizes[st[0]], st[1]
		t := h.targets[i]
		t.use(r*len(sizes) + st[0])
		c, err := h.calibrate(frame, n)
		if err != nil {
			return nil, fmt.Errorf("calibration: %w", err)
		}
		if sc.fill == fillEachRun {
			if err := h.empty(t); err != nil {
				return nil, fmt.Errorf("%s: %w", t, err)
			}
		}
		m, err := h.measure(t, frame, n, h.expect(t, sc))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t, err)
		}
		ns[i] += m * float64(n) / float64(repeat)
		cal[i] += c * float64(n) / float64(repeat)
		figs[i].slices = append(figs[i].slices, m-c)
	}
	for i := range figs {
		figs[i].Runs = append(figs[i].Runs, ns[i])
		figs[i].Calib = append(figs[i].Calib, cal[i])
		figs[i].Packets += uint64(repeat)
	}
	return cal, nil
}

// expect is the counter every packet of sc adds to on t.
func (h *harness) expect(t *target, sc scenario) benchXlbStat {
	if t.table == TableNone {
		return benchXlbStatXLB_STAT_CT_MISS
	}
	return sc.expect
}

// relative is f against ref, slice by slice: the median over the slices
// of f's (slice - calibration) over ref's slice of the same round and
// number. Two targets' medians may come from different spells of a noisy
// machine; the two slices of one pair run side by side.
func relative(f, ref *Figure) float64 {
	var rel []float64
	for k, d := range ref.slices {
		if d > 0 && k < len(f.slices) {
			rel = append(rel, f.slices[k]/d)
		}
	}
	if len(rel) == 0 {
		return 0
	}
	return stats.Median(rel)
}
