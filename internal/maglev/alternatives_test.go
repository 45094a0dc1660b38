package maglev

// Faster population designs evaluated against Pseudocode 1 (Populate) and
// not adopted; docs/PERFORMANCE.md, "Table generation", has the account and
// the figures. They live here, as test code, so that the figures can be
// reproduced:
//
//	go test -count=1 -run TestAlternativesDisruption -v ./internal/maglev/
//	taskset -c 1 go test -run XXX -bench Alternatives ./internal/maglev/
//
// Equal weights only; every one gives each backend Quotas' exact floor or
// ceiling.

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// altAlg is one evaluated population: perms of MakePerm (ring ignores
// them) and the names, sorted; it returns the entries and the number of
// bitmap probes (or candidate lookups) it made.
type altAlg struct {
	name string
	run  func(perms []Perm, names []string, m uint32) ([]int32, int)
}

var altAlgs = []altAlg{
	// Rank rounds (deferred acceptance): every backend below its quota
	// tests one slot of its permutation per round, taken if empty. A slot
	// goes to the backend that ranks it earliest (ties to the lower
	// index): the backend-optimal stable matching, whatever the processing
	// order. The last sqrt(m) empty slots as in Populate's tail.
	{"ranked", func(p []Perm, _ []string, m uint32) ([]int32, int) { return altRounds(p, m, 1, 1, 0) }},
	{"ranked-soa", func(p []Perm, _ []string, m uint32) ([]int32, int) { return altRanked(p, m) }},
	// The same, each probe testing an aligned group of 2 or 8 slots from
	// the permutation's position on, cyclically ("probe in batches").
	{"ranked-g2", func(p []Perm, _ []string, m uint32) ([]int32, int) { return altRounds(p, m, 2, 2, 0) }},
	{"ranked-g8", func(p []Perm, _ []string, m uint32) ([]int32, int) { return altRounds(p, m, 8, 8, 0) }},
	// Single slots until 90% full, then whole bitmap words (any empty slot
	// of the word, from the position on).
	// Groups of 8 or 4 slots, the backend staying on a group (taking one
	// empty slot of it per round, from the position on) until it finds the
	// group full.
	{"ranked-g8-stay", func(p []Perm, _ []string, m uint32) ([]int32, int) { return altRoundsStay(p, m, 8, m) }},
	{"ranked-g4-stay", func(p []Perm, _ []string, m uint32) ([]int32, int) { return altRoundsStay(p, m, 4, m) }},
	{"ranked-then-word", func(p []Perm, _ []string, m uint32) ([]int32, int) { return altRounds(p, m, 1, 64, m/10) }},
	// Slot-major bounded load: each slot in order takes the first of its
	// candidates (successors of hash(slot, j) on a ring of 64 or 256
	// points per backend) whose backend has quota left: consistent hashing
	// with bounded loads, the bound being the exact quota.
	{"ring-bounded64", func(_ []Perm, n []string, m uint32) ([]int32, int) { return altRing(n, m, 64) }},
	{"ring-bounded256", func(_ []Perm, n []string, m uint32) ([]int32, int) { return altRing(n, m, 256) }},
}

// altRounds runs rank rounds with g-slot groups (g a power of two, at most
// 64) while more than switchAt slots are empty, g2-slot groups after, and
// Populate's tail search for the last sqrt(m).
func altRounds(perms []Perm, m, g, g2, switchAt uint32) ([]int32, int) {
	quota := Quotas(perms, m)
	active := make([]turnState, 0, len(perms))
	for i, p := range perms {
		if quota[i] > 0 {
			active = append(active, turnState{pos: p.Offset, skip: p.Skip, left: quota[i], idx: int32(i), weight: 1})
		}
	}
	entries := make([]int32, m+1) // entries[m]: where missed probes write
	used := make([]uint64, (m+63)/64)
	if r := m % 64; r != 0 {
		used[len(used)-1] = ^uint64(0) << r // slots past m do not exist
	}
	empty, probes, tailAt := m, 0, tailThreshold(m)
	for len(active) > 0 && empty > tailAt {
		gg := g
		if empty <= switchAt {
			gg = g2
		}
		probes += len(active)
		took, finished := altProbeRound(active, used, entries, m, gg)
		empty -= took
		if finished > 0 {
			active = slices.DeleteFunc(active, func(s turnState) bool { return s.left == 0 })
		}
	}
	var tail *tailSearch
	for len(active) > 0 {
		for j := range active {
			s := &active[j]
			if tail == nil {
				tail = newTailSearch(perms, used, m, empty)
			}
			entries[tail.take(s.idx)] = s.idx
			empty--
			s.left--
		}
		active = slices.DeleteFunc(active, func(s turnState) bool { return s.left == 0 })
	}
	return entries[:m], probes
}

