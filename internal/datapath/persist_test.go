package datapath

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/state"
)

// persistState: services on vip4:80 (id 1, reals 1..3) and vip4:443 (id
// 2, reals 4..6, the same three backends), rr, persistent under /24 in
// one group (templates id 7), the List holding the backends of keep. A
// SYN's entry lives 1 s, shorter than the timeouts the tests give: a
// template lives while a connection of it does.
func persistState(timeout time.Duration, keep ...int) *State {
	st := &State{Node: testNode(), Services: map[VIPKey]*Service{}}
	st.Node.Timeouts.TCPSyn = time.Second
	for s, port := range []uint16{80, 443} {
		var list []state.SchedEnt
		for i, a := range schedBackends {
			rid := uint32(3*s + i + 1)
			st.Reals.Set(rid, Real{Addr: a, SvcID: uint32(s + 1), Active: true})
			for _, k := range keep {
				if k == i {
					list = append(list, state.SchedEnt{RealID: rid, Weight: 1})
				}
			}
		}
		tbl := []uint32{uint32(3*s + 1), uint32(3*s + 2), uint32(3*s + 3)}
		st.Services[VIPKey{Addr: vip4, Port: port, Proto: 6}] = &Service{SvcID: uint32(s + 1), Encap: EncapGRE, Table: tbl,
			Sched: state.Sched{Kind: state.SchedRR, Proto: 6, List: list,
				Persist: state.Persist{ID: 7, Timeout: timeout, Plen4: 24, Plen6: 128}}}
	}
	return st
}

// synFrom sends a SYN from src:sport to vip4:port and returns its backend.
func synFrom(t *testing.T, d *Datapath, src netip.Addr, sport, port uint16) netip.Addr {
	t.Helper()
	f := packet.Flow{Src: src, Dst: vip4, SrcPort: sport, DstPort: port, Proto: packet.ProtoTCP, TCPFlags: packet.SYN}
	verdict, out := run(t, d.Program(), f.Frame())
	if verdict != xdpTX || len(out) < 34 {
		t.Fatalf("SYN %s:%d -> %d: verdict %d", src, sport, port, verdict)
	}
	return netip.AddrFrom4([4]byte(out[30:34]))
}

// Persistence: one client's connections (other source ports) and its /24
// on one backend, through both services of the group, for the timeout;
// after it rr chooses again; a backend leaving the list (drained) is
// dropped from the template.
func TestPersistence(t *testing.T) {
	d := newTestDatapath(t, Options{})
	if _, err := d.Apply(persistState(2*time.Second, 0, 1, 2)); err != nil {
		t.Fatal(err)
	}
	a, b := netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("192.0.2.200")
	flows := map[uint16]int{} // new flows so far per service: its rr cursor
	first := synFrom(t, d, a, 1000, 80)
	flows[80]++
	if first != schedBackends[0] {
		t.Fatalf("first connection on %s, want rr's first, %s", first, schedBackends[0])
	}
	for i := range 20 {
		for _, c := range []struct {
			src  netip.Addr
			port uint16
		}{{a, 80}, {b, 80}, {a, 443}, {b, 443}} {
			if got := synFrom(t, d, c.src, uint16(2000+i), c.port); got != first {
				t.Fatalf("connection %d of %s to port %d on %s, want %s (the template)", i, c.src, c.port, got, first)
			}
			flows[c.port]++
		}
	}
	// One template (client and its /24, both services), naming the first
	// backend's real of the service that set it, living on for about its
	// timeout.
	var tpl []CTEntry
	if err := d.ScanTemplates(func(e CTEntry) bool { tpl = append(tpl, e); return true }); err != nil {
		t.Fatal(err)
	}
	if len(tpl) != 1 || tpl[0].RealID != 1 || tpl[0].Age < time.Second || tpl[0].Age > 2*time.Second+300*time.Millisecond {
		t.Fatalf("templates: %+v, want one naming real 1", tpl)
	}
	// After the timeout (no packet meanwhile) rr chooses again.
	time.Sleep(2600 * time.Millisecond)
	want := schedBackends[flows[80]%3]
	if got := synFrom(t, d, a, 3000, 80); got != want || want == first {
		t.Fatalf("after the timeout: %s, want rr's choice %s (not %s)", got, want, first)
	}
	if got := synFrom(t, d, b, 3001, 443); got != want {
		t.Fatalf("the new template: %s, want %s", got, want)
	}
	// Drain the template's backend (it leaves the list): the next
	// connection chooses again and the new choice sticks.
	keep := []int{0, 1, 2}
	keep = append(keep[:slicesIndexOf(want)], keep[slicesIndexOf(want)+1:]...)
	if _, err := d.Apply(persistState(2*time.Second, keep...)); err != nil {
		t.Fatal(err)
	}
	next := synFrom(t, d, a, 4000, 80)
	if next == want {
		t.Fatalf("a drained backend kept its template: %s", next)
	}
	for i := range 5 {
		if got := synFrom(t, d, b, uint16(4100+i), 443); got != next {
			t.Fatalf("after the drain: %s, want %s", got, next)
		}
	}
}
