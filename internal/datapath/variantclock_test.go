//go:build xlb_variant

package datapath

import (
	"net/netip"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/state"
)

// These tests run with -tags xlb_variant (make test does): the forwarder
// is the upgrade variant, whose clock is the kernel's plus the offset a
// test writes in its xlb_test_clock map (bpf/xlb_variant.c).

// variantLead is the test clock's offset the tests set, in ticks: far
// above every timeout and lblc expiration they use (an entry stamped on
// the kernel's clock reads as that old), and far from the 16-bit
// stamp's wrap.
const variantLead = 40000

// setTestClock moves d's forwarder clock ticks ahead of the kernel's.
func setTestClock(t *testing.T, d *Datapath, ticks uint64) {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(d.opts.PinDir, TestClockMap), nil)
	if err != nil {
		t.Fatalf("the test clock's map (a variant build?): %v", err)
	}
	defer m.Close()
	if err := m.Put(uint32(0), ticks<<ctTickShift); err != nil {
		t.Fatal(err)
	}
}

// TestVariantClockSyncFlow: a peer's decision installed here is stamped
// on the forwarder's clock, so the flow is a hit to the peer's real; on
// the kernel's clock it read as idle past its timeout and the Maglev
// table placed it again (the soak's flows that moved off a live backend
// after a restart's bulk copy).
func TestVariantClockSyncFlow(t *testing.T) {
	d, other := installTestDatapath(t)
	setTestClock(t, d, variantLead)
	f := packet.Flow{Src: client4, Dst: vip4, SrcPort: 41020, DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: packet.ACK}
	if err := d.InstallSync([]SyncInstall{{Hash: flowHash(f), HashBits: 64, RealID: 7, State: 2, Proto: 6, Age: 1}}); err != nil {
		t.Fatal(err)
	}
	expectSentTo(t, d, f, other, "flow installed by a peer (the peer's real)")
	stats, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if stats["ct_hit"] != 1 || stats["ct_reselect"] != 0 {
		t.Fatalf("ct_hit %d, ct_reselect %d: want the installed entry to answer", stats["ct_hit"], stats["ct_reselect"])
	}
	n := 0
	err = d.ScanConntrack(func(e CTEntry) bool {
		n++
		if most := (1 + 1 + testClockLead>>ctTickShift + 64) * CTTick; e.Age > most {
			t.Errorf("entry's age %v as xlbd reads it, want at most %v", e.Age, most)
		}
		return true
	})
	if err != nil || n != 1 {
		t.Fatalf("scan: %d entries, %v; want 1", n, err)
	}
}

// TestVariantClockSyncLBLC: a peer's lblc entry installed here is stamped
// on the forwarder's clock: a new connection takes the peer's backend, and
// xlbd reads the entry's ages (which it sends peers) on that clock too.
func TestVariantClockSyncLBLC(t *testing.T) {
	d, _ := lblcSyncDatapath(t, state.SchedLBLC)
	setTestClock(t, d, variantLead)
	if err := d.InstallSyncState(nil, []SyncLBLCInstall{{SvcID: 1, Dst: vip4, Reals: []uint32{3}, Used: 1, Modified: 5}}); err != nil {
		t.Fatal(err)
	}
	if got := lblcEntry(t, d); !slices.Equal(got, []uint32{3}) {
		t.Fatalf("entry after the peer's %v, want real 3", got)
	}
	if b := lblcConn(t, d, 2200); b != 2 {
		t.Fatalf("a new connection went to backend %d, want the peer's choice (index 2)", b)
	}
	lead := uint32(testClockLead >> ctTickShift)
	err := d.LBLCAll(func(svc uint32, _ netip.Addr, reals []uint32, used, mod uint32) bool {
		if used > lead+64 || mod < 5 || mod > lead+5+64 {
			t.Errorf("service %d %v: used %d, modified %d ticks ago; want at most %d and 5 to %d", svc, reals, used, mod, lead+64, lead+5+64)
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
}
