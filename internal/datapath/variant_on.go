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

// clockOffset is the variant's test clock offset in nanoseconds, read from
// its pin at every call (a test moves it while xlbd runs; the sweeps must
// see the clock the forwarder sees); 0 if it cannot be read.
func (d *Datapath) clockOffset() uint64 {
	m, err := ebpf.LoadPinnedMap(filepath.Join(d.opts.PinDir, TestClockMap), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return 0
	}
	defer m.Close()
	var off uint64
	if err := m.Lookup(uint32(0), &off); err != nil {
		return 0
	}
	return off
}
