package datapath

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/state"
)

// TestCommitDiff: a commit whose diff leads from the state in the maps
// is written by looking only at what the diff names, and the maps (read
// back by adopting them) then hold exactly the new state; a diff from any
// other state is not trusted (everything compared).
func TestCommitDiff(t *testing.T) {
	d := newTestDatapath(t, Options{})
	base := fixtureState()
	base.Reals.Set(7, Real{Addr: netip.MustParseAddr("10.0.1.7"), SvcID: 1, Active: true})
	base.Reals.Set(8, Real{Addr: netip.MustParseAddr("10.0.1.8"), SvcID: 1, Active: true})
	base.Generation = state.NewGeneration()
	if _, err := d.Apply(base); err != nil {
		t.Fatal(err)
	}
	key := VIPKey{Addr: vip4, Port: 80, Proto: 6}
	next := func(from *State) *State {
		st := from.Clone()
		st.Generation = state.NewGeneration()
		return st
	}
	// Real 8 leaves, 9 joins, 7 goes inactive; service 1's table uses 7 and 9.
	st := next(base)
	st.Reals.Delete(8)
	st.Reals.Set(9, Real{Addr: netip.MustParseAddr("10.0.1.9"), SvcID: 1, Active: true})
	r7 := st.Reals.At(7)
	r7.Active = false
	st.Reals.Set(7, r7)
	st.Services[key] = &Service{SvcID: 1, Encap: EncapGRE, Table: []uint32{7, 9, 9, 7, 9, 1, 9}}
	diff := state.Diff{From: base.Generation, To: st.Generation, Reals: []uint32{7, 8, 9}, Services: []VIPKey{key}}
	as, err := d.Commit(st, diff)
	if err != nil {
		t.Fatal(err)
	}
	if as.RealsWritten != 3 || as.TablesPatched != 1 {
		t.Fatalf("apply stats %+v: want 3 reals written (one cleared), one table patched", as)
	}
	checkAdopted(t, d, st)

	// A diff that does not lead from the state in the maps is not
	// trusted: real 2 changes although the diff does not name it.
	other := next(st)
	r2 := other.Reals.At(2)
	r2.Active = false
	other.Reals.Set(2, r2)
	if as, err := d.Commit(other, state.Diff{From: base.Generation, To: other.Generation}); err != nil || as.RealsWritten != 1 {
		t.Fatalf("commit with a stale diff: %+v, %v; want the changed real written", as, err)
	}
	checkAdopted(t, d, other)

	// A diff naming a real that points into another service's table is
	// refused like a full state.
	bad := next(other)
	bad.Reals.Set(10, Real{Addr: netip.MustParseAddr("10.0.1.10"), SvcID: 2, Active: true})
	bad.Services[key] = &Service{SvcID: 1, Encap: EncapGRE, Table: []uint32{10, 10, 10, 10, 10, 10, 10}}
	if _, err := d.Commit(bad, state.Diff{From: other.Generation, To: bad.Generation, Reals: []uint32{10}, Services: []VIPKey{key}}); err == nil {
		t.Fatal("a table referring to another service's real was accepted")
	}
	checkAdopted(t, d, other) // nothing of bad was written
}

