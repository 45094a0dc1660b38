package datapath

import (
	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/version"
)

// ProgramTags loads the forwarder this binary embeds (small maps, nothing
// pinned or attached) and returns the kernel's tag of its program
// (version.Tags): the tag `bpftool prog show` lists for an xlbd running
// this build.
func ProgramTags() []version.Program {
	spec, err := LoadSpec(Options{Interface: "lo", PinDir: "-", ConntrackEntries: 1 << 10, MaxServices: 4, MaxReals: 4})
	return version.Tags(spec, err)
}

// EmbeddedSpec is the forwarder this binary embeds, as compiled (for the
// kernel feature check, which reads its map types and helper calls).
func EmbeddedSpec() (*ebpf.CollectionSpec, error) { return loadForwarder() }
