package datapath

import (
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/packet"
)

// onlyTemplate returns the slot and value of the one live template.
func onlyTemplate(t *testing.T, d *Datapath) (uint32, uint64) {
	t.Helper()
	var tpl []CTEntry
	if err := d.ScanTemplates(func(e CTEntry) bool { tpl = append(tpl, e); return true }); err != nil {
		t.Fatal(err)
	}
	if len(tpl) != 1 {
		t.Fatalf("templates: %+v, want one", tpl)
	}
	var w uint64
	if err := d.objs.XlbPersist.Lookup(tpl[0].Bucket, &w); err != nil {
		t.Fatal(err)
	}
	return tpl[0].Bucket, w
}

// setTemplate rewrites slot key (holding w) to name real rid and expire
// at tick exp: a template written at a crafted time.
func setTemplate(t *testing.T, d *Datapath, key uint32, w uint64, rid uint32, exp uint64) {
	t.Helper()
	w = w>>persistTagShift<<persistTagShift | uint64(rid)<<persistRealShift | exp&persistTimeMask
	if err := d.objs.XlbPersist.Put(key, w); err != nil {
		t.Fatal(err)
	}
}

func nowTicks(t *testing.T) uint64 {
	t.Helper()
	now, err := ctNow()
	if err != nil {
		t.Fatal(err)
	}
	return now
}

func countTemplates(t *testing.T, d *Datapath) int {
	t.Helper()
	n := 0
	if err := d.ScanTemplates(func(CTEntry) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	return n
}

// A template whose last use is hours old is expired whatever the age
// modulo the old 16-bit stamp's cycle (2^16 ticks, ~4.9 h): the forwarder
// chooses afresh, the listing leaves it out, the sweep frees it, and the
// slot takes the client's new template.
func TestPersistenceExpiry(t *testing.T) {
	d := newTestDatapath(t, Options{})
	if _, err := d.Apply(persistState(2*time.Second, 0, 1, 2)); err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr("192.0.2.7")
	synFrom(t, d, a, 1000, 80)
	flows := 1 // new flows of port 80 so far: rr's cursor
	key, w := onlyTemplate(t, d)
	hour := uint64(time.Hour) >> ctTickShift
	timeout := uint64(Ticks(2 * time.Second))
	for i, age := range []uint64{5 * hour, 10 * hour, 1 << 16, 1<<16 + 3, 2 << 16} {
		// Live, the template wins over rr's choice.
		other := (flows + 1) % 3
		setTemplate(t, d, key, w, uint32(other+1), nowTicks(t)+timeout)
		if got := synFrom(t, d, a, uint16(2000+i), 80); got != schedBackends[other] {
			t.Fatalf("a live template of backend %s: the flow went to %s", schedBackends[other], got)
		}
		flows++
		// Written age ago, it is expired.
		want, other := flows%3, (flows+1)%3
		now := nowTicks(t)
		setTemplate(t, d, key, w, uint32(other+1), now-age+timeout)
		if n := countTemplates(t, d); n != 0 {
			t.Fatalf("age %d ticks: %d templates listed, want 0", age, n)
		}
		if i%2 == 0 { // the sweep frees it; else the forwarder replaces it
			freed, live, err := d.sweepTemplatesAt(now)
			if err != nil || freed != 1 || live != 0 {
				t.Fatalf("age %d ticks: sweep freed %d, left %d live (%v), want 1, 0", age, freed, live, err)
			}
			var v uint64
			if err := d.objs.XlbPersist.Lookup(key, &v); err != nil || v != 0 {
				t.Fatalf("age %d ticks: slot holds %#x after the sweep (%v)", age, v, err)
			}
		}
		if got := synFrom(t, d, a, uint16(3000+i), 80); got != schedBackends[want] {
			t.Fatalf("age %d ticks: the flow went to %s, want rr's choice %s", age, got, schedBackends[want])
		}
		flows++
		k, nw := onlyTemplate(t, d)
		if k != key || uint32(nw>>persistRealShift&ctRealMask) != uint32(want+1) {
			t.Fatalf("age %d ticks: template in slot %d naming real %d, want slot %d, real %d",
				age, k, nw>>persistRealShift&ctRealMask, key, want+1)
		}
		w = nw
	}
}

// A tracked connection holds its client's template for as long as its
// entry lives (15 min established here), past the persistence timeout
// (2 s); a template without a connection expires after the timeout.
func TestPersistenceHeldByConnection(t *testing.T) {
	d := newTestDatapath(t, Options{})
	if _, err := d.Apply(persistState(2*time.Second, 0, 1, 2)); err != nil {
		t.Fatal(err)
	}
	a, c := netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("198.51.100.9")
	first := synFrom(t, d, a, 1000, 80)
	ack := packet.Flow{Src: a, Dst: vip4, SrcPort: 1000, DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: packet.ACK}
	if verdict, _ := run(t, d.Program(), ack.Frame()); verdict != xdpTX {
		t.Fatalf("ACK: verdict %d", verdict)
	}
	synFrom(t, d, c, 1000, 80) // a template with only a SYN's entry (1 s)
	now := nowTicks(t)
	var held time.Duration
	if err := d.ScanTemplates(func(e CTEntry) bool {
		if e.RealID == 1 {
			held = e.Age
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if held < 14*time.Minute || held > 15*time.Minute+time.Second {
		t.Fatalf("the established connection's template lives on %s, want ~15m", held)
	}
	past := uint64(Ticks(3 * time.Second))
	if freed, live, err := d.sweepTemplatesAt(now + past); err != nil || freed != 1 || live != 1 {
		t.Fatalf("3 s on: sweep freed %d, left %d live (%v), want 1, 1", freed, live, err)
	}
	// On the real clock: past the timeout, with no packet meanwhile, the
	// client still goes to its backend.
	time.Sleep(2600 * time.Millisecond)
	if got := synFrom(t, d, a, 1001, 80); got != first {
		t.Fatalf("past the timeout, held by a connection: %s, want %s", got, first)
	}
	end := uint64(Ticks(15*time.Minute + 5*time.Second))
	if freed, live, err := d.sweepTemplatesAt(now + end); err != nil || freed != 1 || live != 0 {
		t.Fatalf("past the connection's timeout: sweep freed %d, left %d live (%v), want 1, 0", freed, live, err)
	}
}

// A pinned template map of the older layout (last-use stamps; the same
// sizes, without BPF_F_MMAPABLE) is recreated empty on upgrade, not read
// in the new layout.
func TestOldTemplatesRecreated(t *testing.T) {
	o := compatOptions(t)
	d, err := Load(o)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	old := pinWrong(t, o.PinDir, "xlb_persist", MapLayout{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: uint32(TemplateCapacity)})
	d2, err := Load(o)
	if err != nil {
		t.Fatalf("load over an old xlb_persist: %v", err)
	}
	defer d2.Close()
	if got, want := pinnedLayout(t, o.PinDir, "xlb_persist"), wantedLayout(t, o, "xlb_persist"); got != want || pinnedID(t, o.PinDir, "xlb_persist") == old {
		t.Fatalf("xlb_persist pinned as %s, want a new %s", got, want)
	}
}