// altRanked is altRounds(perms, m, 1, 1, 0) written for speed: state in
// separate arrays, branch-free probes.
func altRanked(perms []Perm, m uint32) ([]int32, int) {
	quota := Quotas(perms, m)
	n := 0
	pos := make([]uint32, len(perms))
	skip := make([]uint32, len(perms))
	left := make([]uint32, len(perms))
	idx := make([]int32, len(perms))
	for i, p := range perms {
		if quota[i] > 0 {
			pos[n], skip[n], left[n], idx[n] = p.Offset, p.Skip, quota[i], int32(i)
			n++
		}
	}
	entries := make([]int32, m+1)
	used := make([]uint64, (m+63)/64)
	empty, probes, tailAt := m, 0, tailThreshold(m)
	for n > 0 && empty > tailAt {
		probes += n
		pos, skip, left, idx := pos[:n], skip[:n], left[:n], idx[:n]
		var took, done uint32
		for j := range pos {
			p := pos[j]
			w := used[p>>6]
			b := p & 63
			free := uint32(^w>>b) & 1
			used[p>>6] = w | 1<<b
			dst := p
			if free == 0 {
				dst = m
			}
			entries[dst] = idx[j]
			l := left[j] - free
			left[j] = l
			took += free
			if l == 0 {
				done++
			}
			np := int32(p+skip[j]) - int32(m)
			np += int32(m) & (np >> 31)
			pos[j] = uint32(np)
		}
		empty -= took
		if done > 0 {
			k := 0
			for j := range n {
				if left[j] > 0 {
					pos[k], skip[k], left[k], idx[k] = pos[j], skip[j], left[j], idx[j]
					k++
				}
			}
			n = k
		}
	}
	if n > 0 {
		tail := newTailSearch(perms, used, m, empty)
		for n > 0 {
			k := 0
			for j := range n {
				entries[tail.take(idx[j])] = idx[j]
				if left[j]--; left[j] > 0 {
					idx[k], left[k] = idx[j], left[j]
					k++
				}
			}
			n = k
		}
	}
	return entries[:m], probes
}

// altRoundsStay is altRounds with g-slot groups where a backend stays on
// its group after taking a slot of it, and moves on only when it finds the
// group full.
func altRoundsStay(perms []Perm, m, g2, switchAt uint32) ([]int32, int) {
	quota := Quotas(perms, m)
	active := make([]turnState, 0, len(perms))
	for i, p := range perms {
		if quota[i] > 0 {
			active = append(active, turnState{pos: p.Offset, skip: p.Skip, left: quota[i], idx: int32(i), weight: 1})
		}
	}
	entries := make([]int32, m+1)
	used := make([]uint64, (m+63)/64)
	if r := m % 64; r != 0 {
		used[len(used)-1] = ^uint64(0) << r
	}
	empty, probes, tailAt, done := m, 0, tailThreshold(m), 0
	for len(active) > 0 && empty > tailAt {
		g := uint32(1)
		if empty <= switchAt {
			g = g2
		}
		mask := uint64(1)<<g - 1
		probes += len(active) - done
		finished := 0
		for j := range active {
			s := &active[j]
			if s.left == 0 {
				continue
			}
			p := s.pos
			w := used[p>>6]
			base := p & 63 &^ (g - 1)
			off := p & (g - 1)
			free := ^(w >> base) & mask
			r := (free>>off | free<<(g-off)) & mask
			if r == 0 {
				np := p + s.skip
				if np >= m {
					np -= m
				}
				s.pos = np
				continue
			}
			bit := base + (uint32(bits.TrailingZeros64(r))+off)&(g-1)
			used[p>>6] = w | 1<<bit
			entries[p&^63|bit] = s.idx
			if g == 1 {
				np := p + s.skip
				if np >= m {
					np -= m
				}
				s.pos = np
			}
			empty--
			if s.left--; s.left == 0 {
				finished++
			}
		}
		// Drop finished backends only when they are an eighth of the
		// slice: dropping them every round costs a pass each time.
		if done += finished; done > 0 && (8*done >= len(active) || empty <= tailAt) {
			active = slices.DeleteFunc(active, func(s turnState) bool { return s.left == 0 })
			done = 0
		}
	}
	var tail *tailSearch
	for len(active) > 0 {
		for j := range active {
			s := &active[j]
			if tail == nil {
				tail = newTailSearch(perms, used, m, empty)
			}
			entries[tail.take(s.idx)] = s.idx
			empty--
			s.left--
		}
		active = slices.DeleteFunc(active, func(s turnState) bool { return s.left == 0 })
	}
	return entries[:m], probes
}

