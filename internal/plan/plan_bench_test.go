package plan

import (
	"testing"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/testenv/genconfig"
)

// BenchmarkPlanOneChange plans 3,000 services × 30 backends with one
// backend's weight changed back and forth: the planner's part of a
// one-backend change (the datapath's is measured by xlb-bench control).
func BenchmarkPlanOneChange(b *testing.B) {
	parse := func(y []byte) *config.Desired {
		cfg, err := config.Parse(y, "bench.yaml")
		if err != nil {
			b.Fatal(err)
		}
		return cfg.Desired()
	}
	base := parse(genconfig.Control(3000, 30, 16381, -1, 0))
	changed := parse(genconfig.Control(3000, 30, 16381, 1500, 50))
	p := NewPlanner(Limits{MaxServices: 4096, MaxReals: 1 << 17})
	pl, err := p.Plan(nil, Input{Desired: base})
	if err != nil {
		b.Fatal(err)
	}
	cur := pl.State
	i := 0
	for b.Loop() {
		d := base
		if i%2 == 0 {
			d = changed
		}
		i++
		pl, err := p.Plan(cur, Input{Desired: d})
		if err != nil || pl.Stats.TablesBuilt > 1 || !pl.Stats.Incremental {
			b.Fatalf("%+v %v", pl.Stats, err)
		}
		cur = pl.State
	}
}
