package datapath

import (
	"errors"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/packet"
)

// TestResizeKeepsStateAndFlows: a restart with larger node.max_services
// and node.max_backends carries the committed services, tables and
// backends into maps of the new size and adopts the connection table, so
// a tracked flow keeps its backend and every service still forwards; a
// restart with sizes below what the pinned state uses is refused, naming
// the key, and changes nothing.
func TestResizeKeepsStateAndFlows(t *testing.T) {
	o := compatOptions(t) // 64 services, 1024 backends
	d, err := Load(o)
	if err != nil {
		t.Fatal(err)
	}
	st := fixtureState()
	// Service 1's backend under id 1000: a shrink below it must be refused.
	r, _ := st.Reals.Get(1)
	st.Reals.Delete(1)
	st.Reals.Set(1000, r)
	for key, s := range st.Services {
		if s.SvcID == 1 {
			tbl := make([]uint32, len(s.Table))
			for i := range tbl {
				tbl[i] = 1000
			}
			st.Services[key].Table = tbl
		}
	}
	if _, err := d.Apply(st); err != nil {
		d.Close()
		t.Fatal(err)
	}
	f := packet.Flow{Src: client4, Dst: vip4, SrcPort: 4242, DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: packet.SYN}
	run(t, d.Program(), f.Frame())
	var before []CTEntry
	d.ScanConntrack(func(e CTEntry) bool { before = append(before, e); return true })
	d.Close()
	if len(before) != 1 || before[0].RealID != 1000 {
		t.Fatalf("conntrack after one flow: %+v, want one entry of real 1000", before)
	}
	ctID := pinnedID(t, o.PinDir, "xlb_ct")

	o.MaxServices, o.MaxReals = 200, 4000
	d2, err := Load(o)
	if err != nil {
		t.Fatalf("restart with larger sizes: %v", err)
	}
	for _, name := range []string{"xlb_vips", "xlb_vip_index", "xlb_vip_ents", "xlb_tables", "xlb_reals", "xlb_svc_sched"} {
		if got, want := pinnedLayout(t, o.PinDir, name), wantedLayout(t, o, name); got != want {
			d2.Close()
			t.Fatalf("%s pinned as %s, want %s", name, got, want)
		}
	}
	if pinnedID(t, o.PinDir, "xlb_ct") != ctID {
		t.Fatal("the connection table was not adopted")
	}
	got := d2.Snapshot()
	if len(got.Services) != len(st.Services) || got.Reals.Len() != st.Reals.Len() {
		t.Fatalf("adopted %d services and %d reals, want %d and %d", len(got.Services), got.Reals.Len(), len(st.Services), st.Reals.Len())
	}
	f.TCPFlags = packet.ACK
	ret, _ := run(t, d2.Program(), f.Frame())
	stats, _ := d2.Stats()
	if ret != xdpTX || stats["ct_hit"]+stats["ct_remote_hit"] != 1 {
		d2.Close()
		t.Fatalf("the tracked flow after the resize: verdict %d, counters %v", ret, stats)
	}
	for key := range st.Services {
		g := packet.Flow{Src: client4, Dst: key.Addr, SrcPort: 5000, DstPort: max(key.Port, 7), Proto: packet.ProtoUDP}
		if key.Addr.Is6() {
			g.Src = client6
		}
		if key.Proto == 6 {
			g.Proto, g.TCPFlags = packet.ProtoTCP, packet.SYN
		}
		if ret, _ := run(t, d2.Program(), g.Frame()); ret != xdpTX {
			d2.Close()
			t.Fatalf("service %s after the resize: verdict %d", key, ret)
		}
	}
	d2.Close()

	for _, tc := range []struct {
		name          string
		svcs, reals   uint32
		key, inUse    string
		unchangedPins []string
	}{
		{"backends", 200, 512, "node.max_backends", "id 1000 is in use", []string{"xlb_reals"}},
		{"services", 4, 4000, "node.max_services", "its xlb_vips holds more than 4 entries", []string{"xlb_vips", "xlb_svc_sched", "xlb_tables"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ids := map[string]any{}
			for _, n := range tc.unchangedPins {
				ids[n] = pinnedID(t, o.PinDir, n)
			}
			o := o
			o.MaxServices, o.MaxReals = tc.svcs, tc.reals
			_, err := Load(o)
			if !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), tc.key+" is smaller than the pinned state: "+tc.inUse) {
				t.Fatalf("restart with smaller sizes: %v, want a refusal naming %s", err, tc.key)
			}
			t.Logf("refused: %v", err)
			for _, n := range tc.unchangedPins {
				if pinnedID(t, o.PinDir, n) != ids[n] {
					t.Fatalf("the refused restart replaced the pin of %s", n)
				}
			}
		})
	}
}
