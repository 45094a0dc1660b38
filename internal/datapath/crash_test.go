package datapath

import (
	"crypto/rand"
	"encoding/hex"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/xlbproject/xlb/internal/state"
)

// TestCommitKilledAtEveryWrite (crash anywhere): a commit that changes
// everything (node settings, fragment pool, reals added, changed and
// removed, a table patched, one replaced by a table of another size, a
// service with a scheduler added and one removed, a VIP address added
// and one gone) is cut before each of its writes in turn, as by SIGKILL:
// the goroutine running it stops there, nothing is undone, and the
// process's handles are closed. A new process on the same pins then
// commits either state: the one cut short (a reload whose config file was
// already rewritten: the commit is done again) or the previous one (an
// API apply killed before it saved its file). Each time the maps then hold
// exactly what a process that committed that state to empty pins holds
// (crashDump: VIPs, the forwarder's VIP match, each VIP's table, reals,
// schedulers, VIP addresses, node settings, fragment pool), and every
// table slot no VIP reaches is empty or holds the new process's
// placeholder: nothing of the killed process's tables is left.
func TestCommitKilledAtEveryWrite(t *testing.T) {
	d := newTestDatapath(t, Options{})
	o := d.opts
	d.Close() // its programs are not needed: the maps are what a commit writes
	pinned := openPinnedMaps(t, o)
	base, next := crashStates()
	want := map[string]crashDump{"previous": cleanDump(t, o, base), "cut": cleanDump(t, o, next)}
	var cutAt []string
	for n := 1; ; n++ {
		for _, target := range []string{"cut", "previous"} {
			p := newProcess(t, o, pinned)
			if _, err := p.Apply(base); err != nil {
				t.Fatal(err)
			}
			what, finished := killedCommit(p, next, n)
			p.Close() // the killed process's handles
			if finished {
				if len(cutAt) < 12 {
					t.Fatalf("only %d writes cut: %v", len(cutAt), cutAt)
				}
				t.Logf("cut before each of: %s", strings.Join(cutAt, ", "))
				return
			}
			if target == "cut" {
				cutAt = append(cutAt, what)
			}
			r := newProcess(t, o, pinned)
			st := next
			if target == "previous" {
				st = base
			}
			if _, err := r.Apply(st); err != nil {
				t.Fatalf("killed before write %d (%s), then the %s state: %v", n, what, target, err)
			}
			got := readCrashDump(t, pinned, r.placeholder)
			if diff := want[target].diff(got); diff != "" {
				t.Fatalf("killed before write %d (%s), then the %s state committed: the maps differ from a clean commit's: %s", n, what, target, diff)
			}
			r.Close()
		}
	}
}

// killedCommit runs d.Apply(next) and kills it before its n-th write
// (runtime.Goexit: no undo runs); it returns the write's name, or
// finished when the commit has fewer writes.
func killedCommit(d *Datapath, next *State, n int) (what string, finished bool) {
	done := make(chan bool)
	d.faultHook = func(w string, k int) error {
		if k == n {
			what = w
			close(done)
			runtime.Goexit()
		}
		return nil
	}
	go func() {
		_, err := d.Apply(next)
		done <- err == nil
	}()
	finished = <-done
	d.faultHook = nil
	return what, finished
}

