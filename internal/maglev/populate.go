package maglev

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
)

// Quotas returns the number of entries each perm gets in a table of m
// entries: the largest-remainder apportionment of m by weight. With
// W = sum of weights, perm i gets floor(m*w_i/W) entries, and the m - sum of
// those left over go one each to the perms with the largest remainders
// (m*w_i mod W), ties to the lower index. Every quota is therefore the floor
// or the ceiling of m*w_i/W, weight 0 gets 0, and the quotas sum to m. With
// equal weights the first m mod N perms get the ceiling, as in Pseudocode 1.
// It returns nil if no weight is positive.
func Quotas(perms []Perm, m uint32) []uint32 {
	var sc scratch
	return sc.quotas(perms, m)
}

// quotas is Quotas in sc's memory: the result is valid until sc's next use.
func (sc *scratch) quotas(perms []Perm, m uint32) []uint32 {
	var total uint64
	for _, p := range perms {
		total += uint64(p.Weight)
	}
	if total == 0 {
		return nil
	}
	quota := grow(sc.quota, len(perms))
	rem := grow(sc.rem, len(perms))
	sc.quota, sc.rem = quota, rem
	left := uint64(m)
	for i, p := range perms {
		// m and w are below 2^32: the product fits in 64 bits.
		x := uint64(m) * uint64(p.Weight)
		quota[i] = uint32(x / total)
		rem[i] = x % total
		left -= uint64(quota[i])
	}
	if left > 0 {
		// left = sum(rem)/total and each rem < total, so more than left
		// perms have a positive remainder: weight 0 never gets an extra.
		order := sc.order[:0]
		for i := range perms {
			if rem[i] > 0 {
				order = append(order, int32(i))
			}
		}
		sc.order = order
		slices.SortFunc(order, func(a, b int32) int {
			switch {
			case rem[a] > rem[b]:
				return -1
			case rem[a] < rem[b]:
				return 1
			}
			return int(a - b) // ties: lower index first
		})
		for _, i := range order[:left] {
			quota[i]++
		}
	}
	return quota
}

// grow returns s resliced to n elements, reallocated if its capacity is
// short; the content is not preserved.
func grow[E any](s []E, n int) []E {
	if cap(s) < n {
		return make([]E, n)
	}
	return s[:n]
}

// scratch is the working memory of a population, kept by a Builder from
// one table to the next.
type scratch struct {
	quota  []uint32
	rem    []uint64
	order  []int32
	active []turnState
	used   []uint64
	tail   tailSearch
}

// turnState is one backend's state during population, 32 bytes, walked in
// order by the round loop.
type turnState struct {
	pos    uint32 // next candidate slot in the permutation
	skip   uint32
	left   uint32 // turns still to take
	idx    int32  // index into perms
	val    uint32 // what its entries hold
	weight uint32
	credit uint64
}

// Populate fills a Maglev lookup table of m entries (m prime, at most
// MaxTableSize) from perms, following section 3.4, Pseudocode 1, with
// weights. It returns the m entries, each an index into perms; the table is
// always full (no -1 remains).
//
// Each perm's number of entries is fixed in advance by Quotas (exactly the
// floor or ceiling of m*w/W). Turns then follow the weights ("relative
// frequency of turns", section 3.4): population runs in rounds; in each
// round every perm that has not reached its quota, in index order, adds its
// weight to a credit, and if the credit is at least the largest weight of
// all perms it takes a turn - fills its most preferred slot that is still
// empty - and the credit drops by that largest weight. Rounds repeat until
// every quota is met, which fills the table. A credit stays below twice the
// largest weight, so a perm takes at most one turn per round; with equal
// weights every perm takes exactly one turn per round, which is Pseudocode 1.
// Rounds in which nobody would take a turn are skipped arithmetically, with
// the same result.
//
// Populate wraps ErrTableTooLarge or ErrNotPrime for a bad m, ErrInvalidPerm
// for an offset >= m or a skip outside [1, m), and ErrNoBackends if perms is
// empty or every weight is 0.
func Populate(perms []Perm, m uint32) ([]int32, error) {
	if err := checkSize(m); err != nil {
		return nil, err
	}
	var wmax uint32
	for i, p := range perms {
		if p.Offset >= m || p.Skip == 0 || p.Skip >= m {
			return nil, fmt.Errorf("perm %d (offset %d, skip %d) for table size %d: %w",
				i, p.Offset, p.Skip, m, ErrInvalidPerm)
		}
		wmax = max(wmax, p.Weight)
	}
	if wmax == 0 {
		return nil, fmt.Errorf("%d backends: %w", len(perms), ErrNoBackends)
	}
	return populate(perms, m, tailThreshold(m)), nil
}