// TestCommitIsAtomic: a commit that changes everything (node settings,
// fragment pool, reals added, changed and removed, a table patched, a
// table replaced by one of another size, a service added and one removed)
// is failed at each of its writes in turn, as when the kernel refuses one
// (map full, ENOMEM): each time the maps hold the previous state, as read
// back by a new process and as this one knows it; then it succeeds.
func TestCommitIsAtomic(t *testing.T) {
	if testing.Short() {
		t.Skip("fails a commit at each of its writes in turn, tens of seconds: make test runs it, -short (make check) does not")
	}
	d := newTestDatapath(t, Options{})
	base := fixtureState()
	base.Reals.Set(7, Real{Addr: netip.MustParseAddr("10.0.1.7"), SvcID: 1, Active: true})
	if _, err := d.Apply(base); err != nil {
		t.Fatal(err)
	}
	before := d.Snapshot()
	node, frag := d.cur.node, d.cur.frag
	st := base.Clone()
	st.Node.ICMPEchoRate++
	st.Node.Fragments = FragPool{Peers: []FragPeer{{Addr: netip.MustParseAddr("10.0.0.11")}, {Addr: netip.MustParseAddr("10.0.0.99")}}}
	r7 := st.Reals.At(7)
	r7.Active = false
	st.Reals.Set(7, r7)
	st.Reals.Set(50, Real{Addr: netip.MustParseAddr("10.0.5.50"), SvcID: 50, Active: true})
	var removed VIPKey
	i := 0
	for k, s := range base.Services {
		switch i {
		case 0: // patched in place
			t2 := slices.Clone(s.Table)
			t2[0] = 0
			st.Services[k] = &Service{SvcID: s.SvcID, Encap: s.Encap, Table: t2}
		case 1: // a table of another size
			st.Services[k] = &Service{SvcID: s.SvcID, Encap: s.Encap, Table: append(slices.Clone(s.Table), s.Table[0], 0)}
		case 2: // removed, with its reals
			removed = k
			delete(st.Services, k)
			for id, r := range base.Reals.All() {
				if r.SvcID == s.SvcID {
					st.Reals.Delete(id)
				}
			}
		}
		i++
	}
	added := VIPKey{Addr: netip.MustParseAddr("10.0.100.50"), Port: 50, Proto: 6}
	st.Services[added] = &Service{SvcID: 50, Encap: EncapIPIP, Table: []uint32{50, 50, 50, 50, 50}}
	injected := errors.New("injected: cannot allocate memory")
	var failedAt []string
	for n := 1; ; n++ {
		var what string
		d.faultHook = func(w string, k int) error {
			if k == n {
				what = w
				return injected
			}
			return nil
		}
		_, err := d.Apply(st)
		if err == nil {
			break
		}
		if !errors.Is(err, injected) {
			t.Fatalf("write %d (%s): %v", n, what, err)
		}
		failedAt = append(failedAt, what)
		if d.Snapshot() != before {
			t.Fatalf("failed at %s: the datapath's state changed", what)
		}
		checkAdopted(t, d, base)
		d2 := adoptPinned(t, d.opts)
		if d2.cur.node != node || !d2.cur.frag.equal(&frag) {
			t.Fatalf("failed at %s: node settings or fragment pool changed", what)
		}
		if _, ok := d2.Snapshot().Services[removed]; !ok {
			t.Fatalf("failed at %s: removed service is gone", what)
		}
		d2.Close()
		forwardsAsBefore(t, d, base, added, what)
	}
	d.faultHook = nil
	t.Logf("failed at each of: %s", strings.Join(failedAt, ", "))
	if len(failedAt) < 9 {
		t.Fatalf("only %d writes failed in turn: %v", len(failedAt), failedAt)
	}
	checkAdopted(t, d, st)
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
		st := base.Clone()
		for i := uint32(0); i < 40; i++ {
			id := 10 + i
			st.Reals.Set(100+i, Real{Addr: netip.AddrFrom4([4]byte{10, 7, 0, byte(i)}), SvcID: id, Active: true})
			st.Services[VIPKey{Addr: netip.AddrFrom4([4]byte{10, 200, 0, byte(i)}), Port: 80, Proto: 6}] = &Service{SvcID: id,
				Table: []uint32{100 + i, 0, 100 + i, 100 + i, 100 + i}}
		}
		return st
	}
	newBad := grown()
	newBad.Services[VIPKey{Addr: netip.AddrFrom4([4]byte{10, 200, 0, 33}), Port: 80, Proto: 6}].Table[3] = 101 // service 11's
	patchBad := grown()
	patchBad.Services[VIPKey{Addr: vip4, Port: 80, Proto: 6}] = &Service{SvcID: 1, Encap: EncapGRE, Table: []uint32{1, 1, 1, 2, 1, 1, 1}}
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
	d2 := adoptPinned(t, d.opts)
	defer d2.Close()
	requireSameState(t, d2.Snapshot(), want)
}

