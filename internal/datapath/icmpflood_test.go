package datapath

import (
	"math/rand/v2"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/testenv"
)

// icmpFloodError is an ICMP frag-needed from a router about client flow
// f (quoting the backend's reply).
func icmpFloodError(f packet.Flow) []byte {
	return icmpError(f, router4, packet.ICMPUnreach, packet.ICMPFragNeeded, 1400, 28)
}

// icmpBackend runs frame once on this thread and returns the backend its
// tunnel goes to (invalid when it is not forwarded) and whether it moved
// icmp_scan_limited.
func icmpBackend(t *testing.T, d *Datapath, frame []byte) (netip.Addr, bool) {
	t.Helper()
	before, _ := d.Stats()
	ret, out := run(t, d.Program(), frame)
	after, _ := d.Stats()
	limited := after["icmp_scan_limited"] != before["icmp_scan_limited"]
	if ret != xdpTX && ret != xdpRedirect {
		return netip.Addr{}, limited
	}
	tun, err := packet.ParseTunnel(out)
	if err != nil {
		t.Fatalf("forwarded ICMP error: %v", err)
	}
	return tun.Backend, limited
}

// TestICMPErrorFloodBounded: ICMP errors quoting random 5-tuples (none
// tracked anywhere) are charged to the CPU's ICMP flood budget
// (node.flood_new_flow_rate); over it the other CPUs' slices are not read
// and the Maglev table answers (icmp_scan_limited). Shown with flows
// tracked on another CPU whose service's table then moved them: while the
// budget lasts their errors reach the tracked backend (the scan found
// them); under the flood the table's (the scan stopped); once the flood
// ends the tracked one again. Errors about flows this CPU tracks reach
// the tracked backend throughout.
func TestICMPErrorFloodBounded(t *testing.T) {
	if runtime.NumCPU() < 2 {
		testenv.Unavailable(t, "needs 2 CPUs (flows tracked on another CPU), have %d", runtime.NumCPU())
	}
	d := newTestDatapath(t, Options{})
	key := VIPKey{Addr: vip4, Port: 80, Proto: 6}
	tracked, moved := be4, netip.MustParseAddr("10.0.1.2")
	st := fixtureState()
	st.Reals.Set(20, Real{Addr: moved, SvcID: 1, Active: true})
	if _, err := d.Apply(st); err != nil { // every slot: tracked (real 1)
		t.Fatal(err)
	}
	flow := func(port uint16) packet.Flow {
		return packet.Flow{Src: client4, Dst: vip4, SrcPort: port, DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: packet.ACK}
	}
	var remote, local []packet.Flow
	for i := range 8 {
		remote = append(remote, flow(uint16(30000+i)))
		local = append(local, flow(uint16(31000+i)))
		runOn(t, d, 1, remote[i])
	}
	pinThread0(t)
	for _, f := range local {
		run(t, d.Program(), f.Frame())
	}
	// Every slot now gives the other backend; the flood budget: 64 per tick.
	st.Services[key] = &Service{SvcID: 1, Encap: EncapGRE, Table: []uint32{20, 20, 20, 20, 20, 20, 20}}
	st.Node.FloodNewFlowRate = 240
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	expect := func(phase string, fs []packet.Flow, want netip.Addr) {
		t.Helper()
		for _, f := range fs {
			if got, limited := icmpBackend(t, d, icmpFloodError(f)); got != want || limited {
				t.Fatalf("%s: error about %d to %s (scan limited %v), want %s", phase, f.SrcPort, got, limited, want)
			}
		}
	}
	expect("before the flood, tracked on CPU 1", remote, tracked)
	expect("before the flood, tracked here", local, tracked)

	// The flood: random tuples; a check after every 200 of them (the
	// budget of 64 is used up unless a tick began in those 200).
	rng := rand.New(rand.NewPCG(3, 4))
	start := time.Now()
	before, _ := d.Stats()
	limitedChecks, checks := 0, 0
	for round := range 25 {
		for range 200 {
			a := 198<<24 | 18<<16 | rng.Uint32N(1<<17)
			f := flow(uint16(1024 + rng.UintN(60000)))
			f.Src = netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)})
			if got, _ := icmpBackend(t, d, icmpFloodError(f)); got != moved {
				t.Fatalf("flood error to %s, want the table's %s", got, moved)
			}
		}
		f := remote[round%len(remote)]
		got, limited := icmpBackend(t, d, icmpFloodError(f))
		checks++
		switch {
		case limited && got == moved:
			limitedChecks++
		case !limited && got == tracked: // a tick began: the budget's first errors scan
		default:
			t.Fatalf("under the flood: error about %d to %s, scan limited %v", f.SrcPort, got, limited)
		}
		expect("under the flood, tracked here", local[round%len(local):round%len(local)+1], tracked)
	}
	after, _ := d.Stats()
	ticks := int(time.Since(start)/(time.Duration(1)<<ctTickShift)) + 2 // the ticks the flood spanned, at most
	scanned := 5000 + checks - int(after["icmp_scan_limited"]-before["icmp_scan_limited"])
	t.Logf("flood of 5000 errors in %d ticks at most: %d scans of the other CPUs' slices, %d of %d checks limited, %d activations",
		ticks, scanned, limitedChecks, checks, after["flood_activations"]-before["flood_activations"])
	if limitedChecks < checks*3/4 || after["flood_activations"] == before["flood_activations"] {
		t.Fatalf("the scan was limited for %d of %d checks; activations %d", limitedChecks, checks,
			after["flood_activations"]-before["flood_activations"])
	}
	if scanned > 64*ticks { // the budget: 64 per tick
		t.Fatalf("%d scans under the flood in %d ticks at most, budget 64 per tick", scanned, ticks)
	}
	for _, c := range []string{"ct_hit", "ct_miss", "ct_remote_hit", "ct_reselect", "flood_untracked"} {
		if after[c] != before[c] {
			t.Fatalf("ICMP errors moved %s: %d -> %d", c, before[c], after[c])
		}
	}
	time.Sleep(2 * ctTick) // flood mode ends
	expect("after the flood, tracked on CPU 1", remote, tracked)
}

// pinThread0 keeps the test's goroutine on CPU 0 until it ends.
func pinThread0(t *testing.T) {
	restore, err := pinThread(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(restore)
}
