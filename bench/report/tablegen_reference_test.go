package report

import (
	"fmt"
	"slices"
	"testing"

	"github.com/xlbproject/xlb/bench/study"
	"github.com/xlbproject/xlb/internal/maglev"
)

// The plain pseudocode the bench times maglev.Build against computes
// maglev.Build's table for equal weights, entry for entry: the two are
// compared on the same work.
func TestReferencePopulateIsBuild(t *testing.T) {
	for _, c := range []struct {
		n int
		m uint32
	}{{1, 7}, {3, 7}, {7, 7}, {10, 251}, {100, 4099}, {1000, study.SmallM}} {
		t.Run(fmt.Sprintf("n%d_m%d", c.n, c.m), func(t *testing.T) {
			names := study.BackendNames(c.n)
			bs := make([]maglev.Backend, c.n)
			for i, name := range names {
				bs[i] = maglev.Backend{Name: name, Weight: 3}
			}
			want, err := maglev.Build(bs, c.m)
			if err != nil {
				t.Fatal(err)
			}
			if got := referencePopulate(names, c.m); !slices.Equal(got, want.Entries) {
				t.Fatalf("the reference's table differs from maglev.Build's in %d entries", maglev.DiffEntries(got, want.Entries))
			}
		})
	}
	if r, err := versusReference(50, 251, 2); err != nil || len(r.BuildRuns) != 2 || !(r.Ratio > 0) {
		t.Fatalf("versusReference: %+v, %v", r, err)
	}
}