// altProbeRound gives every active backend one probe of g slots.
func altProbeRound(active []turnState, used []uint64, entries []int32, m, g uint32) (took, finished uint32) {
	mask := uint64(1)<<g - 1 // all ones for g = 64
	for j := range active {
		s := &active[j]
		p := s.pos
		w := used[p>>6]
		base := p & 63 &^ (g - 1)
		off := p & (g - 1)
		free := ^(w >> base) & mask
		r := (free>>off | free<<(g-off)) & mask
		t := uint32(bits.TrailingZeros64(r | (mask + 1)))
		var hit uint32
		if t < g {
			hit = 1
		}
		bit := base + (t+off)&(g-1)
		used[p>>6] = w | uint64(hit)<<bit
		dst := p&^63 | bit
		if hit == 0 {
			dst = m
		}
		entries[dst] = s.idx
		s.left -= hit
		took += hit
		if s.left == 0 {
			finished++
		}
		np := p + s.skip
		if np >= m {
			np -= m
		}
		s.pos = np
	}
	return took, finished
}

// altRing is slot-major bounded-load consistent hashing with exact
// capacities.
func altRing(names []string, m uint32, vper int) ([]int32, int) {
	perms := make([]Perm, len(names))
	for i := range perms {
		perms[i].Weight = 1
	}
	capLeft := Quotas(perms, m)
	type point struct {
		at  uint32
		idx int32
	}
	pts := make([]point, 0, len(names)*vper)
	for i, name := range names {
		h := fnv1a64("xlb-alt-ring/", name)
		for v := range vper {
			pts = append(pts, point{uint32(fmix64(h+uint64(v)*0x9e3779b97f4a7c15) >> 32), int32(i)})
		}
	}
	slices.SortFunc(pts, func(a, b point) int {
		if a.at != b.at {
			return int(int64(a.at) - int64(b.at))
		}
		return int(a.idx - b.idx)
	})
	kb := uint32(bits.Len(uint(len(pts))))
	start := make([]int32, 1<<kb+1)
	for _, p := range pts {
		start[p.at>>(32-kb)+1]++
	}
	for b := 1; b < len(start); b++ {
		start[b] += start[b-1]
	}
	entries := make([]int32, m)
	lookups := 0
	for s := range m {
		x := uint64(s) * 0x9e3779b97f4a7c15
		for {
			lookups++
			x = fmix64(x + 0x632be59bd9b4e019)
			h := uint32(x >> 32)
			i, end := start[h>>(32-kb)], start[h>>(32-kb)+1]
			for i < end && pts[i].at < h {
				i++
			}
			if int(i) == len(pts) {
				i = 0
			}
			if o := pts[i].idx; capLeft[o] > 0 {
				capLeft[o]--
				entries[s] = o
				break
			}
		}
	}
	return entries, lookups
}

// altBuild is Build with an evaluated population.
func altBuild(t testing.TB, a altAlg, backends []Backend, m uint32) (*Table, int) {
	sorted := slices.Clone(backends)
	slices.SortFunc(sorted, func(a, b Backend) int { return strings.Compare(a.Name, b.Name) })
	perms := make([]Perm, len(sorted))
	names := make([]string, len(sorted))
	for i, b := range sorted {
		perms[i] = MakePerm(b.Name, 1, m)
		names[i] = b.Name
	}
	entries, probes := a.run(perms, names, m)
	return &Table{M: m, Backends: sorted, Entries: entries}, probes
}

