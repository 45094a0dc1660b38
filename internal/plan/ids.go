package plan

import "errors"

// ErrExhausted is wrapped when no id is free.
var ErrExhausted = errors.New("no free id (raise the capacity)")

// allocator hands out ids 1..max-1, round-robin after the highest in use,
// so an id freed by one commit is not handed to another backend straight
// away (a tracked flow of the old backend must not land on the new one).
type allocator struct {
	max    uint32
	taken  func(uint32) bool // ids in use before this plan (nil: none)
	used   bitset            // ids kept or given out by this plan
	cursor uint32
}

func newAllocator(max uint32) *allocator {
	return &allocator{max: max, used: newBitset(max), cursor: 1}
}

// keep marks id in use and moves the cursor past it.
func (a *allocator) keep(id uint32) {
	a.used.set(id)
	if id >= a.cursor {
		a.cursor = id + 1
	}
}

func (a *allocator) next() (uint32, error) {
	for i := uint32(0); i < a.max; i++ {
		id := a.cursor
		if id == 0 || id >= a.max {
			id = 1
		}
		a.cursor = id + 1
		if !a.used.has(id) && (a.taken == nil || !a.taken(id)) {
			a.used.set(id)
			return id, nil
		}
	}
	return 0, ErrExhausted
}

// bitset is a set of ids; ids beyond its size grow it.
type bitset []uint64

func newBitset(n uint32) bitset { return make(bitset, (uint64(n)+63)/64) }

func (b *bitset) set(id uint32) {
	w := int(id >> 6)
	if w >= len(*b) {
		*b = append(*b, make(bitset, w+1-len(*b))...)
	}
	(*b)[w] |= 1 << (id & 63)
}

func (b bitset) has(id uint32) bool {
	w := int(id >> 6)
	return w < len(b) && b[w]&(1<<(id&63)) != 0
}
