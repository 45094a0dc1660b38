package lab

import (
	"fmt"
	"net/netip"
	"testing"
)

// TestSlotMoved: the demo's account of a break on a surviving backend
// holds for a few flows only (Maglev moves few slots between the others
// when a backend leaves), never for a flow that was on the backend that
// left, and never names the backend the flow moves to.
func TestSlotMoved(t *testing.T) {
	l := &Lab{VIPs: []netip.Addr{netip.MustParseAddr("10.200.0.1")}}
	for j := range 4 {
		l.Backends = append(l.Backends, &Host{Short: fmt.Sprintf("b%d", j+1), Addr4: netip.AddrFrom4([4]byte{10, 100, 1, byte(j + 21)})})
	}
	moved, err := slotMoved(l, 1)
	if err != nil {
		t.Fatal(err)
	}
	client := netip.MustParseAddr("10.99.0.2")
	n, hits := 0, 0
	for port := uint16(20000); port < 40000; port++ {
		c := netip.AddrPortFrom(client, port)
		if moved(c, "b2") {
			t.Fatalf("%v: a flow on b2 counted as moved between survivors", c)
		}
		k := 0
		for _, name := range []string{"b1", "b3", "b4"} {
			if moved(c, name) {
				k++
			}
		}
		if k > 1 {
			t.Fatalf("%v: moved from %d backends at once", c, k)
		}
		n++
		hits += k
	}
	share := float64(hits) / float64(n)
	t.Logf("%d of %d flows (%.2f%%) sit in a slot b2's departure moved between survivors", hits, n, 100*share)
	if hits == 0 || share > 0.05 {
		t.Errorf("%.3f%% of flows moved between survivors; want a few (0 < share <= 5%%)", 100*share)
	}
}
