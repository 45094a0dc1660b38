package bgp

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/internal/testenv"
)

func present(t *testing.T, k *Kernel) []string {
	t.Helper()
	ps, err := k.Present()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	slices.Sort(out)
	return out
}

// TestKernelTable: the routes follow SetAnnounced, a drain and undrain; a
// new Kernel (a restarted xlbd) adopts the routes it finds; routes of
// other protocols in the table are never touched.
func TestKernelTable(t *testing.T) {
	testenv.InNewNetns(t)
	lo, _ := netlink.LinkByName("lo")
	netlink.LinkSetUp(lo)
	foreign := &netlink.Route{Dst: &net.IPNet{IP: net.IPv4(10, 9, 9, 9), Mask: net.CIDRMask(32, 32)}, Table: 100, Protocol: unix.RTPROT_STATIC, Type: unix.RTN_BLACKHOLE}
	if err := netlink.RouteAdd(foreign); err != nil {
		t.Fatal(err)
	}
	k, err := NewKernel(KernelOptions{Table: 100})
	if err != nil {
		t.Fatal(err)
	}
	both := []netip.Prefix{netip.MustParsePrefix("10.1.1.1/32"), netip.MustParsePrefix("fd00::1/128")}
	if err := k.SetAnnounced(both); err != nil {
		t.Fatal(err)
	}
	if got := present(t, k); !slices.Equal(got, []string{"10.1.1.1/32", "fd00::1/128"}) {
		t.Fatalf("announced: %v", got)
	}
	if err := k.GracefulShutdown(context.Background()); err != nil || len(present(t, k)) != 0 {
		t.Fatalf("drained: %v, %v", present(t, k), err)
	}
	if err := k.SetAnnounced(both); err != nil || len(present(t, k)) != 0 {
		t.Fatalf("drained, a commit put back %v (%v)", present(t, k), err)
	}
	if err := k.Undrain(); err != nil || len(present(t, k)) != 2 {
		t.Fatalf("undrained: %v, %v", present(t, k), err)
	}
	// A restarted xlbd: a new Kernel finds and keeps the routes.
	k2, err := NewKernel(KernelOptions{Table: 100})
	if err != nil {
		t.Fatal(err)
	}
	if err := k2.SetAnnounced([]netip.Prefix{both[0], netip.MustParsePrefix("10.1.1.2/32")}); err != nil {
		t.Fatal(err)
	}
	if got := present(t, k2); !slices.Equal(got, []string{"10.1.1.1/32", "10.1.1.2/32"}) {
		t.Fatalf("after the restart: %v", got)
	}
	if err := k2.SetAnnounced([]netip.Prefix{netip.MustParsePrefix("10.1.0.0/24")}); !errors.Is(err, ErrNotHostPrefix) {
		t.Fatalf("a /24: %v", err)
	}
	if err := k2.RemoveAll(); err != nil || len(present(t, k2)) != 0 {
		t.Fatalf("RemoveAll: %v, %v", present(t, k2), err)
	}
	rs, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: 100}, netlink.RT_FILTER_TABLE)
	if err != nil || len(rs) != 1 || rs[0].Protocol != unix.RTPROT_STATIC {
		t.Fatalf("the foreign route: %v %v", rs, err)
	}
}

// TestKernelOptions: a table or a dummy interface, not both; a dummy
// interface that is another kind of interface is refused.
func TestKernelOptions(t *testing.T) {
	if _, err := NewKernel(KernelOptions{Table: 100, Dummy: "d0"}); err == nil {
		t.Fatal("both accepted")
	}
	if _, err := NewKernel(KernelOptions{}); err == nil {
		t.Fatal("neither accepted")
	}
	testenv.InNewNetns(t)
	if _, err := NewKernel(KernelOptions{Dummy: "lo"}); err == nil || !strings.Contains(err.Error(), "not a dummy") {
		t.Fatalf("lo as the dummy interface: %v", err)
	}
	if _, err := NewKernel(KernelOptions{Dummy: "xlbnone", NoCreate: true}); !errors.As(err, &netlink.LinkNotFoundError{}) {
		t.Fatalf("missing, not created: %v", err)
	}
}