// tailThreshold returns the number of empty slots at which populate
// switches from stepping to the tail search: sqrt(m). A stepping turn then
// costs about m/empty = sqrt(m) probes, as much as a tail turn's sqrt(m)
// rank computations; measured with N=1000 it is also the best switch point
// (about 20% faster than stepping to the end, for m = 65537 and 655373).
func tailThreshold(m uint32) uint32 {
	return uint32(math.Sqrt(float64(m)))
}

// populate is Populate on validated input (m prime, perms valid, some weight
// positive). A turn must find the backend's most preferred empty slot; it is
// done in one of two ways that always give the same slot:
//
//   - Stepping (while more than tailAt slots are empty): walk the
//     permutation from where the backend left off, testing an occupancy
//     bitmap (8 KiB for m = 65537, so it stays in L1); see claim. No
//     permutation matrix, no modulo per probe. Slots the backend walked past
//     are full and stay full, so the first empty one found is the most
//     preferred one.
//   - Tail search (tailAt or fewer empty slots): a turn by stepping costs
//     about m/empty probes, which dominates the end of population. Instead
//     the backend's rank of each remaining empty slot is computed directly;
//     see tailSearch.take.
func populate(perms []Perm, m, tailAt uint32) []int32 {
	entries := make([]int32, m)
	var sc scratch
	populateInto(entries, perms, nil, m, tailAt, &sc)
	return entries
}

// populateInto is populate writing into dst (len m) and using sc's memory:
// an entry of perm i is vals[i], or i itself when vals is nil. Every entry
// of dst is written exactly once: the quotas sum to m.
func populateInto[E int32 | uint32](dst []E, perms []Perm, vals []uint32, m, tailAt uint32, sc *scratch) {
	quota := sc.quotas(perms, m)
	active := sc.active[:0]
	var wmax uint64
	wmin := uint64(math.MaxUint64)
	for i, p := range perms {
		wmax = max(wmax, uint64(p.Weight))
		if quota[i] > 0 {
			wmin = min(wmin, uint64(p.Weight))
			v := uint32(i)
			if vals != nil {
				v = vals[i]
			}
			active = append(active, turnState{
				pos: p.Offset, skip: p.Skip, left: quota[i],
				idx: int32(i), val: v, weight: p.Weight,
			})
		}
	}
	sc.active = active
	used := grow(sc.used, int((m+63)/64))
	clear(used)
	sc.used = used
	dst = dst[:m]
	empty := m
	var tail *tailSearch
	equal := wmin == wmax // every perm with a quota takes a turn every round
	for len(active) > 0 {
		before, finished, start := empty, 0, 0
		if equal && empty > tailAt {
			start, finished = stepRound(active, used, dst, m, empty-tailAt)
			empty -= uint32(start)
		}
		for j := start; j < len(active); j++ {
			s := &active[j]
			s.credit += uint64(s.weight)
			if s.credit < wmax {
				continue
			}
			s.credit -= wmax
			var slot uint32
			if empty > tailAt {
				slot, s.pos = claim(used, s.pos, s.skip, m)
			} else {
				if tail == nil {
					tail = &sc.tail
					tail.reset(perms, used, m, empty)
				}
				slot = tail.take(s.idx)
			}
			dst[slot] = E(s.val)
			empty--
			s.left--
			if s.left == 0 {
				finished++
			}
		}
		if finished > 0 {
			// Drop perms at their quota, keeping index order.
			active = slices.DeleteFunc(active, func(s turnState) bool { return s.left == 0 })
		}
		if empty == before && len(active) > 0 {
			skipIdleRounds(active, wmax)
		}
	}
}

// stepRound gives the first turns of a round in which every perm of
// active takes a turn (equal weights), at most limit of them, each by
// stepping (see claim), and returns how many it gave and how many perms
// reached their quota. It is the loop of populateInto without the
// credits, in a function of its own so that its few values stay in
// registers; claim's loop is written into it.
func stepRound[E int32 | uint32](active []turnState, used []uint64, dst []E, m, limit uint32) (turns, finished int) {
	n := min(len(active), int(limit))
	for j := range active[:n] {
		s := &active[j]
		back := int32(m - s.skip)
		x := int32(s.pos) - back
		for {
			p := uint32(x + back)
			w := &used[p>>6]
			x = x - back + int32(m)&(x>>31)
			if *w&(1<<(p&63)) == 0 {
				*w |= 1 << (p & 63)
				dst[p] = E(s.val)
				break
			}
		}
		s.pos = uint32(x + back)
		s.left--
		if s.left == 0 {
			finished++
		}
	}
	return n, finished
}

