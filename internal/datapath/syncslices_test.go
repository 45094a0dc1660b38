package datapath

import (
	"runtime"
	"testing"

	"github.com/xlbproject/xlb/internal/packet"
)

// TestSyncInstallFindsOtherSlices: a peer's decision is written over the
// flow's entry wherever it is, not beside it in the slice of the CPU the
// install runs on. This node's entry from before it went away (to real 1,
// last seen 40 ticks before the peer saw the flow), in CPU 0's slice,
// takes the peer's real 7 when the install runs on CPU 1: the flow has
// one entry, and its packets on CPU 0 go to the peer's backend, not back
// to the old one (a backend that went away and came back would take them
// back otherwise). This node's own recent entry in another slice is kept
// the same way.
func TestSyncInstallFindsOtherSlices(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Fatal("needs two CPUs")
	}
	d, other := installTestDatapath(t)
	stale := packet.Flow{Src: client4, Dst: vip4, SrcPort: 41020, DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: packet.ACK}
	recent := stale
	recent.SrcPort = 41021
	onCPU(t, 0, func() {
		if err := d.InstallSync([]SyncInstall{{Hash: flowHash(stale), HashBits: 64, RealID: 1, State: 2, Proto: 6, Age: 40}}); err != nil {
			t.Fatal(err)
		}
		expectSentTo(t, d, recent, be4, "a flow this node forwards itself")
	})
	onCPU(t, 1, func() {
		if err := d.InstallSync([]SyncInstall{
			{Hash: flowHash(stale), HashBits: 64, RealID: 7, State: 2, Proto: 6},
			{Hash: flowHash(recent), HashBits: 64, RealID: 7, State: 2, Proto: 6},
		}); err != nil {
			t.Fatal(err)
		}
	})
	for _, c := range []struct {
		f    packet.Flow
		rid  uint32
		what string
	}{{stale, 7, "the old entry in CPU 0's slice"}, {recent, 1, "this node's recent entry in CPU 0's slice"}} {
		es := flowEntries(t, d, c.f)
		if len(es) != 1 || es[0].RealID != c.rid || es[0].CPU != 0 {
			t.Fatalf("%s: entries %+v, want one, on CPU 0, to real %d", c.what, es, c.rid)
		}
	}
	onCPU(t, 0, func() { expectSentTo(t, d, stale, other, "the flow on CPU 0 after the peer's newer decision") })
	wantConns(t, d, 7, 1, 0)
	wantConns(t, d, 1, 1, 0)
	if c, err := d.SyncCounters(); err != nil || c.Applied != 2 || c.Kept != 1 {
		t.Fatalf("sync counters %+v (%v), want 2 applied, 1 kept", c, err)
	}
}
