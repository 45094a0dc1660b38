package study

import (
	"fmt"
	"math"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/xlbproject/xlb/bench/stats"
	"github.com/xlbproject/xlb/internal/maglev"
	"github.com/xlbproject/xlb/internal/testenv/traces"
)

// DefaultWorkers are the session-persistence study's worker counts.
var DefaultWorkers = []int{2, 4, 8, 16, 32, 64}

// ReflectionDataset is the name of the dataset that joins the reflection
// captures (files named amp.*.pcap): real source addresses, the address mix
// the study is about. A traces directory without such files gets a dataset
// "all" joining every capture instead.
const ReflectionDataset = "reflection"

// HashBalance is how evenly one hash spreads one dataset's flows over N
// workers.
type HashBalance struct {
	Hash  string `json:"hash"`
	N     int    `json:"n"`
	Flows int    `json:"flows"`
	// Min and Max are the fewest and most flows of a worker.
	Min int `json:"min"`
	Max int `json:"max"`
	// StdDev is the population standard deviation of flows per worker;
	// CV = StdDev / (Flows/N), the coefficient of variation.
	StdDev float64 `json:"std_dev"`
	CV     float64 `json:"cv"`
	// MaxOverMean is Max / (Flows/N).
	MaxOverMean float64 `json:"max_over_mean"`
	// IdealCV is the expected CV of a uniformly random assignment,
	// sqrt((N-1)/Flows): a hash near it balances as well as chance allows.
	IdealCV float64 `json:"ideal_cv"`
}

// HashTiming is the cost of one hash.
type HashTiming struct {
	Hash string `json:"hash"`
	// NsPerHash is the median over the timing runs of the time per Sum
	// call, including the loop and the call through a function value;
	// NsMin the fastest run, the better estimate on a busy machine.
	NsPerHash float64 `json:"ns_per_hash"`
	NsMin     float64 `json:"ns_min"`
}

// Dataset is a set of distinct flows taken from one or more captures.
type Dataset struct {
	Name  string   `json:"name"`
	Files []string `json:"files"`
	// Packets is the number of packets read, Flows the distinct TCP/UDP
	// 5-tuples among them, Sources the distinct source addresses.
	Packets int `json:"packets"`
	Flows   int `json:"flows"`
	Sources int `json:"sources"`

	flows []maglev.Tuple
}

// DatasetResult is the balance of every hash for every N on one dataset.
type DatasetResult struct {
	Dataset Dataset       `json:"dataset"`
	Balance []HashBalance `json:"balance"` // hash-major, N ascending
	// Quality sums up each hash over the worker counts, in hash order.
	Quality []HashQuality `json:"quality"`
}

// HashQuality is one number per hash and dataset: VarianceRatio is the
// mean over the worker counts of (CV / IdealCV)^2, the variance of flows
// per worker relative to that of a uniformly random assignment. A random
// assignment has expectation 1 (the scaled variance is chi-squared with
// N-1 degrees of freedom divided by N-1), so values near 1 are as good as
// chance allows and values well above 1 mean the hash follows structure in
// the addresses.
type HashQuality struct {
	Hash          string  `json:"hash"`
	VarianceRatio float64 `json:"variance_ratio"`
}

// HashStudyResult is the outcome of HashStudy.
type HashStudyResult struct {
	// Source cites the captures (traces.Source); Dir is where they were.
	Source  string `json:"source"`
	Dir     string `json:"dir"`
	Workers []int  `json:"workers"`
	// Hashes names and documents each hash compared.
	Hashes []FlowHasher `json:"hashes"`
	// Datasets: the joined reflection captures first (ReflectionDataset),
	// then every capture alone.
	Datasets []DatasetResult `json:"datasets"`
	// Timing is measured on the first dataset's flows; LoopNs is the same
	// loop with a hash that only returns the source port, the part of
	// NsPerHash that is not hashing.
	Timing      []HashTiming `json:"timing"`
	LoopNs      float64      `json:"loop_ns"`
	TimingFlows int          `json:"timing_flows"`
	GoVersion   string       `json:"go_version"`
	GOARCH      string       `json:"goarch"`
}

// HashStudy runs the session-persistence study's hash comparison (its
// section 4.2) on the captures in dir: every hash of FlowHashers spreads
// each dataset's distinct flows over each worker count of workers
// (DefaultWorkers if nil), and every hash
// is timed for about timing in total (21 interleaved runs; 0 means 500 ms).
// It fails if dir holds no readable capture or a worker count is below 1.
func HashStudy(dir string, workers []int, timing time.Duration) (HashStudyResult, error) {
	if workers == nil {
		workers = DefaultWorkers
	}
	for _, n := range workers {
		if n < 1 {
			return HashStudyResult{}, fmt.Errorf("%d workers: %w (at least 1)", n, ErrBadSize)
		}
	}
	if timing <= 0 {
		timing = 500 * time.Millisecond
	}
	files, err := traces.ReadDir(dir)
	if err != nil {
		return HashStudyResult{}, err
	}
	hashers := FlowHashers()
	res := HashStudyResult{
		Source: traces.Source, Dir: dir, Workers: slices.Clone(workers), Hashes: hashers,
		GoVersion: runtime.Version(), GOARCH: runtime.GOARCH,
	}
	for _, ds := range datasets(files) {
		dr := DatasetResult{Dataset: ds}
		for _, h := range hashers {
			q := HashQuality{Hash: h.Name}
			for _, n := range workers {
				b := hashBalance(h, n, ds.flows)
				dr.Balance = append(dr.Balance, b)
				if b.IdealCV > 0 {
					q.VarianceRatio += (b.CV / b.IdealCV) * (b.CV / b.IdealCV) / float64(len(workers))
				}
			}
			dr.Quality = append(dr.Quality, q)
		}
		res.Datasets = append(res.Datasets, dr)
	}
	flows := res.Datasets[0].Dataset.flows
	if len(flows) == 0 {
		return HashStudyResult{}, fmt.Errorf("%s: no TCP/UDP flow in dataset %s", dir, res.Datasets[0].Dataset.Name)
	}
	res.TimingFlows = len(flows)
	res.Timing, res.LoopNs = timeHashes(hashers, flows, timing)
	return res, nil
}

