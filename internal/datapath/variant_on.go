//go:build xlb_variant

package datapath

import "github.com/cilium/ebpf"

// BuildVariant is the XLB_BUILD_VARIANT this binary's forwarder was built
// with (see variant.go).
const BuildVariant = 1

// loadForwarder returns the embedded forwarder this binary runs: the
// upgrade variant.
func loadForwarder() (*ebpf.CollectionSpec, error) { return loadXlbvariant() }
