package plan

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"testing"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/state"
	"github.com/xlbproject/xlb/internal/testenv/genconfig"
)

// tablesFingerprint is FNV-1a 64 over every service's table, services in
// VIP order, entries as the real's address.
func tablesFingerprint(st *state.State) string {
	keys := make([]state.VIPKey, 0, len(st.Services))
	for k := range st.Services {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b state.VIPKey) int {
		return cmp.Or(a.Addr.Compare(b.Addr), cmp.Compare(a.Port, b.Port), cmp.Compare(a.Proto, b.Proto))
	})
	h := fnv.New64a()
	for _, k := range keys {
		h.Write([]byte(k.String()))
		for _, rid := range st.Services[k].Table {
			a := st.Reals.At(rid).Addr.As16()
			h.Write(a[:])
		}
		h.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(st.Services[k].Table))))
	}
	return fmt.Sprintf("%#016x", h.Sum64())
}

// TestPlanTablesPinned freezes the tables a plan of 300 services × 30
// backends computes (one backend's weight changed to 50, so one table is
// weighted), as the planner first shipped computes them, whichever
// number of workers builds them and whether they come from a cold plan
// or from changes planned since.
func TestPlanTablesPinned(t *testing.T) {
	const want = "0x66577d434f7360ea"
	parse := func(y []byte) *config.Desired {
		cfg, err := config.Parse(y, "pinned.yaml")
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Desired()
	}
	d := parse(genconfig.Control(300, 30, 16381, 150*30+10, 50))
	base := parse(genconfig.Control(300, 30, 16381, -1, 0))
	lim := Limits{MaxServices: 4096, MaxReals: 1 << 17}
	for _, workers := range []int{1, 3} {
		p := NewPlanner(lim)
		p.SetWorkers(workers)
		pl, err := p.Plan(nil, Input{Desired: d})
		if err != nil {
			t.Fatal(err)
		}
		if got := tablesFingerprint(pl.State); got != want {
			t.Errorf("cold plan, %d workers: fingerprint %s, want %s", workers, got, want)
		}
	}
	p := NewPlanner(lim)
	cur := state.Empty()
	for i, x := range []*config.Desired{base, d, base, d} {
		pl, err := p.Plan(cur, Input{Desired: x})
		if err != nil {
			t.Fatal(err)
		}
		cur = pl.State
		if got := tablesFingerprint(cur); i%2 == 1 && got != want {
			t.Errorf("plan %d: fingerprint %s, want %s", i, got, want)
		}
	}
}