// crashStates are the two states of TestCommitKilledAtEveryWrite.
func crashStates() (base, next *State) {
	base = fixtureState()
	base.Reals.Set(7, Real{Addr: netip.MustParseAddr("10.0.1.7"), SvcID: 1, Active: true})
	gone := VIPKey{Addr: netip.MustParseAddr("10.0.100.9"), Port: 9, Proto: 6}
	base.Reals.Set(60, Real{Addr: netip.MustParseAddr("10.0.6.60"), SvcID: 60, Active: true})
	base.Reals.Set(61, Real{Addr: netip.MustParseAddr("10.0.6.61"), SvcID: 60, Active: true})
	base.Services[gone] = &Service{SvcID: 60, Encap: EncapGRE, Table: []uint32{60, 61, 60, 61, 60},
		Sched: state.Sched{Kind: state.SchedWLC, Proto: 6, List: []state.SchedEnt{{RealID: 60, Weight: 1}, {RealID: 61, Weight: 2}}}}
	base.Generation = state.NewGeneration()

	next = base.Clone()
	next.Generation = state.NewGeneration()
	next.Node.ICMPEchoRate++
	next.Node.Fragments = FragPool{Peers: []FragPeer{{Addr: netip.MustParseAddr("10.0.0.11")}, {Addr: netip.MustParseAddr("10.0.0.99")}}}
	r7 := next.Reals.At(7)
	r7.Active = false
	next.Reals.Set(7, r7)
	delete(next.Services, gone)
	next.Reals.Delete(60)
	next.Reals.Delete(61)
	patched := base.Services[VIPKey{Addr: vip4, Port: 80, Proto: 6}]
	t2 := slices.Clone(patched.Table)
	t2[0], t2[1] = 7, 0
	next.Services[VIPKey{Addr: vip4, Port: 80, Proto: 6}] = &Service{SvcID: 1, Encap: patched.Encap, Table: t2}
	grown := base.Services[VIPKey{Addr: vip6, Port: 80, Proto: 6}]
	next.Services[VIPKey{Addr: vip6, Port: 80, Proto: 6}] = &Service{SvcID: grown.SvcID, Encap: grown.Encap,
		Table: append(slices.Clone(grown.Table), grown.Table[0], 0)}
	next.Reals.Set(50, Real{Addr: netip.MustParseAddr("10.0.5.50"), SvcID: 50, Active: true})
	next.Services[VIPKey{Addr: netip.MustParseAddr("10.0.100.50"), Port: 50, Proto: 6}] = &Service{SvcID: 50, Encap: EncapIPIP,
		Table: []uint32{50, 50, 50, 50, 50}, Sched: state.Sched{Kind: state.SchedRR, Proto: 6, List: []state.SchedEnt{{RealID: 50, Weight: 1}}}}
	return base, next
}

// crashDump is what a commit leaves in the maps, independent of where in
// xlb_tables a table sits, of the VIP match's entry ids and of the probe
// cookie (each process draws its own).
type crashDump struct {
	vips     map[xlbVipKey]xlbVipInfo // table id zeroed
	tables   map[xlbVipKey][]uint32   // each VIP's table
	index    map[xlbVipKey]xlbVipInfo // the forwarder's VIP match, table id zeroed
	reals    map[uint32]xlbRealInfo
	sched    map[uint32]xlbSvcSched
	addrs    map[xlbVipKey]uint32
	node     xlbNodeInfo
	frag     xlbFragConf
	peers    [MaxFragPeers]xlbRealInfo
	unrefTab []string // slots no VIP reaches that hold something other than the placeholder
}

// cleanDump is the dump of st committed to empty pins.
func cleanDump(t *testing.T, o Options, st *State) crashDump {
	t.Helper()
	var rnd [4]byte
	rand.Read(rnd[:])
	o.PinDir = filepath.Join("/sys/fs/bpf", "xlb-test-clean-"+hex.EncodeToString(rnd[:]))
	if err := os.MkdirAll(o.PinDir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(o.PinDir) })
	m := openPinnedMaps(t, o)
	d := newProcess(t, o, m)
	defer d.Close()
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	return readCrashDump(t, m, d.placeholder)
}

// openPinnedMaps opens the maps pinned under o.PinDir (closed when t
// ends).
func openPinnedMaps(t *testing.T, o Options) *xlbMaps {
	t.Helper()
	spec, err := LoadSpec(o)
	if err != nil {
		t.Fatal(err)
	}
	var m xlbMaps
	if err := spec.LoadAndAssign(&m, &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: o.PinDir}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return &m
}

// newProcess is what a new process that adopts the maps knows: its own
// handles on them (copies of m's) and the state loadApplied reads back.
// Opening them as the process does (adoptPinned) costs half a second,
// and the test starts some eighty processes.
func newProcess(t *testing.T, o Options, m *xlbMaps) *Datapath {
	t.Helper()
	d := &Datapath{opts: o, log: o.Logger}
	src, dst := reflect.ValueOf(m).Elem(), reflect.ValueOf(&d.objs.xlbMaps).Elem()
	for i := range src.NumField() {
		if mp, ok := src.Field(i).Interface().(*ebpf.Map); ok && mp != nil {
			c, err := mp.Clone()
			if err != nil {
				t.Fatal(err)
			}
			dst.Field(i).Set(reflect.ValueOf(c))
		}
	}
	if err := d.loadApplied(); err != nil {
		d.Close()
		t.Fatalf("read pinned state: %v", err)
	}
	return d
}

