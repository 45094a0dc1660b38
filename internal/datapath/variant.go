//go:build !xlb_variant

package datapath

import "github.com/cilium/ebpf"

// BuildVariant is 0 for the normal forwarder; `go build -tags xlb_variant`
// links the upgrade variant instead (bpf/xlb_variant.c: other instructions,
// the same maps), which upgrade tests switch to and back.
const BuildVariant = 0

// loadForwarder returns the embedded forwarder this binary runs.
func loadForwarder() (*ebpf.CollectionSpec, error) { return loadXlb() }

// clockOffset is 0: this build's forwarder reads the kernel's clock alone.
func (d *Datapath) clockOffset() uint64 { return 0 }
