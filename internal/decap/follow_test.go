package decap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// followBudget is how soon after an address is added or removed Follow
// must have applied it.
const followBudget = time.Second

// TestFollow: with Follow running in the backend namespace, a tunnel to
// an address added to the backend afterwards is decapsulated within
// followBudget, and once the address is removed it no longer is, again
// within followBudget. IPv4 (GRE 4in4) and IPv6 (ip6ip6) outer addresses.
func TestFollow(t *testing.T) {
	n := newTestNet(t)
	n.attach(t, ModeGeneric)
	srv := n.servers(t)
	synced := n.follow(t)

	h, lo := n.backendLink(t, "lo")
	for _, tc := range []struct {
		c     tunnelCase
		extra netip.Addr
		gw    netip.Addr
	}{
		{tunnelCases[0], netip.MustParseAddr("203.0.113.77"), local4},
		{tunnelCases[7], netip.MustParseAddr("2001:db8:77::77"), local6},
	} {
		t.Run(tc.c.name, func(t *testing.T) {
			// The sender routes the new address to the backend's veth, so
			// that no neighbour resolution of it delays the packets.
			n.senderRoute(t, tc.extra, tc.gw)
			expectNoDecap(t, n, srv, tc.c, tc.extra, "before the address")

			bits := tc.extra.BitLen()
			addr := &netlink.Addr{IPNet: &net.IPNet{IP: tc.extra.AsSlice(), Mask: net.CIDRMask(bits, bits)}, Flags: unix.IFA_F_NODAD}
			start := time.Now()
			if err := h.AddrAdd(lo, addr); err != nil {
				t.Fatal(err)
			}
			lat, ok := firstDelivery(t, n, srv, tc.c, tc.extra, start)
			if !ok {
				t.Fatalf("%s to %s, added to the backend: nothing delivered within %v (synced: %v)", tc.c.name, tc.extra, followBudget, synced())
			}
			t.Logf("%s to a new address %s: first delivery %v after the address was added", tc.c.name, tc.extra, lat.Round(time.Millisecond))

			start = time.Now()
			if err := h.AddrDel(lo, addr); err != nil {
				t.Fatal(err)
			}
			gone := waitLocal(t, n, start, func(a []netip.Addr) bool { return !slices.Contains(a, tc.extra) })
			if gone < 0 {
				t.Fatalf("%s still in the program's addresses %v after %v", tc.extra, n.status(t).LocalAddrs, followBudget)
			}
			t.Logf("%s removed from the program's addresses %v after the address was", tc.extra, gone.Round(time.Millisecond))
			before := n.status(t).Counters[decapDecapCounterDECAP_PASS_NOT_LOCAL].Packets
			expectNoDecap(t, n, srv, tc.c, tc.extra, "after removal")
			if after := n.status(t).Counters[decapDecapCounterDECAP_PASS_NOT_LOCAL].Packets; after == before {
				t.Errorf("pass_not_local stayed at %d while tunnels went to a removed address", after)
			}
		})
	}
	if got := n.status(t).LocalAddrs; !slices.Contains(got, local4) || !slices.Contains(got, local6) {
		t.Errorf("local addresses at the end %v, want %s and %s", got, local4, local6)
	}
}

// TestFollowBurst: 200 addresses added in a burst, then removed in one,
// are all in the program's addresses, then all out of them, within
// followBudget of the burst's end.
func TestFollowBurst(t *testing.T) {
	n := newTestNet(t)
	n.attach(t, ModeGeneric)
	n.follow(t)
	h, lo := n.backendLink(t, "lo")
	var added []netip.Addr
	var addrs []*netlink.Addr
	for i := range 200 {
		a := netip.AddrFrom4([4]byte{203, 0, 113, byte(i + 1)})
		added = append(added, a)
		addrs = append(addrs, &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(32, 32)}})
	}
	for _, a := range addrs {
		if err := h.AddrAdd(lo, a); err != nil {
			t.Fatal(err)
		}
	}
	in := waitLocal(t, n, time.Now(), func(got []netip.Addr) bool {
		return !slices.ContainsFunc(added, func(a netip.Addr) bool { return !slices.Contains(got, a) })
	})
	if in < 0 {
		t.Fatalf("after adding %d addresses the program has %d addresses", len(added), len(n.status(t).LocalAddrs))
	}
	for _, a := range addrs {
		if err := h.AddrDel(lo, a); err != nil {
			t.Fatal(err)
		}
	}
	out := waitLocal(t, n, time.Now(), func(got []netip.Addr) bool {
		return !slices.ContainsFunc(added, func(a netip.Addr) bool { return slices.Contains(got, a) })
	})
	if out < 0 {
		t.Fatalf("after removing %d addresses the program still has %d addresses", len(added), len(n.status(t).LocalAddrs))
	}
	t.Logf("%d addresses in %v after the burst of additions, out %v after the burst of removals", len(added), in.Round(time.Millisecond), out.Round(time.Millisecond))
}

