package study

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"

	"github.com/xlbproject/xlb/internal/maglev"
)

// Method is a way of mapping the M slots of a lookup table to N backends.
type Method string

// The methods of the Maglev paper's section 5.3.
const (
	// Maglev is internal/maglev.Build: Pseudocode 1 of section 3.4, equal
	// weights.
	Maglev Method = "maglev"
	// Karger is consistent hashing on a 64-bit ring with KargerViews
	// points per backend; slot j belongs to the backend of the first point
	// at or after key(j), clockwise.
	Karger Method = "karger"
	// Rendezvous is highest-random-weight hashing: slot j belongs to the
	// backend b with the largest weight(key(j), b).
	Rendezvous Method = "rendezvous"
)

// Methods lists the methods in the order the paper's Fig. 11 shows them.
var Methods = []Method{Maglev, Karger, Rendezvous}

// KargerViews is the number of ring points ("views") per backend for
// Karger hashing, the paper's setting.
const KargerViews = 1000

// DisruptionSeed seeds the choice of removed backends in Disruption; with a
// fixed seed every run removes the same backends.
const DisruptionSeed = 0x786c622d73747564 // "xlb-stud"

// Table sizes of the paper's section 5.3 ("small" and "large").
const (
	SmallM = 65537
	LargeM = 655373
)

// PaperOverProvision returns the over-provision factor (largest share minus
// one) that the Maglev paper reports in section 5.3 for method at table size
// m, and whether it reports one. Maglev's is given only as "close to 1"
// (nearly perfect balance), so it is not listed.
func PaperOverProvision(method Method, m int) (float64, bool) {
	switch {
	case method == Karger && m == SmallM:
		return 0.297, true
	case method == Rendezvous && m == SmallM:
		return 0.495, true
	case method == Karger && m == LargeM:
		return 0.103, true
	case method == Rendezvous && m == LargeM:
		return 0.123, true
	}
	return 0, false
}

// Errors wrapped by Balance and Disruption.
var (
	ErrUnknownMethod = errors.New("unknown method")
	ErrBadSize       = errors.New("bad backend count or table size")
)

// BalanceResult is one bar pair of the paper's Fig. 11: how evenly a method
// spreads M table entries over N backends. A share is a backend's entries
// divided by M/N, so a perfect balance gives 1 for every backend.
type BalanceResult struct {
	Method     Method `json:"method"`
	N          int    `json:"n"`
	M          int    `json:"m"`
	MinEntries int    `json:"min_entries"`
	MaxEntries int    `json:"max_entries"`
	// MinShare and MaxShare are the smallest and largest share.
	MinShare float64 `json:"min_share"`
	MaxShare float64 `json:"max_share"`
	// OverProvision is MaxShare - 1: how much every backend must be
	// over-provisioned so that the busiest one copes (paper section 5.3).
	OverProvision float64 `json:"over_provision"`
	// CV is the coefficient of variation of the shares (std dev / mean).
	CV float64 `json:"cv"`
	// Zero is the number of backends with no entry at all.
	Zero int `json:"zero"`
}

// Balance populates a table of m slots over n backends with method and
// measures the shares (the paper's Fig. 11). Backends are named like
// addresses, "10.0.0.1" upwards (BackendNames). For Maglev m must be prime
// (maglev.Build's rule); for every method n >= 1 and m >= n. It wraps
// ErrUnknownMethod or ErrBadSize, or maglev.Build's error.
func Balance(method Method, n, m int) (BalanceResult, error) {
	a, err := newAssigner(method, n, m, 0)
	if err != nil {
		return BalanceResult{}, err
	}
	return balanceOf(method, n, m, a.Base()), nil
}

// BalanceSpread summarises Balance over several disjoint backend sets: the
// largest share is the maximum over N backends, a noisy statistic, so one
// backend set says little about how far a figure such as the paper's is
// from what the method gives in general.
type BalanceSpread struct {
	Method Method `json:"method"`
	N      int    `json:"n"`
	M      int    `json:"m"`
	Sets   int    `json:"sets"`
	// Over-provision factor (largest share - 1): mean, smallest and
	// largest over the sets.
	OverProvisionMean float64 `json:"over_provision_mean"`
	OverProvisionMin  float64 `json:"over_provision_min"`
	OverProvisionMax  float64 `json:"over_provision_max"`
	// MinShareMean is the mean over the sets of the smallest share.
	MinShareMean float64 `json:"min_share_mean"`
}