// readCrashDump reads the maps as they are (the VIP match is not synced
// from the catalog, as loadApplied would).
func readCrashDump(t *testing.T, m *xlbMaps, placeholder *liveTable) crashDump {
	t.Helper()
	var ph ebpf.MapID
	if placeholder != nil {
		info, err := placeholder.m.Info()
		if err != nil {
			t.Fatal(err)
		}
		ph, _ = info.ID()
	}
	c := crashDump{vips: map[xlbVipKey]xlbVipInfo{}, tables: map[xlbVipKey][]uint32{}, index: map[xlbVipKey]xlbVipInfo{},
		reals: map[uint32]xlbRealInfo{}, sched: map[uint32]xlbSvcSched{}, addrs: map[xlbVipKey]uint32{}}
	reached := map[uint32]bool{}
	var (
		k  xlbVipKey
		vi xlbVipInfo
		av uint32
	)
	for it := m.XlbVips.Iterate(); it.Next(&k, &vi); {
		reached[vi.TableId] = true
		c.tables[k] = readSlot(t, m.XlbTables, vi.TableId, int(vi.TableSize))
		vi.TableId = 0
		c.vips[k] = vi
	}
	for it := m.XlbVipAddrs.Iterate(); it.Next(&k, &av); {
		c.addrs[k] = av
	}
	must(t, scanArray(m.XlbVipIndex, func(_ uint32, b *xlbVipBucket) bool {
		for _, id := range b.Ent {
			var e xlbVipEnt
			if id != 0 && m.XlbVipEnts.Lookup(id, &e) == nil {
				e.Info.TableId = 0
				c.index[e.Key] = e.Info
			}
		}
		return true
	}))
	must(t, scanArray(m.XlbReals, func(id uint32, r *xlbRealInfo) bool {
		if *r != (xlbRealInfo{}) {
			c.reals[id] = *r
		}
		return true
	}))
	must(t, scanArray(m.XlbSvcSched, func(id uint32, s *xlbSvcSched) bool {
		if *s != (xlbSvcSched{}) {
			c.sched[id] = *s
		}
		return true
	}))
	must(t, scanArray(m.XlbTables, func(slot uint32, inner *uint32) bool {
		if *inner != 0 && !reached[slot] && ebpf.MapID(*inner) != ph {
			c.unrefTab = append(c.unrefTab, hex.EncodeToString([]byte{byte(slot >> 8), byte(slot)}))
		}
		return true
	}))
	must(t, m.XlbNode.Lookup(uint32(0), &c.node))
	c.node.ProbeCookie = 0
	must(t, m.XlbFragConf.Lookup(uint32(0), &c.frag))
	for i := range c.peers {
		must(t, m.XlbFragPeers.Lookup(uint32(i), &c.peers[i]))
	}
	return c
}

// readSlot returns the m entries of the table in slot.
func readSlot(t *testing.T, tables *ebpf.Map, slot uint32, m int) []uint32 {
	t.Helper()
	var id uint32
	must(t, tables.Lookup(slot, &id))
	inner, err := ebpf.NewMapFromID(ebpf.MapID(id))
	if err != nil {
		t.Fatal(err)
	}
	lt, err := mapTable(inner)
	if err != nil {
		t.Fatal(err)
	}
	defer lt.close()
	return lt.read(m)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// diff names the first part of got that differs from c ("" when none).
func (c crashDump) diff(got crashDump) string {
	switch {
	case !maps.Equal(c.vips, got.vips):
		return "VIP catalog"
	case !maps.EqualFunc(c.tables, got.tables, slices.Equal):
		return "tables"
	case !maps.Equal(c.index, got.index):
		return "the forwarder's VIP match"
	case !maps.Equal(c.reals, got.reals):
		return "reals"
	case !maps.Equal(c.sched, got.sched):
		return "schedulers"
	case !maps.Equal(c.addrs, got.addrs):
		return "VIP addresses"
	case c.node != got.node:
		return "node settings"
	case c.frag != got.frag || c.peers != got.peers:
		return "fragment pool"
	case len(got.unrefTab) > 0:
		return "tables in slots no VIP reaches: " + strings.Join(got.unrefTab, ", ")
	}
	return ""
}
