package datapath

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/maglev"
)

// templateRecords returns the template records among those waiting.
func templateRecords(t *testing.T, r *SyncReader) []SyncDecision {
	t.Helper()
	var out []SyncDecision
	for _, d := range readSync(t, r) {
		if d.Kind == SyncTemplate {
			out = append(out, d)
		}
	}
	return out
}

// With sync on, a new template is reported once, as the client's source
// hash (its /24), the template's real and the ticks it lives on (its
// timeout and one refresh period); the client's next connection in the
// same tick holds it on without a new record.
func TestSyncReportsTemplates(t *testing.T) {
	d := newTestDatapath(t, Options{})
	pinCPU(t)
	if _, err := d.Apply(persistState(60*time.Second, 0, 1, 2)); err != nil {
		t.Fatal(err)
	}
	r, err := d.SyncReader()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if err := d.SetSync(true, 2); err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr("192.0.2.7")
	be := synFrom(t, d, a, 1000, 80)
	got := templateRecords(t, r)
	if len(got) != 1 {
		t.Fatalf("template records %+v, want one", got)
	}
	want := maglev.SourceHash(a, 24, 128)
	timeout := uint16(Ticks(60 * time.Second))
	if g := got[0]; g.Hash != want || schedBackends[g.RealID-1] != be || g.State != 0 ||
		g.Hold < timeout || g.Hold > timeout+4 {
		t.Fatalf("template record %+v: want source hash %#x, the real of %s, hold %d..%d", g, want, be, timeout, timeout+4)
	}
	synFrom(t, d, a, 1001, 80)
	if got := templateRecords(t, r); len(got) != 0 {
		t.Fatalf("a template held on within its refresh period: records %+v, want none", got)
	}
}

// A peer's template puts a client this node has never seen on the peer's
// backend (rr would choose another), for the ticks the record gives; a
// live template of this node is neither moved nor shortened by one.
func TestSyncInstallsTemplates(t *testing.T) {
	d := newTestDatapath(t, Options{})
	pinCPU(t)
	if _, err := d.Apply(persistState(60*time.Second, 0, 1, 2)); err != nil {
		t.Fatal(err)
	}
	a, b := netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("198.51.100.9")
	// rr's first choice is backend 0: the peer's template names backend 2.
	hold := uint16(Ticks(60 * time.Second))
	in := []SyncInstall{{Template: true, Hash: maglev.SourceHash(a, 24, 128), RealID: 3, Age: hold}}
	if err := d.InstallSync(in); err != nil {
		t.Fatal(err)
	}
	before, err := d.SyncCounters()
	if err != nil {
		t.Fatal(err)
	}
	if before.Applied != 1 {
		t.Fatalf("counters %+v after one template install, want 1 applied", before)
	}
	for port, sport := range map[uint16]uint16{80: 1000, 443: 1001} {
		if got := synFrom(t, d, a, sport, port); got != schedBackends[2] {
			t.Fatalf("port %d: a synced template of %s: the flow went to %s", port, schedBackends[2], got)
		}
	}
	// b's own template is kept against a peer's of another backend, and a
	// peer's shorter hold does not shorten it.
	own := synFrom(t, d, b, 2000, 80)
	_, w0 := templateOf(t, d, b)
	in = []SyncInstall{{Template: true, Hash: maglev.SourceHash(b, 24, 128), RealID: realOf(own)%3 + 1, Age: 8},
		{Template: true, Hash: maglev.SourceHash(b, 24, 128), RealID: realOf(own), Age: 8}}
	if err := d.InstallSync(in); err != nil {
		t.Fatal(err)
	}
	if _, w := templateOf(t, d, b); w != w0 {
		t.Fatalf("b's template %#x became %#x under a peer's", w0, w)
	}
	after, err := d.SyncCounters()
	if err != nil {
		t.Fatal(err)
	}
	if after.Kept-before.Kept != 1 || after.Applied-before.Applied != 1 {
		t.Fatalf("counters %+v then %+v: want one kept, one applied (nothing newer)", before, after)
	}
	if got := synFrom(t, d, b, 2001, 80); got != own {
		t.Fatalf("b's template of %s: its flow went to %s", own, got)
	}
	// A record of no hold, or for a service without persistence, is skipped.
	if err := d.InstallSync([]SyncInstall{{Template: true, Hash: 1, RealID: 1, Age: 0}}); err != nil {
		t.Fatal(err)
	}
	if c, _ := d.SyncCounters(); c.Skipped != after.Skipped+1 {
		t.Fatalf("a template of no hold: counters %+v, want one more skipped", c)
	}
}

// realOf is the real id of backend be on port 80 in persistState.
func realOf(be netip.Addr) uint32 {
	for i, a := range schedBackends {
		if a == be {
			return uint32(i + 1)
		}
	}
	return 0
}

// templateOf returns the slot and value of client's template (group 7).
func templateOf(t *testing.T, d *Datapath, client netip.Addr) (uint32, uint64) {
	t.Helper()
	h := persistKeyHash(maglev.SourceHash(client, 24, 128), 7)
	key := uint32(h & (TemplateCapacity - 1))
	var w uint64
	if err := d.objs.XlbPersist.Lookup(key, &w); err != nil {
		t.Fatal(err)
	}
	if w>>persistTagShift != h>>persistTagShift {
		t.Fatalf("slot %d holds %#x: not %s's template", key, w, client)
	}
	return key, w
}

// persistKeyHash is persist_key (bpf/persist.h).
func persistKeyHash(srch uint64, id uint32) uint64 {
	return maglev.Fmix64(maglev.Mix(srch, uint64(id)))
}
