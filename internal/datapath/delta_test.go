package datapath

import (
	"maps"
	"net/netip"
	"slices"
	"testing"
)

// TestApplyDelta: a State with a Delta based on the state applied last is
// written by looking only at what the delta names, and the maps (read back
// by adopting them) then hold exactly that State; a Delta based on any
// other state is ignored (everything compared).
func TestApplyDelta(t *testing.T) {
	d := newTestDatapath(t, Options{})
	base := fixtureState()
	base.Reals[7] = Real{Addr: netip.MustParseAddr("10.0.1.7"), SvcID: 1, Active: true}
	base.Reals[8] = Real{Addr: netip.MustParseAddr("10.0.1.8"), SvcID: 1, Active: true}
	if _, err := d.Apply(base); err != nil {
		t.Fatal(err)
	}
	key := VIPKey{vip4, 80, 6}
	next := func(from *State) *State {
		st := &State{Node: from.Node, Services: maps.Clone(from.Services), Reals: maps.Clone(from.Reals)}
		return st
	}
	// Real 8 leaves, 9 joins, 7 goes inactive; service 1's table uses 7 and 9.
	st := next(base)
	delete(st.Reals, 8)
	st.Reals[9] = Real{Addr: netip.MustParseAddr("10.0.1.9"), SvcID: 1, Active: true}
	r7 := st.Reals[7]
	r7.Active = false
	st.Reals[7] = r7
	st.Services[key] = &Service{SvcID: 1, Encap: EncapGRE, Table: []uint32{7, 9, 9, 7, 9, 1, 9}}
	st.Delta = &Delta{Base: base, Reals: []uint32{7, 8, 9, 7, 9}, Services: []VIPKey{key, key}}
	as, err := d.Apply(st)
	if err != nil {
		t.Fatal(err)
	}
	if as.RealsWritten != 3 || as.TablesPatched != 1 {
		t.Fatalf("apply stats %+v: want 3 reals written (one cleared), one table patched", as)
	}
	checkAdopted(t, d, st)

	// A delta that is not based on the state in the maps is not trusted:
	// real 2 changes although the delta does not name it.
	other := next(st)
	r2 := other.Reals[2]
	r2.Active = false
	other.Reals[2] = r2
	other.Delta = &Delta{Base: base}
	if as, err := d.Apply(other); err != nil || as.RealsWritten != 1 {
		t.Fatalf("apply with a stale delta: %+v, %v; want the changed real written", as, err)
	}
	checkAdopted(t, d, other)

	// A delta naming a real that points into another service's table is
	// refused like a full state.
	bad := next(other)
	bad.Reals[10] = Real{Addr: netip.MustParseAddr("10.0.1.10"), SvcID: 2, Active: true}
	bad.Services[key] = &Service{SvcID: 1, Encap: EncapGRE, Table: []uint32{10, 10, 10, 10, 10, 10, 10}}
	bad.Delta = &Delta{Base: other, Reals: []uint32{10}, Services: []VIPKey{key}}
	if _, err := d.Apply(bad); err == nil {
		t.Fatal("a table referring to another service's real was accepted")
	}
	checkAdopted(t, d, other) // nothing of bad was written
}

// TestApplyRefusesForeignReal: a full state (no delta) whose tables are
// made on all CPUs is refused when one table, new or patched in place,
// names a real of another service, and then nothing of it is in the maps.
func TestApplyRefusesForeignReal(t *testing.T) {
	d := newTestDatapath(t, Options{})
	base := fixtureState()
	if _, err := d.Apply(base); err != nil {
		t.Fatal(err)
	}
	grown := func() *State {
		st := &State{Node: base.Node, Services: maps.Clone(base.Services), Reals: maps.Clone(base.Reals)}
		for i := uint32(0); i < 40; i++ {
			id := 10 + i
			st.Reals[100+i] = Real{Addr: netip.AddrFrom4([4]byte{10, 7, 0, byte(i)}), SvcID: id, Active: true}
			st.Services[VIPKey{netip.AddrFrom4([4]byte{10, 200, 0, byte(i)}), 80, 6}] = &Service{SvcID: id,
				Table: []uint32{100 + i, 0, 100 + i, 100 + i, 100 + i}}
		}
		return st
	}
	newBad := grown()
	newBad.Services[VIPKey{netip.AddrFrom4([4]byte{10, 200, 0, 33}), 80, 6}].Table[3] = 101 // service 11's
	patchBad := grown()
	patchBad.Services[VIPKey{vip4, 80, 6}] = &Service{SvcID: 1, Encap: EncapGRE, Table: []uint32{1, 1, 1, 2, 1, 1, 1}}
	for name, st := range map[string]*State{"new table": newBad, "patched table": patchBad} {
		if _, err := d.Apply(st); err == nil {
			t.Fatalf("%s referring to another service's real was accepted", name)
		}
		checkAdopted(t, d, base)
	}
	good := grown()
	if as, err := d.Apply(good); err != nil || as.TablesReplaced != 40 {
		t.Fatalf("apply: %+v, %v; want 40 tables installed", as, err)
	}
	checkAdopted(t, d, good)
}

// checkAdopted loads the forwarder again on d's pins and compares what it
// finds in the maps with want.
func checkAdopted(t *testing.T, d *Datapath, want *State) {
	t.Helper()
	d2, err := Load(d.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	requireSameState(t, d2.Snapshot(), want)
}

// requireSameState fails t unless got (read back from the maps) holds
// want's services (id, table, encapsulation) and reals.
func requireSameState(t *testing.T, got, want *State) {
	t.Helper()
	if len(got.Services) != len(want.Services) || len(got.Reals) != len(want.Reals) {
		t.Fatalf("maps hold %d services %d reals, want %d %d", len(got.Services), len(got.Reals), len(want.Services), len(want.Reals))
	}
	for k, s := range want.Services {
		g := got.Services[k]
		if g == nil || g.SvcID != s.SvcID || !slices.Equal(g.Table, s.Table) || g.Encap != s.Encap {
			t.Fatalf("service %s in the maps is %+v, want %+v", k, g, s)
		}
	}
	for id, r := range want.Reals {
		if got.Reals[id] != r {
			t.Fatalf("real %d in the maps is %+v, want %+v", id, got.Reals[id], r)
		}
	}
}

// TestApplyManyReals: reals written in one batch (a cold commit) are in
// the maps, and a re-apply writes none.
func TestApplyManyReals(t *testing.T) {
	d := newTestDatapath(t, Options{})
	st := fixtureState()
	for id := uint32(100); id < 400; id++ {
		st.Reals[id] = Real{Addr: netip.AddrFrom4([4]byte{10, 9, byte(id >> 8), byte(id)}), SvcID: 1 + id%6, Active: id%3 != 0,
			Encap: Encap(id % 3)}
	}
	as, err := d.Apply(st)
	if err != nil {
		t.Fatal(err)
	}
	if as.RealsWritten != len(st.Reals) {
		t.Fatalf("%d reals written, want %d", as.RealsWritten, len(st.Reals))
	}
	checkAdopted(t, d, st)
	if as, err := d.Apply(st); err != nil || as.RealsWritten != 0 {
		t.Fatalf("re-apply: %+v, %v", as, err)
	}
}
