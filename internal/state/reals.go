package state

import (
	"iter"
	"math/bits"
)

// chunkBits sets the chunk size of the real table: 256 reals (~14 KiB)
// per chunk, so a change to one service's reals copies a few chunks.
const (
	chunkBits = 8
	chunkSize = 1 << chunkBits
)

// Reals maps real ids to reals. It is persistent: Clone shares every chunk
// between the two tables, and the first write to a shared chunk copies it,
// so a state planned from another with a few reals changed costs a few
// chunks, not a copy of tens of thousands of reals. The zero value is an
// empty table. Copy a Reals with Clone, never by assignment.
type Reals struct {
	chunks []*realChunk
	n      int
	own    *owner // chunks marked with it may be written in place
	shared bool   // chunks (the slice) is shared with a clone
}

type owner struct{ _ byte } // not zero-sized: every owner is a distinct pointer

type realChunk struct {
	owner *owner
	n     int
	has   [chunkSize / 64]uint64
	r     [chunkSize]Real
}

// RealsOf returns a table holding m.
func RealsOf(m map[uint32]Real) Reals {
	var t Reals
	for id, r := range m {
		t.Set(id, r)
	}
	return t
}

// Clone returns a table with t's content; from now on t and the clone
// copy a chunk before changing it.
func (t *Reals) Clone() Reals {
	t.own, t.shared = nil, true
	return Reals{chunks: t.chunks, n: t.n, shared: true}
}

// Len is the number of reals.
func (t *Reals) Len() int { return t.n }

// Get returns the real of id.
func (t *Reals) Get(id uint32) (Real, bool) {
	ci, i := int(id>>chunkBits), id&(chunkSize-1)
	if ci >= len(t.chunks) || t.chunks[ci] == nil || t.chunks[ci].has[i>>6]&(1<<(i&63)) == 0 {
		return Real{}, false
	}
	return t.chunks[ci].r[i], true
}

// At returns the real of id, or the zero Real.
func (t *Reals) At(id uint32) Real {
	r, _ := t.Get(id)
	return r
}

// Set makes id's real r.
func (t *Reals) Set(id uint32, r Real) {
	c := t.writable(int(id >> chunkBits))
	i := id & (chunkSize - 1)
	if w, b := i>>6, uint64(1)<<(i&63); c.has[w]&b == 0 {
		c.has[w] |= b
		c.n++
		t.n++
	}
	c.r[i] = r
}

// Delete removes id's real, if any.
func (t *Reals) Delete(id uint32) {
	if _, ok := t.Get(id); !ok {
		return
	}
	c := t.writable(int(id >> chunkBits))
	i := id & (chunkSize - 1)
	c.has[i>>6] &^= 1 << (i & 63)
	c.r[i] = Real{}
	c.n--
	t.n--
}

// writable returns chunk ci, made this table's own.
func (t *Reals) writable(ci int) *realChunk {
	if t.own == nil {
		t.own = new(owner)
	}
	if t.shared || ci >= len(t.chunks) {
		chunks := make([]*realChunk, max(len(t.chunks), ci+1))
		copy(chunks, t.chunks)
		t.chunks, t.shared = chunks, false
	}
	c := t.chunks[ci]
	switch {
	case c == nil:
		c = &realChunk{owner: t.own}
		t.chunks[ci] = c
	case c.owner != t.own:
		cp := *c
		cp.owner = t.own
		c = &cp
		t.chunks[ci] = c
	}
	return c
}

// All yields every real in id order.
func (t *Reals) All() iter.Seq2[uint32, Real] {
	return func(yield func(uint32, Real) bool) {
		for ci, c := range t.chunks {
			if c == nil || c.n == 0 {
				continue
			}
			for w, word := range c.has {
				for word != 0 {
					i := w<<6 | bits.TrailingZeros64(word)
					word &= word - 1
					if !yield(uint32(ci<<chunkBits|i), c.r[i]) {
						return
					}
				}
			}
		}
	}
}

// Max returns the highest id in the table.
func (t *Reals) Max() (uint32, bool) {
	for ci := len(t.chunks) - 1; ci >= 0; ci-- {
		c := t.chunks[ci]
		if c == nil || c.n == 0 {
			continue
		}
		for w := len(c.has) - 1; w >= 0; w-- {
			if c.has[w] != 0 {
				return uint32(ci<<chunkBits | w<<6 | (63 - bits.LeadingZeros64(c.has[w]))), true
			}
		}
	}
	return 0, false
}

// differing returns the ids whose real differs between t and o (present
// in one only, or with other values), in order; chunks the two share are
// skipped unread.
func (t *Reals) differing(o *Reals) []uint32 {
	var out []uint32
	for ci := range max(len(t.chunks), len(o.chunks)) {
		var a, b *realChunk
		if ci < len(t.chunks) {
			a = t.chunks[ci]
		}
		if ci < len(o.chunks) {
			b = o.chunks[ci]
		}
		if a == b {
			continue
		}
		var empty realChunk
		if a == nil {
			a = &empty
		}
		if b == nil {
			b = &empty
		}
		for w := range a.has {
			for word := a.has[w] | b.has[w]; word != 0; word &= word - 1 {
				i := w<<6 | bits.TrailingZeros64(word)
				bit := uint64(1) << (i & 63)
				if a.has[w]&bit != b.has[w]&bit || a.r[i] != b.r[i] {
					out = append(out, uint32(ci<<chunkBits|i))
				}
			}
		}
	}
	return out
}
