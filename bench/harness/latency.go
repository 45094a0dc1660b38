package harness

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/xlbproject/xlb/bench/stats"
)

// LoadLatency returns the time of one load that depends on the one before
// it, in ns, over random 64-byte lines of a region of size bytes, on a
// thread pinned to cpu: the memory latency a connection-table bucket read
// meets when the table is that large (the forwarder's per-CPU slice of 1M
// entries is 8 MiB). The region is ordinary Go heap (4 KiB pages unless the
// kernel backs it with huge pages). Median of 5 passes of 2M loads.
func LoadLatency(cpu int, size int) (float64, error) {
	if size < 4096 || size > 1<<30 {
		return 0, fmt.Errorf("bench: load latency over %d bytes: want 4 KiB to 1 GiB", size)
	}
	var ns float64
	err := onPinnedThread(cpu, func() error {
		lines := size / 64
		mem := make([]uint64, lines*8)
		// One random cycle through every line (Sattolo): each line's
		// first word is the index of the next line's first word.
		order := make([]uint32, lines)
		for i := range order {
			order[i] = uint32(i)
		}
		r := rand.New(rand.NewPCG(1, uint64(size)))
		for i := lines - 1; i > 0; i-- {
			j := r.IntN(i)
			order[i], order[j] = order[j], order[i]
		}
		for i := range order {
			mem[order[i]*8] = uint64(order[(i+1)%lines]) * 8
		}
		var runs []float64
		p := uint64(0)
		for i := 0; i < lines; i++ { // warm: every line once
			p = mem[p]
		}
		const loads = 2_000_000
		for range 5 {
			t0 := time.Now()
			for i := 0; i < loads; i++ {
				p = mem[p]
			}
			runs = append(runs, float64(time.Since(t0).Nanoseconds())/loads)
		}
		if p == 1 { // keep p live (never true: indexes are multiples of 8)
			return fmt.Errorf("bench: load latency: bad chain")
		}
		ns = stats.Median(runs)
		return nil
	})
	return ns, err
}
