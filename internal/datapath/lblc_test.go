package datapath

import (
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/state"
)

// lblcConn opens connection sport (SYN, then ACK: active) and returns
// the index of its backend in schedBackends.
func lblcConn(t *testing.T, d *Datapath, sport uint16) int {
	t.Helper()
	b := sendTCP(t, d, sport, packet.SYN)
	if again := sendTCP(t, d, sport, packet.ACK); again != b {
		t.Fatalf("port %d: ACK went to %s, SYN to %s", sport, again, b)
	}
	return slicesIndexOf(b)
}

// lblcApply commits the lblc or lblcr service of schedState over the
// backends of keep (indexes of schedBackends, weight 2 each).
func lblcApply(t *testing.T, d *Datapath, kind state.SchedKind, expire time.Duration, keep ...int) {
	t.Helper()
	sc := state.Sched{Kind: kind, Proto: 6, Expire: expire}
	for _, k := range keep {
		sc.List = append(sc.List, state.SchedEnt{RealID: uint32(k + 1), Weight: 2})
	}
	st, _ := schedState(sc)
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
}

// lblcEntry is the entry of vip4 (service 1) as real ids.
func lblcEntry(t *testing.T, d *Datapath) []uint32 {
	t.Helper()
	e, found, err := d.LBLC(1, vip4)
	if err != nil || !found {
		t.Fatalf("lblc entry of %s: found %v, %v", vip4, found, err)
	}
	return e.Reals
}

// wantSeq opens one connection per element of want (ports from port) and
// checks each one's backend (indexes of schedBackends).
func wantSeq(t *testing.T, d *Datapath, port uint16, want []int) {
	t.Helper()
	var got []int
	for i := range want {
		got = append(got, lblcConn(t, d, port+uint16(i)))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("connections from port %d went to backends %v, want %v", port, got, want)
	}
}

// lblc keeps the destination on its recorded backend while that is not
// overloaded (active > weight while another backend is under half its
// weight), then wlc chooses and is recorded; a backend that leaves the
// list (drained, weight 0, unhealthy) is never chosen; an entry unused for
// the expiration is forgotten.
func TestLBLC(t *testing.T) {
	d := newTestDatapath(t, Options{})
	lblcApply(t, d, state.SchedLBLC, time.Hour, 0, 1, 2)
	// Weights 2: the first backend takes connections until it holds 3
	// active (3 > 2 while the others hold 0); then the second (wlc) is
	// recorded, then the third; once every backend is past half its
	// weight nothing is overloaded and the third keeps the destination.
	wantSeq(t, d, 1000, []int{0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2})
	if got := lblcEntry(t, d); !slices.Equal(got, []uint32{3}) {
		t.Fatalf("entry %v, want real 3", got)
	}
	// The third backend drained: wlc chooses between the other two
	// (equal: the first) and the entry records it; it stays while no
	// backend is under half its weight.
	lblcApply(t, d, state.SchedLBLC, time.Hour, 0, 1)
	wantSeq(t, d, 2000, []int{0, 0})
	if got := lblcEntry(t, d); !slices.Equal(got, []uint32{1}) {
		t.Fatalf("entry after the drain %v, want real 1", got)
	}
	// Expiration 600 ms (3 ticks): used now, the entry holds; unused for
	// 1.5 s it is forgotten, and wlc (the second backend: 3 active
	// against the first's 5) chooses afresh.
	lblcApply(t, d, state.SchedLBLC, 600*time.Millisecond, 0, 1)
	wantSeq(t, d, 3000, []int{0})
	time.Sleep(1500 * time.Millisecond)
	wantSeq(t, d, 3100, []int{1})
	if got := lblcEntry(t, d); !slices.Equal(got, []uint32{2}) {
		t.Fatalf("entry after the expiration %v, want real 2", got)
	}
	// One table for all CPUs: a new connection on either CPU follows the
	// entry (the second backend holds 4 active, but none is under half
	// its weight).
	if runtime.NumCPU() > 1 {
		for cpu := range 2 {
			onCPU(t, cpu, func() { wantSeq(t, d, uint16(3200+cpu), []int{1}) })
		}
	}
	// Another destination (service) has its own entry.
	if _, found, err := d.LBLC(1, netip.MustParseAddr("10.200.0.2")); err != nil || found {
		t.Fatalf("entry of another destination: found %v, %v", found, err)
	}
}

