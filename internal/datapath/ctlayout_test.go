package datapath

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/xlbproject/xlb/internal/maglev"
	"github.com/xlbproject/xlb/internal/packet"
)

// TestOldConntrackLayoutWidened: a connection table pinned by a build of
// 18-bit real ids (emulated: bit 36 of each way holds the flow hash's bit
// 36, as the old 28-bit tag did, and no xlbd_layout pin) is adopted with
// every flow's real id intact, where reading it as it is would send half
// the flows to id + 2^18; the flow then hits. Once the layout is pinned, a
// way whose real id has bit 18 set keeps it across a restart.
func TestOldConntrackLayoutWidened(t *testing.T) {
	o := compatOptions(t)
	d, err := Load(o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Apply(fixtureState()); err != nil {
		d.Close()
		t.Fatal(err)
	}
	f := packet.Flow{Src: client4, Dst: vip4, DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: packet.SYN}
	var h uint64
	for f.SrcPort = 1000; ; f.SrcPort++ {
		h = maglev.FlowHash(maglev.Tuple{Src: f.Src, Dst: f.Dst, SrcPort: f.SrcPort, DstPort: f.DstPort, Proto: uint8(f.Proto)})
		if h>>36&1 == 1 {
			break
		}
	}
	run(t, d.Program(), f.Frame())
	// The old encoding: the tag's lowest bit (hash bit 36) at bit 36.
	oldBit := uint64(1) << 36
	var keys []uint32
	var vals []xlbCtBucket
	scanArray(d.objs.XlbCt, func(k uint32, b *xlbCtBucket) bool {
		for w, e := range b.Way {
			if e != 0 && uint32(e>>ctTagShift) == maglev.CTTag(h) {
				b.Way[w] = e | oldBit
				keys, vals = append(keys, k), append(vals, *b)
			}
		}
		return true
	})
	if len(keys) != 1 {
		d.Close()
		t.Fatalf("%d ways of the flow, want 1", len(keys))
	}
	if _, err := d.objs.XlbCt.BatchUpdate(keys, vals, nil); err != nil {
		d.Close()
		t.Fatal(err)
	}
	if ents, _ := d.flowEntries(f); len(ents) != 1 || ents[0].RealID != 1<<18|1 {
		d.Close()
		t.Fatalf("the emulated old way reads %+v, want real id 2^18 + 1 before the widening", ents)
	}
	d.Close()
	if err := os.Remove(filepath.Join(o.PinDir, layoutPin)); err != nil {
		t.Fatal(err)
	}

	d2, err := Load(o)
	if err != nil {
		t.Fatal(err)
	}
	ents, err := d2.flowEntries(f)
	if err != nil || len(ents) != 1 || ents[0].RealID != 1 {
		d2.Close()
		t.Fatalf("after the upgrade: %+v, %v; want the flow on real 1", ents, err)
	}
	f.TCPFlags = packet.ACK
	ret, _ := run(t, d2.Program(), f.Frame())
	if stats, _ := d2.Stats(); ret != xdpTX || stats["ct_hit"]+stats["ct_remote_hit"] != 1 {
		d2.Close()
		t.Fatalf("the tracked flow after the upgrade: verdict %d, counters %v", ret, stats)
	}
	if _, err := os.Stat(filepath.Join(o.PinDir, layoutPin)); err != nil {
		d2.Close()
		t.Fatalf("the layout is not pinned: %v", err)
	}
	// A 19-bit id of this build survives a restart.
	keys, vals = keys[:0], vals[:0]
	scanArray(d2.objs.XlbCt, func(k uint32, b *xlbCtBucket) bool {
		for w, e := range b.Way {
			if e != 0 && uint32(e>>ctTagShift) == maglev.CTTag(h) {
				b.Way[w] = e | oldBit
				keys, vals = append(keys, k), append(vals, *b)
			}
		}
		return true
	})
	if _, err := d2.objs.XlbCt.BatchUpdate(keys, vals, nil); err != nil {
		d2.Close()
		t.Fatal(err)
	}
	d2.Close()
	d3, err := Load(o)
	if err != nil {
		t.Fatal(err)
	}
	defer d3.Close()
	if ents, _ := d3.flowEntries(f); len(ents) != 1 || ents[0].RealID != 1<<18|1 {
		t.Fatalf("a restart of this build changed a 19-bit real id: %+v", ents)
	}
}
