package decap

import (
	"testing"

	"github.com/xlbproject/xlb/internal/version"
)

// TestEmbeddedTagIsTheKernels: the tag `xlb-decap --version` prints is the
// one the kernel reports for the decapsulator as the product loads it.
func TestEmbeddedTagIsTheKernels(t *testing.T) {
	tag, err := version.CheckTag(ProgramTags(), "xlb_decap", loadTestProgram(t).XlbDecap)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("xlb_decap tag %s", tag)
}