// lblcr serves the set's least loaded member unless it is overloaded;
// under overload wlc's choice joins the set; a set unchanged for the
// expiration loses its most loaded member (a member no longer usable
// first), down to one.
func TestLBLCR(t *testing.T) {
	d := newTestDatapath(t, Options{})
	lblcApply(t, d, state.SchedLBLCR, time.Hour, 0, 1, 2)
	// {1} until the first backend holds 3 active; {1,2}: the second is
	// the least loaded member until it too holds 3; {1,2,3}: the third;
	// then all hold 3, none is under half its weight, and the least
	// loaded member (the first of equals) serves.
	wantSeq(t, d, 1000, []int{0, 0, 0, 1, 1, 1, 2, 2, 2, 0})
	if got := lblcEntry(t, d); !slices.Equal(got, []uint32{1, 2, 3}) {
		t.Fatalf("set %v, want reals 1 2 3", got)
	}
	// The first backend drained; expiration 600 ms (3 ticks). New
	// connections every 400 ms keep the entry in use while the set's age
	// passes the expiration: the drained member leaves first, then the
	// most loaded of the others; the set never shrinks below one, and
	// the drained backend never serves.
	lblcApply(t, d, state.SchedLBLCR, 600*time.Millisecond, 1, 2)
	set := []uint32{1, 2, 3}
	var shrunk [][]uint32
	for i := range 12 {
		conns := map[uint32]int64{}
		for _, r := range set {
			c, err := d.RealConns(r)
			if err != nil {
				t.Fatal(err)
			}
			conns[r] = c.Active
		}
		b := lblcConn(t, d, uint16(4000+i))
		got := lblcEntry(t, d)
		if b == 0 {
			t.Fatalf("connection %d went to the drained backend", i)
		}
		if len(got) < len(set) {
			want := lblcrShrunk(set, conns)
			if !slices.Equal(got, want) {
				t.Fatalf("connection %d: set %v shrank to %v, want %v (active %v)", i, set, got, want, conns)
			}
			shrunk = append(shrunk, got)
		} else if !slices.Equal(got, set) {
			t.Fatalf("connection %d: set %v became %v", i, set, got)
		}
		set = got
		time.Sleep(400 * time.Millisecond)
	}
	if len(shrunk) != 2 || !slices.Equal(shrunk[0], []uint32{2, 3}) || len(shrunk[1]) != 1 {
		t.Fatalf("the set shrank %v, want to reals 2 3, then to one", shrunk)
	}
}

// lblcrShrunk is set without its most loaded member by conns: real 1
// (drained) first, else the greatest active count, the last of equals.
func lblcrShrunk(set []uint32, conns map[uint32]int64) []uint32 {
	most := -1
	for i, r := range set {
		if r == 1 {
			most = i
			break
		}
		if most < 0 || conns[r] >= conns[set[most]] {
			most = i
		}
	}
	return slices.Delete(slices.Clone(set), most, most+1)
}

