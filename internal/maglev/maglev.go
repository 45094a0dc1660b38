package maglev

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// TableVersion is the version of the table population contract: h1 and h2
// (MakePerm), the ordering of backends (Build) and the quota and turn rule
// (Populate). Any change that alters a table for the same input is a new
// version, because every node must compute identical tables.
const TableVersion = 1

const (
	// DefaultTableSize is the table size used when a service sets none
	// (the paper's default, section 5.3).
	DefaultTableSize = 65537
	// MaxTableSize bounds the table size of one service (16 MiB of int32
	// entries). The largest valid size is the prime 4194301.
	MaxTableSize = 1 << 22
)

// Errors returned (wrapped) by Populate and Build.
var (
	ErrNotPrime         = errors.New("table size is not prime")
	ErrTableTooLarge    = errors.New("table size too large")
	ErrNoBackends       = errors.New("no backend with a positive weight")
	ErrDuplicateBackend = errors.New("duplicate backend name")
	ErrInvalidBackend   = errors.New("invalid backend")
	ErrInvalidPerm      = errors.New("invalid permutation")
)

// Backend is one entry of a service's backend set. Name is its stable
// identity (for example the address string): it alone determines the
// backend's permutation, so a backend keeps its preferences across restarts,
// nodes and config reorderings. Weight 0 means the backend takes no entries.
type Backend struct {
	Name   string
	Weight uint32
}

// Perm is one backend's preference list over the M slots of a table,
// permutation[j] = (Offset + j*Skip) mod M, and its weight. Offset must be
// < M and Skip in [1, M); since M is prime every such permutation visits
// every slot.
type Perm struct {
	Offset, Skip, Weight uint32
}

// Prefixes of the h1 and h2 inputs; the "v1" is TableVersion.
const (
	offsetPrefix = "xlb-maglev-v1/offset/"
	skipPrefix   = "xlb-maglev-v1/skip/"
)

// MakePerm returns the permutation of the backend called name in a table of
// m slots (m prime, as Build checks), with weight w. It is TableVersion 1:
//
//	h1 = Fmix64(FNV-1a-64("xlb-maglev-v1/offset/" + name))
//	h2 = Fmix64(FNV-1a-64("xlb-maglev-v1/skip/" + name))
//	offset = h1 mod m
//	skip   = h2 mod (m-1) + 1
//
// FNV-1a-64 is the standard one (offset basis 0xcbf29ce484222325, prime
// 0x100000001b3) over the bytes of the string; Fmix64 is the MurmurHash3
// finalizer, the same one that ends the flow hash. The distinct prefixes make
// h1 and h2 independent, as section 3.4 asks of its two hash functions.
func MakePerm(name string, w, m uint32) Perm {
	h1 := Fmix64(fnvMore(offsetSeed, name))
	h2 := Fmix64(fnvMore(skipSeed, name))
	return Perm{
		Offset: uint32(h1 % uint64(m)),
		Skip:   uint32(h2%uint64(m-1)) + 1,
		Weight: w,
	}
}

// FNV-1a 64's offset basis and prime.
const (
	fnvBasis = 0xcbf29ce484222325
	fnvPrime = 0x100000001b3
)

// offsetSeed and skipSeed are the FNV-1a 64 states after the prefixes of
// h1 and h2: each hash goes on from there over the name alone (the
// prefix's bytes are a chain of multiplies that every perm would repeat).
var (
	offsetSeed = fnvMore(fnvBasis, offsetPrefix)
	skipSeed   = fnvMore(fnvBasis, skipPrefix)
)

// fnv1a64 is FNV-1a 64 of prefix followed by s, without allocating.
func fnv1a64(prefix, s string) uint64 {
	return fnvMore(fnvMore(fnvBasis, prefix), s)
}