// BalanceSets runs Balance for sets disjoint backend sets (set 0 is
// Balance's, set s the n addresses from 10.0.0.1 + s*n) and summarises the
// over-provision factors. It fails like Balance, or with ErrBadSize if
// sets < 1.
func BalanceSets(method Method, n, m, sets int) (BalanceSpread, error) {
	if sets < 1 {
		return BalanceSpread{}, fmt.Errorf("%d backend sets: %w (at least 1)", sets, ErrBadSize)
	}
	sp := BalanceSpread{Method: method, N: n, M: m, Sets: sets,
		OverProvisionMin: math.Inf(1), OverProvisionMax: math.Inf(-1)}
	for s := range sets {
		a, err := newAssigner(method, n, m, s)
		if err != nil {
			return BalanceSpread{}, err
		}
		r := balanceOf(method, n, m, a.Base())
		sp.OverProvisionMean += r.OverProvision / float64(sets)
		sp.OverProvisionMin = min(sp.OverProvisionMin, r.OverProvision)
		sp.OverProvisionMax = max(sp.OverProvisionMax, r.OverProvision)
		sp.MinShareMean += r.MinShare / float64(sets)
	}
	return sp, nil
}

func balanceOf(method Method, n, m int, entries []int32) BalanceResult {
	counts := make([]int, n)
	for _, e := range entries {
		counts[e]++
	}
	r := BalanceResult{Method: method, N: n, M: m, MinEntries: math.MaxInt}
	var sum, sq float64
	for _, c := range counts {
		r.MinEntries = min(r.MinEntries, c)
		r.MaxEntries = max(r.MaxEntries, c)
		if c == 0 {
			r.Zero++
		}
		sum += float64(c)
		sq += float64(c) * float64(c)
	}
	mean := float64(m) / float64(n)
	r.MinShare = float64(r.MinEntries) / mean
	r.MaxShare = float64(r.MaxEntries) / mean
	r.OverProvision = r.MaxShare - 1
	variance := sq/float64(n) - (sum/float64(n))*(sum/float64(n))
	r.CV = math.Sqrt(max(variance, 0)) / mean
	return r
}

// DisruptionPoint is one point of the paper's Fig. 12: the mean over Reps
// repetitions of the fraction of table entries whose backend changes when
// Removed of the N backends (Percent %) are removed at once, chosen at
// random.
type DisruptionPoint struct {
	Method  Method  `json:"method"`
	N       int     `json:"n"`
	M       int     `json:"m"`
	Percent float64 `json:"percent"`
	Removed int     `json:"removed"`
	Reps    int     `json:"reps"`
	// Changed is the mean fraction of the M entries whose backend
	// differs between the table with all N backends and the table
	// without the removed ones; ChangedMin and ChangedMax its range over
	// the repetitions.
	Changed    float64 `json:"changed"`
	ChangedMin float64 `json:"changed_min"`
	ChangedMax float64 `json:"changed_max"`
	// Owned is the mean fraction of entries that belonged to the removed
	// backends: those must change, so Changed - Owned is what a method
	// moves beyond the minimum (zero for Karger and Rendezvous).
	Owned float64 `json:"owned"`
}

