package datapath

import (
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/packet"
)

// TestStateTimeouts (IPVS-style per-state timeouts): after the same
// idle time, entries of flows that saw a FIN or RST, and of SYN-only flows,
// have aged out while established ones are still tracked; UDP follows its
// own timeout. Judged by the conntrack counters of the next packet of each
// flow (one CPU: pinned, so all entries are in one slice).
func TestStateTimeouts(t *testing.T) {
	pinCPU(t)
	short, long := time.Second, time.Hour
	// a: TCP short after FIN/RST and SYN, long when established; UDP short.
	a := newTestDatapath(t, Options{})
	stA := fixtureState()
	stA.Node.Timeouts = Timeouts{TCPSyn: short, TCP: long, TCPFin: short, UDP: short}
	// b: the other way round for UDP and established TCP.
	b := newTestDatapath(t, Options{})
	stB := fixtureState()
	stB.Node.Timeouts = Timeouts{TCPSyn: long, TCP: short, TCPFin: long, UDP: long}
	for _, c := range []struct {
		d  *Datapath
		st *State
	}{{a, stA}, {b, stB}} {
		if _, err := c.d.Apply(c.st); err != nil {
			t.Fatal(err)
		}
	}
	flow := func(port uint16, proto uint8, flags uint8) packet.Flow {
		return packet.Flow{Src: client4, Dst: vip4, SrcPort: port, DstPort: 80, Proto: proto, TCPFlags: flags}
	}
	udp := func(port uint16) packet.Flow {
		f := flow(port, packet.ProtoUDP, 0)
		f.DstPort = 53
		return f
	}
	type fl struct {
		name    string
		history []packet.Flow // packets before the pause
		next    packet.Flow   // packet after it
		tracked map[*Datapath]bool
	}
	est, syn, fin, rst := uint16(1001), uint16(1002), uint16(1003), uint16(1004)
	flows := []fl{
		{"established", []packet.Flow{flow(est, 6, packet.SYN), flow(est, 6, packet.ACK)}, flow(est, 6, packet.ACK),
			map[*Datapath]bool{a: true, b: false}},
		{"syn only", []packet.Flow{flow(syn, 6, packet.SYN)}, flow(syn, 6, packet.ACK),
			map[*Datapath]bool{a: false, b: true}},
		{"fin", []packet.Flow{flow(fin, 6, packet.SYN), flow(fin, 6, packet.ACK), flow(fin, 6, packet.FIN|packet.ACK)}, flow(fin, 6, packet.ACK),
			map[*Datapath]bool{a: false, b: true}},
		{"rst", []packet.Flow{flow(rst, 6, packet.SYN), flow(rst, 6, packet.ACK), flow(rst, 6, packet.RST)}, flow(rst, 6, packet.ACK),
			map[*Datapath]bool{a: false, b: true}},
		{"udp", []packet.Flow{udp(2001), udp(2001)}, udp(2001),
			map[*Datapath]bool{a: false, b: true}},
	}
	for _, d := range []*Datapath{a, b} {
		for _, f := range flows {
			for _, p := range f.history {
				if ret, _ := run(t, d.Program(), p.Frame()); ret != xdpTX {
					t.Fatalf("%s: verdict %d", f.name, ret)
				}
			}
		}
	}
	// Before the pause every flow is tracked.
	for _, d := range []*Datapath{a, b} {
		for _, f := range flows {
			before, _ := d.Stats()
			run(t, d.Program(), f.history[len(f.history)-1].Frame())
			after, _ := d.Stats()
			if after["ct_hit"] != before["ct_hit"]+1 {
				t.Fatalf("%s not tracked right after its packets", f.name)
			}
		}
	}
	time.Sleep(1600 * time.Millisecond) // > 1 s (4 ticks) + a tick, < 1 h
	for _, d := range []*Datapath{a, b} {
		for _, f := range flows {
			before, _ := d.Stats()
			if ret, _ := run(t, d.Program(), f.next.Frame()); ret != xdpTX {
				t.Fatalf("%s: verdict %d", f.name, ret)
			}
			after, _ := d.Stats()
			hit := after["ct_hit"] == before["ct_hit"]+1
			expired := after["ct_reselect"] == before["ct_reselect"]+1 && after["ct_miss"] == before["ct_miss"]+1
			want := f.tracked[d]
			name := "a (short: syn, fin, udp)"
			if d == b {
				name = "b (short: established)"
			}
			if want && !hit || !want && !expired {
				t.Errorf("%s, %s: tracked after 1.6 s = %v, want %v (counters %v -> %v)", name, f.name, hit, want, before, after)
			}
		}
	}
}