// An lblcr set holds at most 8 backends: over ten backends of weight 1
// behind an IPv6 VIP (keyed by the IPv6 destination), each member takes
// two connections before overload adds the next; once 8 are members, the
// choices of wlc under overload serve without joining the full set.
func TestLBLCRFullSet(t *testing.T) {
	d := newTestDatapath(t, Options{})
	st := &State{Node: testNode(), Services: map[VIPKey]*Service{}}
	sc := state.Sched{Kind: state.SchedLBLCR, Proto: 6, Expire: time.Hour}
	var tbl []uint32
	for i := range 10 {
		rid := uint32(i + 1)
		st.Reals.Set(rid, Real{Addr: netip.AddrFrom4([4]byte{10, 0, 2, byte(i + 1)}), SvcID: 1, Active: true})
		sc.List = append(sc.List, state.SchedEnt{RealID: rid, Weight: 1})
		tbl = append(tbl, rid)
	}
	st.Services[VIPKey{Addr: vip6, Port: 443, Proto: 6}] = &Service{SvcID: 1, Encap: EncapGRE, Table: tbl, Sched: sc}
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	conn := func(sport uint16) int {
		var b netip.Addr
		for _, flags := range []uint8{packet.SYN, packet.ACK} {
			f := packet.Flow{Src: client6, Dst: vip6, SrcPort: sport, DstPort: 443, Proto: packet.ProtoTCP, TCPFlags: flags}
			verdict, out := run(t, d.Program(), f.Frame())
			if verdict != xdpTX || len(out) < 34 {
				t.Fatalf("port %d flags %#x: verdict %d", sport, flags, verdict)
			}
			b = netip.AddrFrom4([4]byte(out[30:34]))
		}
		return int(b.As4()[3])
	}
	var got, want []int
	for i := range 20 {
		got = append(got, conn(uint16(5000+i)))
		if i < 16 {
			want = append(want, i/2+1)
		}
	}
	// 9 and 10 serve without joining; then no backend is under half its
	// weight, nothing is overloaded, and the set's least loaded members
	// serve again (1, then 2: the first of equals).
	want = append(want, 9, 10, 1, 2)
	if !slices.Equal(got, want) {
		t.Fatalf("connections went to backends %v, want %v", got, want)
	}
	e, found, err := d.LBLC(1, vip6)
	if err != nil || !found || !slices.Equal(e.Reals, []uint32{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Fatalf("set of %s: %+v (found %v, %v), want reals 1..8", vip6, e, found, err)
	}
	if _, found, err := d.LBLC(1, vip4); err != nil || found {
		t.Fatalf("an IPv4 destination has an entry: %v, %v", found, err)
	}
}

// TestSweepLBLC: the sweep deletes an entry not used for its service's
// expiration and keeps one used within it; an entry of a service whose
// scheduler is no longer lblc or lblcr goes too.
func TestSweepLBLC(t *testing.T) {
	d := newTestDatapath(t, Options{})
	lblcApply(t, d, state.SchedLBLC, time.Hour, 0, 1, 2)
	lblcConn(t, d, 1000)
	if _, found, err := d.LBLC(1, vip4); err != nil || !found {
		t.Fatalf("no lblc entry after a connection: %v", err)
	}
	now, err := d.now()
	if err != nil {
		t.Fatal(err)
	}
	expire := uint64(LBLCTicks(time.Hour))
	old := lblcKey{SvcID: 1}
	old.Addr, old.Family = addrBytes(netip.MustParseAddr("10.200.0.99"))
	if err := d.objs.XlbLblc.Put(&old, &lblcValue{Used: now - expire - 2, Mod: now - expire - 2, Rid: [8]uint64{1}}); err != nil {
		t.Fatal(err)
	}
	if freed, live, err := d.SweepLBLC(); err != nil || freed != 1 || live != 1 {
		t.Fatalf("sweep: %d freed, %d live, %v; want 1 and 1", freed, live, err)
	}
	if _, found, _ := d.LBLC(1, netip.MustParseAddr("10.200.0.99")); found {
		t.Fatal("the expired entry is still there")
	}
	if _, found, _ := d.LBLC(1, vip4); !found {
		t.Fatal("the live entry was deleted")
	}
	sc := state.Sched{Kind: state.SchedWLC, Proto: 6, List: []state.SchedEnt{{RealID: 1, Weight: 1}}}
	st, _ := schedState(sc)
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	if freed, live, err := d.SweepLBLC(); err != nil || freed != 1 || live != 0 {
		t.Fatalf("sweep after the service became wlc: %d freed, %d live, %v; want 1 and 0", freed, live, err)
	}
}