// TestFollowNotAttached: Follow with nothing attached ends with
// ErrNotAttached rather than waiting for changes it cannot apply.
func TestFollowNotAttached(t *testing.T) {
	n := newTestNet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := inNS(n.backend, func() error { return Follow(ctx, n.backendIf, nil) })
	if !errors.Is(err, ErrNotAttached) {
		t.Fatalf("Follow without an attachment: %v, want ErrNotAttached", err)
	}
}

// follow runs Follow in the backend namespace until the test ends, and
// waits for its first sync. It returns a function that describes the syncs
// so far.
func (n *testNet) follow(t *testing.T) func() string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	syncs := make(chan []netip.Addr, 100)
	errc := make(chan error, 1)
	go func() {
		errc <- inNS(n.backend, func() error {
			return Follow(ctx, n.backendIf, func(a []netip.Addr) { syncs <- a })
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Follow: %v", err)
		}
	})
	select {
	case a := <-syncs:
		if !slices.Contains(a, local4) || !slices.Contains(a, local6) {
			t.Fatalf("Follow's first sync %v lacks %s or %s", a, local4, local6)
		}
	case err := <-errc:
		errc <- err
		t.Fatalf("Follow ended before its first sync: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("Follow did not sync within 5s")
	}
	return func() string {
		var b strings.Builder
		for {
			select {
			case a := <-syncs:
				fmt.Fprintf(&b, "%v ", a)
			default:
				return b.String()
			}
		}
	}
}

// senderRoute routes dst from the sender through gw, the backend's veth.
func (n *testNet) senderRoute(t *testing.T, dst, gw netip.Addr) {
	t.Helper()
	h, err := netlink.NewHandleAt(n.sender)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName(n.senderIf)
	if err != nil {
		t.Fatal(err)
	}
	bits := dst.BitLen()
	r := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: &net.IPNet{IP: dst.AsSlice(), Mask: net.CIDRMask(bits, bits)}, Gw: gw.AsSlice()}
	if err := h.RouteAdd(r); err != nil {
		t.Fatalf("route %s via %s: %v", dst, gw, err)
	}
}

// firstDelivery sends c to outer every 5ms, each datagram numbered, until
// the server gets one or followBudget after start has passed. It returns
// when the first delivered datagram was sent, after start.
func firstDelivery(t *testing.T, n *testNet, srv servers, c tunnelCase, outer netip.Addr, start time.Time) (time.Duration, bool) {
	t.Helper()
	conn := srv.of(c)
	buf := make([]byte, 2048)
	var sent []time.Duration
	for time.Since(start) < followBudget {
		sent = append(sent, time.Since(start))
		c.send(t, n, outer, []byte(fmt.Sprintf("follow %d", len(sent)-1)))
		conn.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
		for {
			nr, _, err := conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				break
			}
			var i int
			if _, err := fmt.Sscanf(string(buf[:nr]), "follow %d", &i); err == nil && i < len(sent) {
				return sent[i], true
			}
		}
	}
	return 0, false
}

// waitLocal polls the program's addresses until ok holds of them, and
// returns how long after start that was, or -1 after followBudget.
func waitLocal(t *testing.T, n *testNet, start time.Time, ok func([]netip.Addr) bool) time.Duration {
	t.Helper()
	for time.Since(start) < followBudget {
		if ok(n.status(t).LocalAddrs) {
			return time.Since(start)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return -1
}
