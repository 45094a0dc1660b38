package sched

import (
	"os"
	"path/filepath"
	"testing"
)

// TestList checks the list's numbering: kinds 0..n-1 once each, names and
// files once each, every alias of a scheduler, and every scheduler's C
// file present.
func TestList(t *testing.T) {
	kinds := Kinds()
	for k, i := range kinds {
		if i == nil || int(i.Kind) != k {
			t.Fatalf("kind %d: %+v", k, i)
		}
		if _, err := os.Stat(filepath.Join("..", "..", "bpf", "sched", i.File+".h")); err != nil {
			t.Errorf("%s: %v", i.Name, err)
		}
	}
	names, files := map[string]bool{}, map[string]bool{}
	for n := range List {
		i := &List[n]
		if names[i.Name] {
			t.Errorf("name %s twice", i.Name)
		}
		names[i.Name] = true
		r := Resolve(i)
		if r.AliasOf != "" || (i.AliasOf != "" && r.Name != i.AliasOf) {
			t.Errorf("%s resolves to %s", i.Name, r.Name)
		}
		if i.AliasOf == "" {
			if files[i.File] {
				t.Errorf("file %s twice", i.File)
			}
			files[i.File] = true
		}
	}
	// The data plane's numbers are ABI (pinned maps): they never change.
	abi := map[string]uint8{"maglev": 0, "maglev-source": 1, "sh": 1, "dh": 2, "rr": 3, "wrr": 4, "lc": 5,
		"wlc": 6, "sed": 7, "nq": 8, "lblc": 9, "lblcr": 10}
	for n := range List {
		if k, ok := abi[List[n].Name]; ok && Resolve(&List[n]).Kind != k {
			t.Errorf("%s: kind %d, pinned maps hold %d", List[n].Name, Resolve(&List[n]).Kind, k)
		}
	}
	if i, ok := Of(uint8(len(kinds))); ok || i != nil {
		t.Errorf("Of past the last kind: %+v", i)
	}
}
