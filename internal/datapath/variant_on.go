//go:build xlb_variant

package datapath

import (
	"path/filepath"

	"github.com/cilium/ebpf"
)

// BuildVariant is the XLB_BUILD_VARIANT this binary's forwarder was built
// with (see variant.go).
const BuildVariant = 1

// loadForwarder returns the embedded forwarder this binary runs: the
// upgrade variant.
func loadForwarder() (*ebpf.CollectionSpec, error) { return loadXlbvariant() }

// testClockLead: once a test has set the clock's offset, this xlbd reads
// the clock 1,024 ticks (~4.6 min) ahead of its forwarder. The test moves
// the offset while the sweeps run, and a stamp written after a sweep read
// its clock is fine up to XLB_CT_AHEAD (64) ticks ahead but reads as hours
// old past that: ahead by the lead, the sweep tolerates a stall of 1,024
// ticks of the test clock between its read and its run (a third of a
// second of the soak's fastest clock), and sees every entry at most
// 4.6 min older than the forwarder does (the soak's timeouts are 10 min
// and more).
const testClockLead = 1024 << ctTickShift

// clockOffset is the variant's test clock offset in nanoseconds, read from
// its pin at every call (a test moves it while xlbd runs; the sweeps must
// see the clock the forwarder sees), plus testClockLead once it is not 0;
// 0 if it cannot be read.
func (d *Datapath) clockOffset() uint64 {
	m, err := ebpf.LoadPinnedMap(filepath.Join(d.opts.PinDir, TestClockMap), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return 0
	}
	defer m.Close()
	var off uint64
	if err := m.Lookup(uint32(0), &off); err != nil || off == 0 {
		return 0
	}
	return off + testClockLead
}