// claim steps from pos through a permutation until a slot whose bit in used
// is clear, sets that bit, and returns the slot and the position after it.
// A clear bit must exist, or it never returns.
//
// This loop is most of the population time, and its speed is the length of
// the dependency chain from one position to the next. A branch on the
// wrap-around would be mispredicted often (it is taken with probability
// skip/m), and the compiler does not turn it into a conditional move inside
// a loop, so the loop runs on x = pos - (m - skip) instead: the next x is
// x - (m - skip), plus m if x < 0 (that is, pos + skip did not wrap). That
// is three dependent single-cycle operations, with no branch. All values are
// below 2^23, so int32 arithmetic cannot overflow. The function is kept out
// of populate (noinline) so that its values stay in registers.
//
//go:noinline
func claim(used []uint64, pos, skip, m uint32) (slot, next uint32) {
	back := int32(m - skip)
	x := int32(pos) - back
	for {
		p := uint32(x + back)
		w := &used[p>>6]
		if *w&(1<<(p&63)) == 0 {
			*w |= 1 << (p & 63)
			x = x - back + int32(m)&(x>>31)
			return p, uint32(x + back)
		}
		x = x - back + int32(m)&(x>>31)
	}
}

// tailSearch holds the empty slots during the tail phase of populate.
type tailSearch struct {
	slots []uint32
	perms []Perm
	inv   []uint32 // skip^-1 mod m per perm, 0 until first needed
	m     uint64
	recip uint64 // floor((2^64-1) / m), for mod
}

// newTailSearch collects the empty slots of the occupancy bitmap used.
func newTailSearch(perms []Perm, used []uint64, m, empty uint32) *tailSearch {
	t := &tailSearch{}
	t.reset(perms, used, m, empty)
	return t
}

// reset makes t collect the empty slots of used afresh, keeping its memory.
func (t *tailSearch) reset(perms []Perm, used []uint64, m, empty uint32) {
	if cap(t.slots) < int(empty) {
		t.slots = make([]uint32, 0, empty)
	}
	t.slots = t.slots[:0]
	t.inv = grow(t.inv, len(perms))
	clear(t.inv)
	t.perms, t.m, t.recip = perms, uint64(m), ^uint64(0)/uint64(m)
	for w, bitsw := range used {
		for free := ^bitsw; free != 0; free &= free - 1 {
			slot := uint32(w)*64 + uint32(bits.TrailingZeros64(free))
			if slot < m {
				t.slots = append(t.slots, slot)
			}
		}
	}
}

// mod returns x mod m by Barrett reduction: recip <= 2^64/m makes the
// estimated quotient the true one or one less, so one correction suffices.
func (t *tailSearch) mod(x uint64) uint64 {
	q, _ := bits.Mul64(x, t.recip)
	r := x - q*t.m
	if r >= t.m {
		r -= t.m
	}
	return r
}

// take removes and returns the empty slot that perm i prefers most. Slot e
// is permutation[j] for j = (e - offset) * skip^-1 mod m, its rank; the
// empty slot of least rank is the one stepping would reach first (all slots
// of lower rank are full, or i would have stopped there). Ranks are distinct
// (the permutation is a bijection), so there are no ties. This costs one
// multiply-modulo per empty slot.
func (t *tailSearch) take(i int32) uint32 {
	p := t.perms[i]
	if t.inv[i] == 0 {
		t.inv[i] = inverseMod(p.Skip, uint32(t.m))
	}
	off, inv := uint64(p.Offset), uint64(t.inv[i])
	best, bestRank := 0, t.m
	for k, e := range t.slots {
		d := uint64(e) + t.m - off // < 2m, so d*inv < 2^45
		if r := t.mod(d * inv); r < bestRank {
			best, bestRank = k, r
		}
	}
	slot := t.slots[best]
	last := len(t.slots) - 1
	t.slots[best] = t.slots[last]
	t.slots = t.slots[:last]
	return slot
}

// inverseMod returns a^-1 mod m for m prime and 0 < a < m, by the extended
// Euclidean algorithm.
func inverseMod(a, m uint32) uint32 {
	t, newT := int64(0), int64(1)
	r, newR := int64(m), int64(a)
	for newR != 0 {
		q := r / newR
		t, newT = newT, t-q*newT
		r, newR = newR, r-q*newR
	}
	if t < 0 {
		t += int64(m)
	}
	return uint32(t)
}

// skipIdleRounds advances every credit by the rounds that would pass before
// the next turn (all credits are below w), minus one: the next round then
// gives a turn to at least one perm, exactly as running the idle rounds would.
// Without it, a tiny weight next to a huge one could need billions of rounds.
func skipIdleRounds(active []turnState, w uint64) {
	idle := ^uint64(0)
	for _, s := range active {
		// Rounds until s's credit reaches w: ceil((w - credit) / weight).
		wt := uint64(s.weight)
		idle = min(idle, (w-s.credit+wt-1)/wt)
	}
	if idle <= 1 {
		return
	}
	for j := range active {
		active[j].credit += (idle - 1) * uint64(active[j].weight)
	}
}