// survivorsMoved returns the fraction of surviving backends' entries of
// old whose backend differs in new, the removed backends being drop.
func survivorsMoved(old, new *Table, drop map[string]bool) float64 {
	moved, surv := 0, 0
	for i, e := range old.Entries {
		name := old.Backends[e].Name
		if drop[name] {
			continue
		}
		surv++
		if name != new.Backends[new.Entries[i]].Name {
			moved++
		}
	}
	return float64(moved) / float64(surv)
}

// TestAlternativesDisruption measures, for N=1000 equal backends and k% of
// them removed at random (3 seeds), the share of surviving backends'
// entries that move, for Pseudocode 1 and each evaluated design, and
// checks the findings docs/PERFORMANCE.md states: every design keeps the
// exact quotas; rank rounds move fewer survivors' entries than Pseudocode 1
// at every k; every design that needs less than 70% of rank rounds' probes
// (groups, word tails, the rings) moves at least 1.5 times as many as
// Pseudocode 1 at M=655373, k=10%.
func TestAlternativesDisruption(t *testing.T) {
	if testing.Short() {
		t.Skip("about 10 s")
	}
	ks := []int{1, 2, 5, 10}
	for _, m := range []uint32{65537, 655373} {
		before := equalBackends(1000)
		paper := make([]float64, len(ks))
		tables := map[string]*Table{}
		probes := map[string]int{}
		oldPaper, err := Build(before, m)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range altAlgs {
			tb, n := altBuild(t, a, before, m)
			checkCounts(t, tb)
			tables[a.name], probes[a.name] = tb, n
			t.Logf("M=%d %s: %d probes", m, a.name, n)
		}
		results := map[string][]float64{}
		for ki, k := range ks {
			for seed := range uint64(3) {
				r := rand.New(rand.NewPCG(seed, 99))
				drop := map[string]bool{}
				for _, i := range r.Perm(len(before))[:k*len(before)/100] {
					drop[before[i].Name] = true
				}
				var after []Backend
				for _, b := range before {
					if !drop[b.Name] {
						after = append(after, b)
					}
				}
				nt, err := Build(after, m)
				if err != nil {
					t.Fatal(err)
				}
				paper[ki] += survivorsMoved(oldPaper, nt, drop) / 3
				for _, a := range altAlgs {
					at, _ := altBuild(t, a, after, m)
					checkCounts(t, at)
					if results[a.name] == nil {
						results[a.name] = make([]float64, len(ks))
					}
					results[a.name][ki] += survivorsMoved(tables[a.name], at, drop) / 3
				}
			}
		}
		line := func(name string, v []float64) {
			s := fmt.Sprintf("M=%d %-17s survivors' entries moved:", m, name)
			for ki, k := range ks {
				s += fmt.Sprintf(" k=%d%% %.2f%%", k, 100*v[ki])
			}
			t.Log(s)
		}
		line("pseudocode-1", paper)
		for _, a := range altAlgs {
			v := results[a.name]
			line(a.name, v)
			switch {
			case a.name == "ranked":
				for ki := range ks {
					if v[ki] >= paper[ki] {
						t.Errorf("M=%d k=%d%%: ranked moves %.2f%%, not below Pseudocode 1's %.2f%%",
							m, ks[ki], 100*v[ki], 100*paper[ki])
					}
				}
			case m == 655373 && 10*probes[a.name] < 7*probes["ranked"]:
				if last := len(ks) - 1; v[last] < 1.5*paper[last] {
					t.Errorf("M=%d k=10%%: %s moves %.2f%%, less than 1.5 x Pseudocode 1's %.2f%%: revisit the account",
						m, a.name, 100*v[last], 100*paper[last])
				}
			}
		}
	}
}

// BenchmarkAlternatives times each design, N=1000, equal weights, the
// whole build (sort, permutations, population), as BenchmarkBuild does.
func BenchmarkAlternatives(b *testing.B) {
	backends := equalBackends(1000)
	for _, m := range []uint32{65537, 655373} {
		b.Run(fmt.Sprintf("M=%d/pseudocode-1", m), func(b *testing.B) {
			for b.Loop() {
				if _, err := Build(backends, m); err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, a := range altAlgs {
			b.Run(fmt.Sprintf("M=%d/%s", m, a.name), func(b *testing.B) {
				for b.Loop() {
					altBuild(b, a, backends, m)
				}
			})
		}
	}
}
