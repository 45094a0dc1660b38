package state

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// TestRealsPersistent: random changes to clones of a table never show in
// the table they were cloned from, and each table reads as a plain map
// holding the same changes would.
func TestRealsPersistent(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	real := func(id uint32) Real {
		return Real{Addr: netip.AddrFrom4([4]byte{10, byte(id >> 16), byte(id >> 8), byte(id)}), SvcID: id % 7, Active: r.IntN(2) == 0}
	}
	var cur Reals
	model := map[uint32]Real{}
	type snap struct {
		t Reals
		m map[uint32]Real
	}
	var snaps []snap
	for step := range 200 {
		for range 1 + r.IntN(50) {
			id := uint32(r.IntN(5000))
			if r.IntN(4) == 0 {
				cur.Delete(id)
				delete(model, id)
			} else {
				v := real(id)
				cur.Set(id, v)
				model[id] = v
			}
		}
		checkReals(t, step, &cur, model)
		m := make(map[uint32]Real, len(model))
		for k, v := range model {
			m[k] = v
		}
		snaps = append(snaps, snap{cur.Clone(), m})
	}
	for i := range snaps {
		checkReals(t, i, &snaps[i].t, snaps[i].m)
	}
}

func checkReals(t *testing.T, step int, got *Reals, want map[uint32]Real) {
	t.Helper()
	if got.Len() != len(want) {
		t.Fatalf("step %d: %d reals, want %d", step, got.Len(), len(want))
	}
	var ids []uint32
	for id, r := range got.All() {
		if w, ok := want[id]; !ok || w != r {
			t.Fatalf("step %d: real %d is %+v, want %+v", step, id, r, w)
		}
		ids = append(ids, id)
	}
	if !slices.IsSorted(ids) || len(ids) != len(want) {
		t.Fatalf("step %d: All yields %d ids (sorted %v)", step, len(ids), slices.IsSorted(ids))
	}
	if len(ids) > 0 {
		if m, ok := got.Max(); !ok || m != ids[len(ids)-1] {
			t.Fatalf("step %d: Max %d, want %d", step, m, ids[len(ids)-1])
		}
	}
}

// TestCompare: the diff of two states names exactly the reals and
// services that differ, whether the states share memory or not.
func TestCompare(t *testing.T) {
	a := Empty()
	a.Generation = NewGeneration()
	for i := range uint32(600) {
		a.Reals.Set(i+1, Real{Addr: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), SvcID: 1 + i%3})
	}
	for i := range uint32(3) {
		a.Services[VIPKey{Addr: netip.AddrFrom4([4]byte{172, 16, 0, byte(i)}), Port: 80, Proto: 6}] = &Service{SvcID: i + 1, Table: []uint32{i + 1, i + 4}}
	}
	b := a.Clone()
	b.Generation = NewGeneration()
	if d := Compare(a, b); !d.Empty() || d.From != a.Generation || d.To != b.Generation {
		t.Fatalf("clone differs: %+v", d)
	}
	b.Reals.Delete(5)
	b.Reals.Set(700, Real{SvcID: 2})
	r := b.Reals.At(300)
	r.Active = true
	b.Reals.Set(300, r)
	k := VIPKey{Addr: netip.AddrFrom4([4]byte{172, 16, 0, 1}), Port: 80, Proto: 6}
	b.Services[k] = &Service{SvcID: 2, Table: []uint32{2, 5}} // equal, not shared
	k2 := VIPKey{Addr: netip.AddrFrom4([4]byte{172, 16, 0, 2}), Port: 80, Proto: 6}
	delete(b.Services, k2)
	b.Node.TraceRate = 5
	d := Compare(a, b)
	if !slices.Equal(d.Reals, []uint32{5, 300, 700}) || !slices.Equal(d.Services, []VIPKey{k2}) || !d.Node {
		t.Fatalf("diff %+v", d)
	}
	if a.Reals.Len() != 600 || a.Reals.At(300).Active || len(a.Services) != 3 || a.Node.TraceRate != 0 {
		t.Fatal("the state cloned from changed")
	}
}

// CompareAt, given the keys where b may differ, is Compare.
func TestCompareAtIsCompare(t *testing.T) {
	k := func(i byte) VIPKey { return VIPKey{Addr: netip.AddrFrom4([4]byte{10, 0, 0, i}), Port: 80, Proto: 6} }
	shared := &Service{SvcID: 1, Table: []uint32{1, 2}}
	a := &State{Generation: 1, Services: map[VIPKey]*Service{k(1): shared, k(2): {SvcID: 2, Table: []uint32{3}}, k(3): {SvcID: 3}}}
	b := a.Clone()
	b.Generation = 2
	b.Services[k(2)] = &Service{SvcID: 2, Table: []uint32{4}}    // changed
	delete(b.Services, k(3))                                     // removed
	b.Services[k(4)] = &Service{SvcID: 4}                        // added
	b.Services[k(1)] = &Service{SvcID: 1, Table: []uint32{1, 2}} // replanned, equal
	got := CompareAt(a, b, []VIPKey{k(4), k(1), k(2), k(3), k(2), k(5)})
	want := Compare(a, b)
	if !slices.Equal(got.Services, want.Services) || got.Node != want.Node || got.From != 1 || got.To != 2 ||
		!slices.Equal(got.Services, []VIPKey{k(2), k(3), k(4)}) {
		t.Fatalf("CompareAt %+v, Compare %+v", got, want)
	}
}