// Disruption measures, for each percentage p in percents, the fraction of
// the m table entries that change when k = round(p/100 * n) random backends
// out of n are removed at once, averaged over reps repetitions (the
// paper's Fig. 12 uses n = 1000 and 200 repetitions). Repetition r of
// percentage i removes the same backends for every method and table size
// (DisruptionSeed), so the methods are compared on identical failures.
// The repetitions run in parallel on GOMAXPROCS goroutines.
//
// Maglev rebuilds the whole table with maglev.Build for each repetition.
// Karger and Rendezvous compute the table without the removed backends
// exactly but incrementally: a slot's new owner is the first surviving
// ring point after its key (Karger) or the surviving backend of largest
// weight, found among a per-slot list of the best few (Rendezvous), which
// the tests check against a full rebuild.
func Disruption(method Method, n, m int, percents []float64, reps int) ([]DisruptionPoint, error) {
	if reps < 1 {
		return nil, fmt.Errorf("%d repetitions: %w (at least 1)", reps, ErrBadSize)
	}
	for _, p := range percents {
		if !(p >= 0 && p < 100) {
			return nil, fmt.Errorf("failure percentage %v: %w (in [0, 100))", p, ErrBadSize)
		}
	}
	a, err := newAssigner(method, n, m, 0)
	if err != nil {
		return nil, err
	}
	base := a.Base()
	counts := make([]int, n)
	for _, e := range base {
		counts[e]++
	}
	points := make([]DisruptionPoint, len(percents))
	type job struct{ pi, rep int }
	type outcome struct {
		pi             int
		changed, owned int
		err            error
	}
	jobs := make(chan job)
	outs := make(chan outcome)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dst := make([]int32, m)
			alive := make([]bool, n)
			for j := range jobs {
				k := removedCount(percents[j.pi], n)
				removed := pickRemoved(n, k, j.pi, j.rep)
				for i := range alive {
					alive[i] = true
				}
				owned := 0
				for _, b := range removed {
					alive[b] = false
					owned += counts[b]
				}
				if err := a.Without(alive, dst); err != nil {
					outs <- outcome{pi: j.pi, err: err}
					continue
				}
				changed := 0
				for s, e := range dst {
					if e != base[s] {
						changed++
					}
				}
				outs <- outcome{pi: j.pi, changed: changed, owned: owned}
			}
		}()
	}
	go func() {
		for pi := range percents {
			for rep := range reps {
				jobs <- job{pi, rep}
			}
		}
		close(jobs)
		wg.Wait()
		close(outs)
	}()
	// Sum whole entry counts, so the means do not depend on the order in
	// which the repetitions finish.
	changed := make([]int64, len(percents))
	owned := make([]int64, len(percents))
	lo := make([]int, len(percents))
	hi := make([]int, len(percents))
	for i := range lo {
		lo[i] = math.MaxInt
	}
	var firstErr error
	for o := range outs {
		if o.err != nil {
			if firstErr == nil {
				firstErr = o.err
			}
			continue
		}
		changed[o.pi] += int64(o.changed)
		owned[o.pi] += int64(o.owned)
		lo[o.pi] = min(lo[o.pi], o.changed)
		hi[o.pi] = max(hi[o.pi], o.changed)
	}
	if firstErr != nil {
		return nil, firstErr
	}
	total := float64(reps) * float64(m)
	for i, p := range percents {
		points[i] = DisruptionPoint{
			Method: method, N: n, M: m, Percent: p, Removed: removedCount(p, n), Reps: reps,
			Changed:    float64(changed[i]) / total,
			ChangedMin: float64(lo[i]) / float64(m),
			ChangedMax: float64(hi[i]) / float64(m),
			Owned:      float64(owned[i]) / total,
		}
	}
	return points, nil
}

// removedCount is round(p/100 * n), at most n-1 so one backend survives.
func removedCount(p float64, n int) int {
	k := int(math.Round(p / 100 * float64(n)))
	return min(max(k, 0), n-1)
}

// pickRemoved returns k distinct backend indexes in [0, n), chosen by a
// partial Fisher-Yates shuffle from a generator seeded by DisruptionSeed,
// the percentage index and the repetition.
func pickRemoved(n, k, pi, rep int) []int {
	r := rand.New(rand.NewPCG(DisruptionSeed, uint64(pi)<<32|uint64(rep)))
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	for i := range k {
		j := i + r.IntN(n-i)
		idx[i], idx[j] = idx[j], idx[i]
	}
	return idx[:k]
}

// BackendNames returns the n backend names every method uses: IPv4
// address strings from 10.0.0.1 upwards, sorted byte-wise (the order
// maglev.Build puts them in).
func BackendNames(n int) []string { return backendNames(n, 0) }

