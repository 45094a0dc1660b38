package datapath

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/maglev"
	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/state"
)

// The Go kinds are the data plane's enum xlb_sched.
func TestSchedABI(t *testing.T) {
	for _, c := range []struct {
		g state.SchedKind
		c xlbXlbSched
	}{
		{state.SchedMaglev, xlbXlbSchedXLB_SCHED_MAGLEV}, {state.SchedMaglevSource, xlbXlbSchedXLB_SCHED_MAGLEV_SOURCE},
		{state.SchedDH, xlbXlbSchedXLB_SCHED_DH}, {state.SchedRR, xlbXlbSchedXLB_SCHED_RR},
		{state.SchedWRR, xlbXlbSchedXLB_SCHED_WRR}, {state.SchedLC, xlbXlbSchedXLB_SCHED_LC},
		{state.SchedWLC, xlbXlbSchedXLB_SCHED_WLC}, {state.SchedSED, xlbXlbSchedXLB_SCHED_SED},
		{state.SchedNQ, xlbXlbSchedXLB_SCHED_NQ}, {state.SchedLBLC, xlbXlbSchedXLB_SCHED_LBLC},
		{state.SchedLBLCR, xlbXlbSchedXLB_SCHED_LBLCR},
	} {
		if uint32(c.g) != uint32(c.c) {
			t.Errorf("state kind %d, C %d", c.g, c.c)
		}
	}
	if state.SchedListMax != int(xlbXlbSchedXLB_SCHED_LIST_MAX) || len(xlbSvcSched{}.Ent) != state.SchedListMax {
		t.Errorf("list max: Go %d, C %d", state.SchedListMax, xlbXlbSchedXLB_SCHED_LIST_MAX)
	}
}

var schedBackends = []netip.Addr{
	netip.MustParseAddr("10.0.1.1"), netip.MustParseAddr("10.0.1.2"), netip.MustParseAddr("10.0.1.3"),
}

// schedState is one TCP service on vip4:80, reals 1..3 (schedBackends),
// table [1 2 3 1 2 3 1], with scheduler sc.
func schedState(sc state.Sched) (*State, []uint32) {
	st := &State{Node: testNode(), Services: map[VIPKey]*Service{}}
	for i, a := range schedBackends {
		st.Reals.Set(uint32(i+1), Real{Addr: a, SvcID: 1, Active: true})
	}
	tbl := []uint32{1, 2, 3, 1, 2, 3, 1}
	st.Services[VIPKey{Addr: vip4, Port: 80, Proto: 6}] = &Service{SvcID: 1, Encap: EncapGRE, Table: tbl, Sched: sc}
	return st, tbl
}

// synTo sends a SYN from src:sport and returns the backend it went to.
func synTo(t *testing.T, d *Datapath, src netip.Addr, sport uint16) netip.Addr {
	t.Helper()
	f := packet.Flow{Src: src, Dst: vip4, SrcPort: sport, DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: packet.SYN}
	verdict, out := run(t, d.Program(), f.Frame())
	if verdict != xdpTX || len(out) < 34 {
		t.Fatalf("SYN %s:%d: verdict %d", src, sport, verdict)
	}
	return netip.AddrFrom4([4]byte(out[30:34])) // outer IPv4 destination
}

func ents(ws ...uint32) []state.SchedEnt {
	var out []state.SchedEnt
	for i, w := range ws {
		out = append(out, state.SchedEnt{RealID: uint32(i + 1), Weight: w})
	}
	return out
}

