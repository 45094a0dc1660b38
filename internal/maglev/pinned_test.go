package maglev

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"testing"
)

// pinnedCases are tables whose fingerprints TestTablesPinned freezes:
// sizes and backend counts as the bench and the control plane use them,
// equal and random weights (1..100, fixed seed), weight 0 included.
var pinnedCases = []struct {
	name     string
	n        int
	m        uint32
	weighted bool
	want     string
}{
	{"n30 m16381", 30, 16381, false, "0xc66eca48a77a03cb"},
	{"n30 m16381 weighted", 30, 16381, true, "0xace97631645fbf3c"},
	{"n1000 m65537", 1000, 65537, false, "0xf26173cc51309ec0"},
	{"n1000 m65537 weighted", 1000, 65537, true, "0x918c24454d47335b"},
	{"n100 m655373", 100, 655373, false, "0x06151516b588932d"},
	{"n1000 m655373", 1000, 655373, false, "0xe6e5ac5033ff115c"},
	{"n1000 m655373 weighted", 1000, 655373, true, "0xd7e5a21e53a14921"},
	{"n10000 m65537", 10000, 65537, false, "0xf95bbabacb39edce"},
	{"n3 m7", 3, 7, true, "0xd916c0f4f547dc22"},
}

// pinnedBackends returns n backends named like addresses, in an order
// that is not sorted, weight 100 each or, if weighted, 0..100 at random.
func pinnedBackends(n int, weighted bool) []Backend {
	r := rand.New(rand.NewPCG(uint64(n), 0x7069))
	out := make([]Backend, n)
	for i := range out {
		a := (i*7919)%n + 1
		w := uint32(100)
		if weighted {
			w = r.Uint32N(101)
		}
		out[i] = Backend{Name: fmt.Sprintf("10.%d.%d.%d", a>>16&0xff, a>>8&0xff, a&0xff), Weight: w}
	}
	if weighted {
		out[0].Weight = 100
	}
	return out
}

// fingerprint is FNV-1a 64 over the table's entries as backend names.
func fingerprint(t *Table) string {
	h := fnv.New64a()
	for _, e := range t.Entries {
		h.Write([]byte(t.Backends[e].Name))
		h.Write([]byte{','})
	}
	return fmt.Sprintf("%#016x", h.Sum64())
}

// TestTablesPinned freezes the tables of pinnedCases as the population
// first shipped computes them: a faster population must give every node
// the same tables (TableVersion 1), entry for entry, through Build and
// through Builder.Fill.
func TestTablesPinned(t *testing.T) {
	var b Builder
	for _, c := range pinnedCases {
		t.Run(c.name, func(t *testing.T) {
			bs := pinnedBackends(c.n, c.weighted)
			tbl, err := Build(bs, c.m)
			if err != nil {
				t.Fatal(err)
			}
			if got := fingerprint(tbl); got != c.want {
				t.Errorf("Build: fingerprint %s, want %s", got, c.want)
			}
			vals := make([]uint32, len(bs))
			for i := range vals {
				vals[i] = uint32(1000 + i)
			}
			dst := make([]uint32, c.m)
			if err := b.Fill(dst, bs, vals, c.m); err != nil {
				t.Fatal(err)
			}
			for s, e := range tbl.Entries {
				if want := tbl.Backends[e].Name; bs[dst[s]-1000].Name != want {
					t.Fatalf("Fill: slot %d holds %s, Build's %s", s, bs[dst[s]-1000].Name, want)
				}
			}
		})
	}
}
