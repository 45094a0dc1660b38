package decap

import (
	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/version"
)

// ProgramTags loads the decapsulator this binary embeds (nothing pinned or
// attached) and returns the kernel's tag of its program (version.Tags).
func ProgramTags() []version.Program { return version.Tags(loadDecap()) }

// EmbeddedSpec is the decapsulator this binary embeds, as compiled (for
// the kernel feature check).
func EmbeddedSpec() (*ebpf.CollectionSpec, error) { return loadDecap() }
