package datapath

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/xlbproject/xlb/internal/state"
)

// leastWant is IPVS's choice among list by the counts: lc the least
// (active << 8) + inactive, wlc the same per weight, sed (active + 1) per
// weight, nq the first without active connections else as sed; the
// overheads compared by cross-multiplying, the first of equals winning,
// counts below 0 read as 0.
func leastWant(kind state.SchedKind, list []state.SchedEnt, counts map[uint32][2]int64) uint32 {
	var best uint32
	var bestOh, bestW uint64 = 0, 1
	for _, e := range list {
		a, in := uint64(max(counts[e.RealID][0], 0)), uint64(max(counts[e.RealID][1], 0))
		if kind == state.SchedNQ && a == 0 {
			return e.RealID
		}
		oh, w := a+1, uint64(e.Weight)
		switch kind {
		case state.SchedLC:
			oh, w = a<<8+in, 1
		case state.SchedWLC:
			oh = a<<8 + in
		}
		if best == 0 || oh*bestW < bestOh*w {
			best, bestOh, bestW = e.RealID, oh, w
		}
	}
	return best
}

// leastState is one TCP service on vip4:80 with n reals 10.0.x.y (ids
// 1..n) listed in a random order with random weights.
func leastState(r *rand.Rand, kind state.SchedKind, n int) (*State, []netip.Addr, []state.SchedEnt) {
	st := &State{Node: testNode(), Services: map[VIPKey]*Service{}}
	var addrs []netip.Addr
	var list []state.SchedEnt
	for i := range n {
		a := netip.AddrFrom4([4]byte{10, 0, byte(1 + i/200), byte(1 + i%200)})
		addrs = append(addrs, a)
		st.Reals.Set(uint32(i+1), Real{Addr: a, SvcID: 1, Active: true})
		list = append(list, state.SchedEnt{RealID: uint32(i + 1), Weight: 1 + r.Uint32N(5)})
	}
	r.Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })
	st.Services[VIPKey{Addr: vip4, Port: 80, Proto: 6}] = &Service{SvcID: 1, Encap: EncapGRE,
		Table: []uint32{1}, Sched: state.Sched{Kind: kind, Proto: 6, List: list}}
	return st, addrs, list
}

// The least-connection schedulers choose exactly as IPVS's formulas say,
// for lists of 1 to 256 backends and counts drawn from small ranges (ties
// are frequent; some counts are negative, as a reader may see them): each
// trial writes the counts, sends a SYN of a new flow and compares its
// backend with leastWant.
func TestSchedLeastExact(t *testing.T) {
	d := newTestDatapath(t, Options{})
	r := rand.New(rand.NewPCG(7, 7))
	port := uint16(1024)
	for _, kind := range []state.SchedKind{state.SchedLC, state.SchedWLC, state.SchedSED, state.SchedNQ} {
		for _, n := range []int{1, 3, 10, 64, 256} {
			t.Run(fmt.Sprintf("kind%d/n%d", kind, n), func(t *testing.T) {
				st, addrs, list := leastState(r, kind, n)
				if _, err := d.Apply(st); err != nil {
					t.Fatal(err)
				}
				for trial := range 40 {
					counts := map[uint32][2]int64{}
					for _, e := range list {
						c := [2]int64{r.Int64N(4) - 1, r.Int64N(600) - 10}
						if kind == state.SchedNQ && r.IntN(4) > 0 {
							c[0] = 1 + r.Int64N(3) // nq: mostly busy, so sed's rule decides too
						}
						counts[e.RealID] = c
						rc := xlbRealConns{Active: c[0], Inactive: c[1]}
						if err := d.objs.XlbRealConns.Put(e.RealID, &rc); err != nil {
							t.Fatal(err)
						}
					}
					want := leastWant(kind, list, counts)
					port++
					if got := synTo(t, d, client4, port); got != addrs[want-1] {
						t.Fatalf("trial %d: new flow to %s, want %s (real %d); list %v, counts %v",
							trial, got, addrs[want-1], want, list, counts)
					}
				}
			})
		}
	}
}