// datasets returns the joined dataset, then one per file.
func datasets(files []traces.FlowFile) []Dataset {
	var joined []traces.FlowFile
	for _, f := range files {
		if strings.HasPrefix(f.Name, "amp.") {
			joined = append(joined, f)
		}
	}
	name := ReflectionDataset
	if len(joined) == 0 {
		name, joined = "all", files
	}
	out := []Dataset{join(name, joined)}
	for _, f := range files {
		out = append(out, join(strings.TrimSuffix(f.Name, ".pcap"), []traces.FlowFile{f}))
	}
	return out
}

// join makes a dataset of the distinct flows of files.
func join(name string, files []traces.FlowFile) Dataset {
	ds := Dataset{Name: name}
	seen := map[maglev.Tuple]bool{}
	srcs := map[netip.Addr]bool{}
	for _, f := range files {
		ds.Files = append(ds.Files, f.Name)
		ds.Packets += f.Packets
		for _, t := range f.Flows {
			if !seen[t] {
				seen[t] = true
				srcs[t.Src] = true
				ds.flows = append(ds.flows, t)
			}
		}
	}
	ds.Flows, ds.Sources = len(ds.flows), len(srcs)
	return ds
}

// FlowTuples returns the dataset's distinct flows (shared, do not modify).
func (d Dataset) FlowTuples() []maglev.Tuple { return d.flows }

// hashBalance spreads flows over n workers with h.
func hashBalance(h FlowHasher, n int, flows []maglev.Tuple) HashBalance {
	counts := make([]int, n)
	for i := range flows {
		w := h.Pick(h.Sum(&flows[i]), uint32(n))
		counts[w]++
	}
	return balanceStats(h.Name, counts)
}

// balanceStats summarises per-worker counts.
func balanceStats(hash string, counts []int) HashBalance {
	n := len(counts)
	b := HashBalance{Hash: hash, N: n, Min: math.MaxInt}
	for _, c := range counts {
		b.Flows += c
		b.Min = min(b.Min, c)
		b.Max = max(b.Max, c)
	}
	if b.Flows == 0 {
		b.Min = 0
		return b
	}
	mean := float64(b.Flows) / float64(n)
	var ss float64
	for _, c := range counts {
		d := float64(c) - mean
		ss += d * d
	}
	b.StdDev = math.Sqrt(ss / float64(n))
	b.CV = b.StdDev / mean
	b.MaxOverMean = float64(b.Max) / mean
	b.IdealCV = math.Sqrt(float64(n-1) / float64(b.Flows))
	return b
}

// timingRuns is the number of interleaved timing runs per hash: many short
// runs, so that a burst of other work on the machine spoils few of them.
const timingRuns = 21

// timeHashes times each hasher's Sum over flows: timingRuns runs, each
// hasher in turn within a run, each measurement whole passes over flows
// until budget/(runs*(hashers+1)) has passed; the median per hasher. The
// baseline (a Sum returning the source port) is timed the same way.
func timeHashes(hashers []FlowHasher, flows []maglev.Tuple, budget time.Duration) ([]HashTiming, float64) {
	base := FlowHasher{Name: "loop", Sum: func(t *maglev.Tuple) uint64 { return uint64(t.SrcPort) }}
	all := append(slices.Clone(hashers), base)
	per := budget / time.Duration(timingRuns*len(all))
	samples := make([][]float64, len(all))
	for _, h := range all {
		passNs(h.Sum, flows, 0) // warm up
	}
	for range timingRuns {
		for i, h := range all {
			samples[i] = append(samples[i], passNs(h.Sum, flows, per))
		}
	}
	out := make([]HashTiming, len(hashers))
	for i, h := range hashers {
		out[i] = HashTiming{Hash: h.Name, NsPerHash: stats.Median(samples[i]), NsMin: slices.Min(samples[i])}
	}
	return out, stats.Median(samples[len(all)-1])
}

// passNs runs sum over flows in whole passes until d has passed (at least
// one pass) and returns the time per call in nanoseconds.
func passNs(sum func(*maglev.Tuple) uint64, flows []maglev.Tuple, d time.Duration) float64 {
	var acc uint64
	calls := 0
	start := time.Now()
	for {
		for i := range flows {
			acc += sum(&flows[i])
		}
		calls += len(flows)
		if time.Since(start) >= d {
			break
		}
	}
	el := time.Since(start)
	runtime.KeepAlive(acc)
	return float64(el.Nanoseconds()) / float64(calls)
}
