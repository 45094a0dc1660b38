package datapath

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/state"
)

// setBack moves the last-seen time of every used way of the connection
// table back by ticks: what a jump of the forwarder's clock forward by
// ticks makes of the entries. It returns the ways moved.
func setBack(t *testing.T, d *Datapath, ticks uint64) int {
	t.Helper()
	now, err := ctNow()
	if err != nil {
		t.Fatal(err)
	}
	var (
		idx   uint32
		b     xlbCtBucket
		moved int
	)
	it := d.objs.XlbCt.Iterate()
	for it.Next(&idx, &b) {
		changed := false
		for w, e := range b.Way {
			if e>>ctStateShift&ctStateMask == 0 {
				continue
			}
			b.Way[w] = e&^ctTimeMask | (now-ticks)&ctTimeMask
			changed = true
			moved++
		}
		if changed {
			if err := d.objs.XlbCt.Update(idx, &b, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return moved
}

// TestClockJumpForwarder (a forward jump of the data plane's clock, as
// the forwarder sees it; e2e's TestTimeoutsClockJump shows the sweep's
// side): 12 established flows of a Maglev service over three backends,
// established timeout 2 h (the longest). Their entries set back by 2^16
// + 10 ticks (4.9 h) read as 10 ticks idle, the 16-bit time having
// wrapped: each flow's next ACK is a hit. Set back by 3 h, past the
// timeout: each next ACK finds its entry expired (a reselect), and the
// Maglev table sends it to the backend it had; the ACK after that is a
// hit again.
func TestClockJumpForwarder(t *testing.T) {
	d := newTestDatapath(t, Options{})
	st, _ := schedState(state.Sched{Kind: state.SchedMaglev})
	st.Node.Timeouts = Timeouts{TCPSyn: time.Minute, TCP: 2 * time.Hour, TCPFin: 2 * time.Minute, UDP: 5 * time.Minute}
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	pinCPU(t) // the flows' entries in one slice
	const flows = 12
	backend := map[uint16]netip.Addr{}
	used := map[netip.Addr]bool{}
	for i := range flows {
		port := uint16(4000 + i)
		backend[port] = sendTCP(t, d, port, packet.SYN)
		sendTCP(t, d, port, packet.ACK)
		used[backend[port]] = true
	}
	if len(used) < 2 {
		t.Fatalf("the %d flows all went to %v: the test needs them spread", flows, used)
	}
	tick := time.Duration(1) << ctTickShift
	for _, c := range []struct {
		name            string
		back            uint64
		hits, reselects uint64
	}{
		{"2^16 + 10 ticks", 1<<16 + 10, flows, 0},
		{"3 h", uint64(3 * time.Hour / tick), 0, flows},
	} {
		if n := setBack(t, d, c.back); n != flows {
			t.Fatalf("%s: %d used ways, want %d", c.name, n, flows)
		}
		before, _ := d.Stats()
		for port, b := range backend {
			if got := sendTCP(t, d, port, packet.ACK); got != b {
				t.Fatalf("%s: port %d went to %s, was on %s", c.name, port, got, b)
			}
		}
		after, _ := d.Stats()
		hits, resel := after["ct_hit"]-before["ct_hit"], after["ct_reselect"]-before["ct_reselect"]
		if hits != c.hits || resel != c.reselects {
			t.Fatalf("%s back: %d hits, %d reselects of %d flows; want %d, %d", c.name, hits, resel, flows, c.hits, c.reselects)
		}
		t.Logf("entries %s back: %d hits, %d reselects, every flow on its backend", c.name, hits, resel)
	}
	before, _ := d.Stats()
	for port := range backend {
		sendTCP(t, d, port, packet.ACK)
	}
	after, _ := d.Stats()
	if hits := after["ct_hit"] - before["ct_hit"]; hits != flows {
		t.Fatalf("after the jump: %d hits of %d flows tracked again", hits, flows)
	}
}