// fnvMore continues FNV-1a 64 from state h over the bytes of s.
func fnvMore(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// checkSize validates a table size: prime and at most MaxTableSize.
func checkSize(m uint32) error {
	if m > MaxTableSize {
		return fmt.Errorf("table size %d: %w (at most %d; 655373 is a large prime that fits)",
			m, ErrTableTooLarge, MaxTableSize)
	}
	if !IsPrime(m) {
		return fmt.Errorf("table size %d: %w (use a prime such as 65537 or 655373)", m, ErrNotPrime)
	}
	return nil
}

// Table is the Maglev lookup table of one service.
type Table struct {
	M uint32
	// Backends are the input backends sorted by Name (byte-wise); Entries
	// index into this slice.
	Backends []Backend
	// Entries holds M indexes into Backends, none negative.
	Entries []int32
}

// Build computes the table of m entries for backends. The backends are
// first stably sorted by Name (byte-wise, locale-independent), so the order
// in which the config lists them never changes the table; each backend's
// permutation comes from its Name alone (MakePerm).
//
// Build wraps ErrTableTooLarge or ErrNotPrime for a bad m,
// ErrInvalidBackend for an empty Name, ErrDuplicateBackend if two backends
// share a Name, and ErrNoBackends if there is no backend or every weight
// is 0.
func Build(backends []Backend, m uint32) (*Table, error) {
	if err := checkSize(m); err != nil {
		return nil, err
	}
	sorted := slices.Clone(backends)
	byName := func(a, b Backend) int { return strings.Compare(a.Name, b.Name) }
	if !slices.IsSortedFunc(sorted, byName) { // often sorted already: then the sort is the identity
		slices.SortStableFunc(sorted, byName)
	}
	perms := make([]Perm, len(sorted))
	for i, b := range sorted {
		if err := checkName(sorted, i); err != nil {
			return nil, err
		}
		perms[i] = MakePerm(b.Name, b.Weight, m)
	}
	entries, err := Populate(perms, m)
	if err != nil {
		return nil, err
	}
	return &Table{M: m, Backends: sorted, Entries: entries}, nil
}

// checkName checks the name of sorted[i] (sorted by Name): not empty, not
// that of sorted[i-1].
func checkName(sorted []Backend, i int) error {
	b := sorted[i]
	if b.Name == "" {
		return fmt.Errorf("backend with weight %d: empty name: %w", b.Weight, ErrInvalidBackend)
	}
	if i > 0 && b.Name == sorted[i-1].Name {
		return fmt.Errorf("backend %q: %w (each backend may appear once per service)",
			b.Name, ErrDuplicateBackend)
	}
	return nil
}

// Builder computes the tables Build computes, keeping its working memory
// from one table to the next and writing each table into memory the
// caller provides, as values the caller chooses (such as real ids) rather
// than indexes. A Builder is not safe for concurrent use; its zero value
// is ready.
type Builder struct {
	sorted []Backend
	order  []int32 // sorted[k] is backends[order[k]]
	perms  []Perm
	vals   []uint32
	sc     scratch
}

// Fill writes into dst (len m) the table Build(backends, m) computes, each
// entry as vals[j] for the backend it names, backends[j] (len(vals) =
// len(backends)): dst[s] = vals[j] exactly where Build's table has
// Backends[Entries[s]] = backends[j]. It returns Build's errors (and
// one for a dst or vals of the wrong length), and leaves dst undefined
// with one.
func (b *Builder) Fill(dst []uint32, backends []Backend, vals []uint32, m uint32) error {
	if err := checkSize(m); err != nil {
		return err
	}
	if len(dst) != int(m) || len(vals) != len(backends) {
		return fmt.Errorf("table size %d: %d entries to fill, %d values for %d backends", m, len(dst), len(vals), len(backends))
	}
	n := len(backends)
	order := grow(b.order, n)
	for i := range order {
		order[i] = int32(i)
	}
	// The stable sort of Build: by name, ties in input order.
	slices.SortFunc(order, func(x, y int32) int {
		if c := strings.Compare(backends[x].Name, backends[y].Name); c != 0 {
			return c
		}
		return int(x - y)
	})
	sorted, perms, sv := grow(b.sorted, n), grow(b.perms, n), grow(b.vals, n)
	b.order, b.sorted, b.perms, b.vals = order, sorted, perms, sv
	for k, j := range order {
		sorted[k] = backends[j]
		sv[k] = vals[j]
	}
	var wmax uint32
	for k, bk := range sorted {
		if err := checkName(sorted, k); err != nil {
			return err
		}
		perms[k] = MakePerm(bk.Name, bk.Weight, m)
		wmax = max(wmax, bk.Weight)
	}
	if wmax == 0 {
		return fmt.Errorf("%d backends: %w", n, ErrNoBackends)
	}
	populateInto(dst, perms, sv, m, tailThreshold(m), &b.sc)
	clear(sorted) // no names kept alive
	return nil
}

// Counts returns the number of entries of each backend, indexed like
// t.Backends.
func (t *Table) Counts() []int {
	c := make([]int, len(t.Backends))
	for _, e := range t.Entries {
		c[e]++
	}
	return c
}

// Lookup returns the index in t.Backends of the backend that serves flow
// hash h: t.Entries[Slot(h, t.M)].
func (t *Table) Lookup(h uint64) int {
	return int(t.Entries[Slot(h, t.M)])
}

// Diff returns the number of slots whose backend, compared by Name, differs
// between old and new: the entries a switch from old to new moves. A nil old
// table or one of another size counts every slot of new as changed.
func Diff(old, new *Table) int {
	if old == nil || old.M != new.M {
		return int(new.M)
	}
	n := 0
	for i, e := range new.Entries {
		if old.Backends[old.Entries[i]].Name != new.Backends[e].Name {
			n++
		}
	}
	return n
}

// DiffEntries returns the number of positions at which the raw entry arrays
// a and b differ, counting every position that only one of them has: the
// entries to write when a kernel map holding a is rewritten to hold b.
func DiffEntries(a, b []int32) int {
	if len(a) > len(b) {
		a, b = b, a
	}
	n := len(b) - len(a)
	for i, e := range a {
		if b[i] != e {
			n++
		}
	}
	return n
}
