package decap

import "testing"

// TestEmbeddedTagIsTheKernels: the tag `xlb-decap --version` prints is the one
// the kernel reports for the program as the product loads it (a
// different load, e.g. with other map sizes, gives the same tag).
func TestEmbeddedTagIsTheKernels(t *testing.T) {
	objs := loadTestProgram(t)
	info, err := objs.XlbDecap.Info()
	if err != nil {
		t.Fatal(err)
	}
	tags := ProgramTags()
	if len(tags) != 1 || tags[0].Name != "xlb_decap" || tags[0].Err != nil {
		t.Fatalf("embedded programs: %+v", tags)
	}
	if tags[0].Tag != info.Tag {
		t.Fatalf("--version tag %s, running program's tag %s", tags[0].Tag, info.Tag)
	}
	t.Logf("xlb_decap tag %s", info.Tag)
}
