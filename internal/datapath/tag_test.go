package datapath

import (
	"testing"

	"github.com/xlbproject/xlb/internal/version"
)

// TestEmbeddedTagIsTheKernels: the tag `xlbd --version` prints is the one
// the kernel reports for the forwarder as the product loads it (other map
// sizes and settings than --version's load give the same tag).
func TestEmbeddedTagIsTheKernels(t *testing.T) {
	d := newTestDatapath(t, Options{})
	tag, err := version.CheckTag(ProgramTags(), "xlb_forward", d.Program())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("xlb_forward tag %s", tag)
}