// adoptPinned reads the maps pinned under o.PinDir as a new process does:
// a Datapath on those maps and the state load adopts from them
// (loadApplied). It loads the maps only: verifying the programs again
// (a second of CPU each time) tells nothing about what the maps hold.
func adoptPinned(t *testing.T, o Options) *Datapath {
	t.Helper()
	spec, err := LoadSpec(o)
	if err != nil {
		t.Fatal(err)
	}
	d := &Datapath{opts: o, log: o.Logger}
	if err := spec.LoadAndAssign(&d.objs.xlbMaps, &ebpf.CollectionOptions{
		Maps: ebpf.MapOptions{PinPath: o.PinDir},
	}); err != nil {
		t.Fatalf("open the pinned maps: %v", err)
	}
	if err := d.loadApplied(); err != nil {
		d.Close()
		t.Fatalf("read pinned state: %v", err)
	}
	return d
}

// requireSameState fails t unless got (read back from the maps) holds
// want's services (id, table, encapsulation) and reals.
func requireSameState(t *testing.T, got, want *State) {
	t.Helper()
	if len(got.Services) != len(want.Services) || got.Reals.Len() != want.Reals.Len() {
		t.Fatalf("maps hold %d services %d reals, want %d %d", len(got.Services), got.Reals.Len(), len(want.Services), want.Reals.Len())
	}
	for k, s := range want.Services {
		g := got.Services[k]
		if g == nil || g.SvcID != s.SvcID || !slices.Equal(g.Table, s.Table) || g.Encap != s.Encap {
			t.Fatalf("service %s in the maps is %+v, want %+v", k, g, s)
		}
	}
	for id, r := range want.Reals.All() {
		if got.Reals.At(id) != r {
			t.Fatalf("real %d in the maps is %+v, want %+v", id, got.Reals.At(id), r)
		}
	}
}

// TestApplyManyReals: reals written in one batch (a cold commit) are in
// the maps, and a re-apply writes none.
func TestApplyManyReals(t *testing.T) {
	d := newTestDatapath(t, Options{})
	st := fixtureState()
	for id := uint32(100); id < 400; id++ {
		st.Reals.Set(id, Real{Addr: netip.AddrFrom4([4]byte{10, 9, byte(id >> 8), byte(id)}), SvcID: 1 + id%6, Active: id%3 != 0,
			Encap: state.Encap(id % 3)})
	}
	as, err := d.Apply(st)
	if err != nil {
		t.Fatal(err)
	}
	if as.RealsWritten != st.Reals.Len() {
		t.Fatalf("%d reals written, want %d", as.RealsWritten, st.Reals.Len())
	}
	checkAdopted(t, d, st)
	if as, err := d.Apply(st); err != nil || as.RealsWritten != 0 {
		t.Fatalf("re-apply: %+v, %v", as, err)
	}
}

// forwardsAsBefore checks the forwarder (its own VIP match, not the
// catalog): a packet to each of base's services goes to a real of that
// service, and one to added is not forwarded.
func forwardsAsBefore(t *testing.T, d *Datapath, base *State, added VIPKey, what string) {
	t.Helper()
	send := func(key VIPKey) (uint32, []byte) {
		src := client4
		if key.Addr.Is6() {
			src = client6
		}
		port := key.Port
		if port == 0 {
			port = 7
		}
		f := packet.Flow{Src: src, Dst: key.Addr, SrcPort: 4242, DstPort: port, Proto: key.Proto, TCPFlags: packet.SYN}
		if key.Proto != 6 {
			f.TCPFlags = 0
		}
		return run(t, d.Program(), f.Frame())
	}
	for key, s := range base.Services {
		ret, out := send(key)
		tun, err := packet.ParseTunnel(out)
		if ret != xdpTX || err != nil {
			t.Fatalf("failed at %s: %s not forwarded (verdict %d, %v)", what, key, ret, err)
		}
		ok := false
		for _, r := range base.Reals.All() {
			ok = ok || r.SvcID == s.SvcID && r.Addr == tun.Backend
		}
		if !ok {
			t.Fatalf("failed at %s: %s forwarded to %s, not one of its reals", what, key, tun.Backend)
		}
	}
	if ret, _ := send(added); ret == xdpTX {
		t.Fatalf("failed at %s: the service of the failed commit forwards", what)
	}
}