// rr hands 300 new connections out exactly 100 each; wrr 1:2:3 gives
// exactly 100/200/300 of 600, interleaved (no backend gets more than
// its share of any 6 consecutive ones).
func TestSchedRoundRobin(t *testing.T) {
	d := newTestDatapath(t, Options{})
	base := 10000
	for _, tc := range []struct {
		name  string
		sc    state.Sched
		flows int
		want  []int
	}{
		{"rr", state.Sched{Kind: state.SchedRR, List: ents(1, 1, 1)}, 300, []int{100, 100, 100}},
		{"wrr", state.Sched{Kind: state.SchedWRR, List: ents(1, 2, 3), Stride: 5}, 600, []int{100, 200, 300}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, _ := schedState(tc.sc)
			if _, err := d.Apply(st); err != nil {
				t.Fatal(err)
			}
			got := map[netip.Addr]int{}
			var order []netip.Addr
			for i := range tc.flows {
				b := synTo(t, d, client4, uint16(base+i))
				got[b]++
				order = append(order, b)
				// Any 6 consecutive new flows are 1:2:3 (the stride walk).
				if n := len(order); tc.name == "wrr" && n >= 6 {
					w := map[netip.Addr]int{}
					for _, x := range order[n-6:] {
						w[x]++
					}
					if w[schedBackends[0]] != 1 || w[schedBackends[1]] != 2 || w[schedBackends[2]] != 3 {
						t.Fatalf("flows %d..%d: %v, want 1:2:3", n-6, n-1, w)
					}
				}
			}
			for i, a := range schedBackends {
				if got[a] != tc.want[i] {
					t.Errorf("%s: %d new flows, want %d (all: %v)", a, got[a], tc.want[i], got)
				}
			}
			// A tracked flow keeps its backend whatever the cursor does.
			first := synTo(t, d, client4, uint16(base))
			f := packet.Flow{Src: client4, Dst: vip4, SrcPort: uint16(base), DstPort: 80, Proto: packet.ProtoTCP}
			for range 5 {
				_, out := run(t, d.Program(), f.Frame())
				if b := netip.AddrFrom4([4]byte(out[30:34])); b != first {
					t.Fatalf("ACK of a tracked flow went to %s, its SYN to %s", b, first)
				}
			}
			base += tc.flows
		})
	}
}

// maglev-source: one client's 50 connections on one backend, the table's
// slot of SourceHash; under /24 the clients of one /24 together; dh: every
// client on the destination's slot.
func TestSchedHash(t *testing.T) {
	d := newTestDatapath(t, Options{})
	for k, tc := range []struct {
		name string
		sc   state.Sched
		want func(c netip.Addr) uint64
	}{
		{"maglev-source /32", state.Sched{Kind: state.SchedMaglevSource, Plen4: 32, Plen6: 128},
			func(c netip.Addr) uint64 { return maglev.SourceHash(c, 32, 128) }},
		{"maglev-source /24", state.Sched{Kind: state.SchedMaglevSource, Plen4: 24, Plen6: 128},
			func(c netip.Addr) uint64 { return maglev.SourceHash(c, 24, 128) }},
		{"dh", state.Sched{Kind: state.SchedDH}, func(netip.Addr) uint64 { return maglev.DestHash(vip4) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, tbl := schedState(tc.sc)
			if _, err := d.Apply(st); err != nil {
				t.Fatal(err)
			}
			seen := map[netip.Addr]bool{}
			for c := range 20 {
				client := netip.AddrFrom4([4]byte{198, 51, byte(100 + c/10), byte(1 + c)})
				want := schedBackends[tbl[maglev.Slot(tc.want(client), uint32(len(tbl)))]-1]
				for i := range 50 {
					if b := synTo(t, d, client, uint16(10000+10000*k+100*c+i)); b != want {
						t.Fatalf("client %s, connection %d: %s, want %s", client, i, b, want)
					}
				}
				seen[want] = true
			}
			if tc.name == "maglev-source /32" && len(seen) < 2 {
				t.Errorf("20 clients all on one backend: %v", seen)
			}
		})
	}
	// The scheduler read back from the maps is the one written.
	for _, sc := range []state.Sched{
		{Kind: state.SchedWRR, List: ents(3, 1), Stride: 3},
		{Kind: state.SchedLBLCR, List: ents(300, 100), Expire: 24 * time.Hour},
	} {
		st, _ := schedState(sc)
		if _, err := d.Apply(st); err != nil {
			t.Fatal(err)
		}
		got, err := d.readSched(1)
		// the expiration is kept in ticks, rounded up
		if err == nil && got.Expire >= sc.Expire && got.Expire < sc.Expire+time.Second {
			got.Expire = sc.Expire
		}
		if err != nil || !got.Equal(&sc) {
			t.Fatalf("read back %+v (%v), wrote %+v", got, err, sc)
		}
	}
}