// backendNames is BackendNames for backend set number set: the addresses
// from 10.0.0.1 + set*n upwards, a different, disjoint name set per set.
func backendNames(n, set int) []string {
	names := make([]string, n)
	for i := range names {
		a := set*n + i + 1
		names[i] = fmt.Sprintf("10.%d.%d.%d", a>>16&0xff, a>>8&0xff, a&0xff)
	}
	slices.Sort(names)
	return names
}

// assigner is a method set up for one backend set and table size.
type assigner interface {
	// Base returns the table with every backend: m entries, each an
	// index into BackendNames(n).
	Base() []int32
	// Without writes to dst (m entries) the table built from the
	// backends whose alive entry is true, with the same indexes.
	Without(alive []bool, dst []int32) error
}

func newAssigner(method Method, n, m, set int) (assigner, error) {
	if n < 1 || m < n || m > maglev.MaxTableSize || (set+1)*n >= 1<<24 {
		return nil, fmt.Errorf("n=%d backends, m=%d slots: %w (need 1 <= n <= m <= %d)",
			n, m, ErrBadSize, maglev.MaxTableSize)
	}
	names := backendNames(n, set)
	switch method {
	case Maglev:
		return newMaglevAssigner(names, m)
	case Karger:
		return newKarger(names, m, KargerViews), nil
	case Rendezvous:
		return newRendezvous(names, m), nil
	}
	return nil, fmt.Errorf("%q: %w (use %v)", method, ErrUnknownMethod, Methods)
}

// maglevAssigner builds tables with internal/maglev, equal weights.
type maglevAssigner struct {
	names []string // sorted, as Build sorts them
	m     uint32
	base  []int32
}

func newMaglevAssigner(names []string, m int) (*maglevAssigner, error) {
	a := &maglevAssigner{names: names, m: uint32(m)}
	all := make([]bool, len(names))
	for i := range all {
		all[i] = true
	}
	a.base = make([]int32, m)
	if err := a.Without(all, a.base); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *maglevAssigner) Base() []int32 { return a.base }

func (a *maglevAssigner) Without(alive []bool, dst []int32) error {
	var idx []int32
	var bs []maglev.Backend
	for i, ok := range alive {
		if ok {
			idx = append(idx, int32(i))
			bs = append(bs, maglev.Backend{Name: a.names[i], Weight: 1})
		}
	}
	t, err := maglev.Build(bs, a.m)
	if err != nil {
		return fmt.Errorf("maglev table of %d backends: %w", len(bs), err)
	}
	// Build sorts by name and bs is already sorted: entry e is idx[e].
	for s, e := range t.Entries {
		dst[s] = idx[e]
	}
	return nil
}

// Hashing for the comparators. Every key and ring point is a 64-bit value
// from the MurmurHash3 finalizer, so both methods get uniformly spread,
// independent inputs, as the paper's analysis assumes.

// nameHash is FNV-1a 64 of name, finalized with maglev.Fmix64.
func nameHash(name string) uint64 {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= 0x100000001b3
	}
	return maglev.Fmix64(h)
}

// slotKey is the key of table slot j: where slot j falls on the Karger ring
// and its input to the Rendezvous weight. Consecutive slots get unrelated
// keys: a table slot is a bucket of flow hashes, and Karger or Rendezvous
// used as a table is indexed by (a hash of) the flow's hash.
func slotKey(j int) uint64 {
	return maglev.Fmix64(uint64(j)*0x9e3779b97f4a7c15 + 0x736c6f742d6b6579) // "slot-key"
}

// karger is consistent hashing with views points per backend.
type karger struct {
	pos   []uint64 // ring points, ascending
	owner []int32  // backend of each point
	start []int32  // per slot: index of the first point at or after its key
	base  []int32
}

