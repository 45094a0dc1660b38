package datapath

import (
	"errors"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"github.com/xlbproject/xlb/internal/state"
	"github.com/xlbproject/xlb/internal/testenv"
)

// inNewNetns runs fn on a locked thread in a fresh network namespace
// (skipped under -short: testenv.RequireNetns).
func inNewNetns(t *testing.T, fn func()) {
	t.Helper()
	testenv.RequireNetns(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		netns.Set(orig)
		ns.Close()
	}()
	fn()
}

// openOnTestPins opens (attaches) a datapath on iface in mode, pinned in
// a private directory: loaded once to get the directory (removed at
// cleanup), then Open adopts those pinned maps and attaches.
func openOnTestPins(t *testing.T, iface string, mode Mode) (*Datapath, Options) {
	t.Helper()
	d := newTestDatapath(t, Options{Interface: iface})
	d.Close()
	o := d.opts
	o.Mode = mode
	dp, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	return dp, o
}

// TestOpenSelfCheck attaches to a veth in a fresh netns, checks that the
// self-check passes with a probe forwarded through the FIB, and fails once
// the link is detached.
func TestOpenSelfCheck(t *testing.T) {
	newTestDatapath(t, Options{}) // root and bpffs checks
	inNewNetns(t, func() {
		link, peer := testVeth(t, net.HardwareAddr{2, 0, 0, 0, 0, 0x11}) // nathop_test.go
		// without it native XDP_TX frames are dropped: auto would pick generic
		attachPassXDP(t, peer)
		addr, _ := netlink.ParseAddr("10.0.0.11/24")
		netlink.AddrAdd(link, addr)
		if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: link.Attrs().Index, IP: net.ParseIP("10.0.0.101"),
			HardwareAddr: net.HardwareAddr{2, 0, 0, 0, 0, 0x65}, State: netlink.NUD_PERMANENT, Family: netlink.FAMILY_V4}); err != nil {
			t.Fatal(err)
		}
		dp, o := openOnTestPins(t, "xlbt0", ModeAuto)
		defer func() { dp.Close(); Cleanup(o.PinDir) }()
		if dp.Mode() != ModeNative {
			t.Fatalf("veth: mode %s, want native", dp.Mode())
		}
		if err := dp.SelfCheck(); err != nil {
			t.Fatalf("self-check without VIPs: %v", err)
		}
		be := netip.MustParseAddr("10.0.0.101")
		st := &State{Node: Node{Addr4: netip.MustParseAddr("10.0.0.11"), Timeouts: defaultT},
			Services: map[VIPKey]*Service{{Addr: vip4, Port: 80, Proto: 6}: {SvcID: 1, Encap: EncapGRE, Table: []uint32{1, 1, 1, 1, 1, 1, 1}}},
			Reals:    state.RealsOf(map[uint32]Real{1: {Addr: be, SvcID: 1, Active: true}})}
		if _, err := dp.Apply(st); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			if err := dp.SelfCheck(); err != nil {
				t.Fatalf("self-check: %v", err)
			}
		}
		stats, _ := dp.Stats()
		if stats["forward_tx"] == 0 || stats["nexthop_fallback"] != 0 {
			t.Fatalf("probe not forwarded through the FIB: %v", stats)
		}
		// Probes are counted apart and leave no conntrack entry.
		if stats["selfcheck_probe"] != 3 || stats["ct_miss"] != 0 {
			t.Fatalf("selfcheck_probe %d, ct_miss %d: want 3, 0", stats["selfcheck_probe"], stats["ct_miss"])
		}
		if c, _ := dp.ServiceCounters(1); c != (Counters{}) {
			t.Fatalf("service counters %+v after self-checks, want zero", c)
		}
		if c, _ := dp.RealCounters(1); c != (Counters{}) {
			t.Fatalf("real counters %+v after self-checks, want zero", c)
		}
		n := 0
		dp.ScanConntrack(func(CTEntry) bool { n++; return true })
		if n != 0 {
			t.Fatalf("%d conntrack entries after self-checks, want 0", n)
		}
		if err := dp.link.Detach(); err != nil {
			t.Fatal(err)
		}
		err := dp.SelfCheck()
		if !errors.Is(err, ErrSelfCheck) || !strings.Contains(err.Error(), "no longer attached") {
			t.Fatalf("self-check after detach: %v", err)
		}
	})
}
