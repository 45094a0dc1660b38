package reference

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"testing"
)

// TestObject: the embedded object is the committed one, an ELF object
// with the forwarder's entry program, and WriteFile writes it whole.
func TestObject(t *testing.T) {
	b, err := Object()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not an ELF object: %v", err)
	}
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range syms {
		found = found || s.Name == "xlb_forward"
	}
	if !found {
		t.Fatal("no xlb_forward in the reference object")
	}
	path, err := WriteFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(path) != "xlb-"+Name+".o" {
		t.Fatalf("path %s", path)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, b) {
		t.Fatal("written object differs from the embedded one")
	}
}
