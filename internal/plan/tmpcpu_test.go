package plan

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/testenv/genconfig"
	"golang.org/x/sys/unix"
)

func procCPU() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestTmpCPU(t *testing.T) {
	if os.Getenv("TMPDEV") == "" {
		t.Skip()
	}
	parse := func(y []byte) *config.Desired {
		cfg, err := config.Parse(y, "bench.yaml")
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Desired()
	}
	base := parse(genconfig.Control(3000, 30, 16381, -1, 0))
	changed := parse(genconfig.Control(3000, 30, 16381, 1500, 50))
	for rep := range 3 {
		p := NewPlanner(Limits{MaxServices: 4096, MaxReals: 1 << 17})
		c0, w0 := procCPU(), time.Now()
		pl, err := p.Plan(nil, Input{Desired: base})
		if err != nil {
			t.Fatal(err)
		}
		cold, coldW := procCPU()-c0, time.Since(w0)
		cur := pl.State
		const n = 100
		c0 = procCPU()
		for i := range n {
			d := base
			if i%2 == 0 {
				d = changed
			}
			pl, err := p.Plan(cur, Input{Desired: d})
			if err != nil {
				t.Fatal(err)
			}
			cur = pl.State
		}
		fmt.Printf("rep %d: cold plan cpu %.0f ms (wall %.0f ms); one change cpu %.2f ms\n", rep, cold.Seconds()*1e3, coldW.Seconds()*1e3, (procCPU()-c0).Seconds()*1e3/n)
	}
}
