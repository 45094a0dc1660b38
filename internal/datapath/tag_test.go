package datapath

import "testing"

// TestEmbeddedTagIsTheKernels: the tag `xlbd --version` prints is the one
// the kernel reports for the program as the product loads it (a
// different load, e.g. with other map sizes, gives the same tag).
func TestEmbeddedTagIsTheKernels(t *testing.T) {
	d := newTestDatapath(t, Options{})
	info, err := d.Program().Info()
	if err != nil {
		t.Fatal(err)
	}
	tags := ProgramTags()
	if len(tags) != 1 || tags[0].Name != "xlb_forward" || tags[0].Err != nil {
		t.Fatalf("embedded programs: %+v", tags)
	}
	if tags[0].Tag != info.Tag {
		t.Fatalf("--version tag %s, running program's tag %s", tags[0].Tag, info.Tag)
	}
	t.Logf("xlb_forward tag %s", info.Tag)
}