func newKarger(names []string, m, views int) *karger {
	type point struct {
		pos   uint64
		owner int32
	}
	pts := make([]point, 0, len(names)*views)
	for b, name := range names {
		h := nameHash(name)
		for v := range views {
			pts = append(pts, point{maglev.Fmix64(h ^ maglev.Fmix64(uint64(v)+0x72696e67)), int32(b)}) // "ring"
		}
	}
	slices.SortFunc(pts, func(a, b point) int {
		switch {
		case a.pos < b.pos:
			return -1
		case a.pos > b.pos:
			return 1
		}
		return int(a.owner - b.owner)
	})
	k := &karger{pos: make([]uint64, len(pts)), owner: make([]int32, len(pts)), start: make([]int32, m)}
	for i, p := range pts {
		k.pos[i], k.owner[i] = p.pos, p.owner
	}
	parallelFor(m, func(lo, hi int) {
		for j := lo; j < hi; j++ {
			key := slotKey(j)
			i, _ := slices.BinarySearch(k.pos, key)
			if i == len(k.pos) {
				i = 0 // wrap around
			}
			k.start[j] = int32(i)
		}
	})
	k.base = make([]int32, m)
	for j, i := range k.start {
		k.base[j] = k.owner[i]
	}
	return k
}

func (k *karger) Base() []int32 { return k.base }

func (k *karger) Without(alive []bool, dst []int32) error {
	if !slices.Contains(alive, true) {
		return fmt.Errorf("karger: no backend left: %w", ErrBadSize)
	}
	n := len(k.pos)
	for j, i := range k.start {
		for !alive[k.owner[i]] {
			i++
			if int(i) == n {
				i = 0
			}
		}
		dst[j] = k.owner[i]
	}
	return nil
}

// rendezvousTop is how many of the best backends per slot rendezvous keeps:
// a slot needs a full scan only if all of them are removed (probability
// f^8 for a fraction f removed: 1e-8 at 10%).
const rendezvousTop = 8

// rendezvous is highest-random-weight hashing.
type rendezvous struct {
	bh   []uint64 // per backend: nameHash
	top  []int32  // per slot: rendezvousTop backends, best first
	base []int32
}

// weight is the Rendezvous weight of backend hash b for slot key k.
func weight(k, b uint64) uint64 { return maglev.Fmix64(k ^ b) }

func newRendezvous(names []string, m int) *rendezvous {
	r := &rendezvous{bh: make([]uint64, len(names))}
	for i, name := range names {
		r.bh[i] = nameHash(name)
	}
	t := min(rendezvousTop, len(names))
	r.top = make([]int32, m*rendezvousTop)
	r.base = make([]int32, m)
	parallelFor(m, func(lo, hi int) {
		var w [rendezvousTop]uint64
		var b [rendezvousTop]int32
		for j := lo; j < hi; j++ {
			key := slotKey(j)
			filled := 0
			for i, h := range r.bh {
				x := weight(key, h)
				if filled == t && x <= w[t-1] {
					continue
				}
				// Insert x, keeping w descending (ties: lower index
				// first, which is the earlier one).
				p := min(filled, t-1)
				for p > 0 && w[p-1] < x {
					w[p], b[p] = w[p-1], b[p-1]
					p--
				}
				w[p], b[p] = x, int32(i)
				if filled < t {
					filled++
				}
			}
			copy(r.top[j*rendezvousTop:], b[:t])
			for q := t; q < rendezvousTop; q++ {
				r.top[j*rendezvousTop+q] = -1
			}
			r.base[j] = b[0]
		}
	})
	return r
}

func (r *rendezvous) Base() []int32 { return r.base }

func (r *rendezvous) Without(alive []bool, dst []int32) error {
	if !slices.Contains(alive, true) {
		return fmt.Errorf("rendezvous: no backend left: %w", ErrBadSize)
	}
	for j := range dst {
		owner := int32(-1)
		for _, b := range r.top[j*rendezvousTop : (j+1)*rendezvousTop] {
			if b >= 0 && alive[b] {
				owner = b
				break
			}
		}
		if owner < 0 { // every kept candidate removed: scan them all
			key := slotKey(j)
			var best uint64
			for i, h := range r.bh {
				if x := weight(key, h); alive[i] && (owner < 0 || x > best) {
					owner, best = int32(i), x
				}
			}
		}
		dst[j] = owner
	}
	return nil
}

// parallelFor runs fn over [0, n) split into one contiguous range per
// GOMAXPROCS goroutine.
func parallelFor(n int, fn func(lo, hi int)) {
	p := min(runtime.GOMAXPROCS(0), max(n, 1))
	var wg sync.WaitGroup
	for i := range p {
		lo, hi := n*i/p, n*(i+1)/p
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	wg.Wait()
}
