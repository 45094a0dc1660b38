package datapath

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
)

// A conntrack way's real id took a 19th bit (node.max_backends beyond
// 262,143) from the lowest bit of its tag, and a persistence template's
// likewise (bpf/types.h). The maps kept their layout, so a build of 18-bit
// ids leaves pins that this one adopts, whose ways hold a hash bit where
// this build reads the top bit of the real id: half the tracked flows
// would point at id + 2^18. Every real id of such a build is below 2^18,
// so clearing that bit in every way and template restores them; the tags
// (the 27 and 29 bits above it) read the same in both builds.
//
// xlbd_layout, a pinned array that only this and later builds create,
// says which layout the pinned tables have. A pinned xlb_ct without it
// was written by a build of 18-bit ids: Load clears the bit, and Open
// clears it once more after the new program replaced the old one (which
// may have written ways in between); then the marker is pinned. Until the
// first commit no real id reaches 2^18, so the second pass cannot clear a
// bit the new program set. A way written by the forwarder while its
// bucket is rewritten may lose that write: its flow is chosen again by
// the Maglev table, which gives the same backend unless the table changed.
const (
	layoutPin     = "xlbd_layout"
	ctRealBitsNow = uint32(xlbXlbCtLayoutXLB_CT_REAL_BITS)
	oldRealBits   = 18
)

func layoutSpec() *ebpf.MapSpec {
	return &ebpf.MapSpec{Name: layoutPin, Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1}
}

// oldCTLayout reports whether the pins under dir are a conntrack table of
// 18-bit real ids: xlb_ct pinned (and adopted), xlbd_layout not.
func oldCTLayout(dir string, recreated []string) bool {
	if _, err := os.Stat(filepath.Join(dir, "xlb_ct")); err != nil {
		return false
	}
	for _, n := range recreated {
		if n == "xlb_ct" {
			return false
		}
	}
	_, err := os.Stat(filepath.Join(dir, layoutPin))
	return errors.Is(err, os.ErrNotExist)
}

// widenRealIDs clears bit 18 of the real id of every used conntrack way
// and persistence template (see above).
func (d *Datapath) widenRealIDs() error {
	ctBit := uint64(1) << (ctRealShift + oldRealBits)
	var buckets []uint32
	var vals []xlbCtBucket
	err := scanArray(d.objs.XlbCt, func(k uint32, b *xlbCtBucket) bool {
		nb, dirty := *b, false
		for w, e := range b.Way {
			if e&ctBit != 0 && uint8(e>>ctStateShift&ctStateMask) != uint8(xlbXlbCtStateXLB_CT_FREE) {
				nb.Way[w], dirty = e&^ctBit, true
			}
		}
		if dirty {
			buckets, vals = append(buckets, k), append(vals, nb)
		}
		return true
	})
	if err == nil && len(buckets) > 0 {
		_, err = d.objs.XlbCt.BatchUpdate(buckets, vals, nil)
	}
	if err != nil {
		return fmt.Errorf("widen the connection table's real ids: %w", err)
	}
	tBit := uint64(1) << (persistRealShift + oldRealBits)
	var slots []uint32
	var tmpl []uint64
	err = scanArray(d.objs.XlbPersist, func(k uint32, w *uint64) bool {
		if *w != 0 && *w&tBit != 0 {
			slots, tmpl = append(slots, k), append(tmpl, *w&^tBit)
		}
		return true
	})
	if err == nil && len(slots) > 0 {
		_, err = d.objs.XlbPersist.BatchUpdate(slots, tmpl, nil)
	}
	if err != nil {
		return fmt.Errorf("widen the persistence templates' real ids: %w", err)
	}
	d.log.Info("carried the connection table and persistence templates of a build of 18-bit real ids into 19-bit ones",
		"ways", len(buckets), "templates", len(slots))
	return nil
}

// pinLayout pins xlbd_layout (holding the real id's bits) unless it is.
func pinLayout(dir string) error {
	path := filepath.Join(dir, layoutPin)
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	m, err := ebpf.NewMap(layoutSpec())
	if err != nil {
		return fmt.Errorf("create %s: %w", layoutPin, err)
	}
	defer m.Close()
	if err := m.Put(uint32(0), ctRealBitsNow); err != nil {
		return err
	}
	if err := m.Pin(path); err != nil {
		return fmt.Errorf("pin %s: %w", path, err)
	}
	return nil
}
