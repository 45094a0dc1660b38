package plan

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/state"
)

func TestSchedOf(t *testing.T) {
	a, b, c := netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::2")
	ids := map[netip.Addr]uint32{a: 7, b: 8, c: 9}
	usable := []config.Backend{{Addr: a, Weight: 300}, {Addr: b, Weight: 100}, {Addr: c, Weight: 200}}
	wrr, err := schedOf(&config.DesiredService{Scheduler: config.SchedulerWRR}, usable, ids)
	if err != nil {
		t.Fatal(err)
	}
	// By address, weights over their gcd, a stride coprime with 6.
	want := []state.SchedEnt{{RealID: 8, Weight: 1}, {RealID: 7, Weight: 3}, {RealID: 9, Weight: 2}}
	if wrr.Kind != state.SchedWRR || len(wrr.List) != 3 || wrr.List[0] != want[0] || wrr.List[1] != want[1] || wrr.List[2] != want[2] {
		t.Errorf("wrr: %+v", wrr)
	}
	if wrr.Stride != 5 || gcd(wrr.Stride, wrr.Total()) != 1 {
		t.Errorf("stride %d for total %d", wrr.Stride, wrr.Total())
	}
	rr, _ := schedOf(&config.DesiredService{Scheduler: config.SchedulerRR}, usable, ids)
	if rr.Kind != state.SchedRR || rr.Total() != 3 || rr.Stride != 0 {
		t.Errorf("rr: %+v", rr)
	}
	src, _ := schedOf(&config.DesiredService{Scheduler: config.SchedulerSH, SourceNetmask: 24}, usable, ids)
	if want := (state.Sched{Kind: state.SchedMaglevSource, Plen4: 24, Plen6: 128}); !src.Equal(&want) {
		t.Errorf("sh: %+v", src)
	}
	// lblc, lblcr: the weights as configured (the overload test compares
	// active connections with them), IPVS's expiration.
	for k, kind := range map[config.Scheduler]state.SchedKind{config.SchedulerLBLC: state.SchedLBLC, config.SchedulerLBLCR: state.SchedLBLCR} {
		lb, err := schedOf(&config.DesiredService{Scheduler: k}, usable, ids)
		want := []state.SchedEnt{{RealID: 8, Weight: 100}, {RealID: 7, Weight: 300}, {RealID: 9, Weight: 200}}
		if err != nil || lb.Kind != kind || lb.Expire != 24*time.Hour || len(lb.List) != 3 ||
			lb.List[0] != want[0] || lb.List[1] != want[1] || lb.List[2] != want[2] {
			t.Errorf("%s: %+v, %v", k, lb, err)
		}
	}
	for total := uint32(1); total < 2000; total++ {
		if s := wrrStride(total); gcd(s, total) != 1 || s == 0 {
			t.Fatalf("stride %d for total %d", s, total)
		}
	}
	// Persistence: the service's id or its group's, the usable list
	// whatever the scheduler.
	var mg state.Sched
	p := &config.DesiredService{Scheduler: config.SchedulerMaglev, Persistence: config.Persistence{Timeout: time.Minute, Netmask: 24}}
	if err := persistOf(&mg, p, 12, usable, ids); err != nil || mg.Persist.ID != 12 || mg.Persist.Plen4 != 24 ||
		mg.Persist.Plen6 != 128 || len(mg.List) != 3 {
		t.Errorf("persistence: %+v %v", mg, err)
	}
	var g1, g2 state.Sched
	p.Persistence.Group = "shop"
	persistOf(&g1, p, 12, usable, ids)
	persistOf(&g2, p, 13, usable, ids)
	if g1.Persist.ID != g2.Persist.ID || g1.Persist.ID < 1<<31 {
		t.Errorf("group ids %#x, %#x: want one, top bit set", g1.Persist.ID, g2.Persist.ID)
	}
	many := make([]config.Backend, state.SchedListMax+1)
	for i := range many {
		many[i] = config.Backend{Addr: netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), Weight: 1}
	}
	if _, err := schedOf(&config.DesiredService{Scheduler: config.SchedulerRR}, many, ids); err == nil {
		t.Error("rr over 257 backends accepted")
	}
}
