package report

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/xlbproject/xlb/bench/stats"
	"github.com/xlbproject/xlb/bench/study"
	"github.com/xlbproject/xlb/internal/maglev"
)

// referencePopulate is the Maglev paper's population (section 3.4,
// Pseudocode 1) written plainly, the yardstick maglev.Build is timed
// against: backend i's permutation is computed on the fly,
// permutation[i][j] = (offset_i + j*skip_i) mod M, with offset and skip
// from the two hashes of maglev.MakePerm; next[i] is how far backend i has
// walked its permutation; backends take turns, in order, each filling its
// most preferred empty entry, until M entries are filled. names must be
// distinct and in the order maglev.Build sorts them (byte-wise), m prime;
// the result is then maglev.Build's table of the same backends with equal
// weights, entry for entry.
func referencePopulate(names []string, m uint32) []int32 {
	n := len(names)
	offset, skip := make([]uint64, n), make([]uint64, n)
	for i, name := range names {
		p := maglev.MakePerm(name, 1, m)
		offset[i], skip[i] = uint64(p.Offset), uint64(p.Skip)
	}
	next := make([]uint64, n)
	entry := make([]int32, m)
	for j := range entry {
		entry[j] = -1
	}
	mm := uint64(m)
	filled := uint32(0)
	for {
		for i := range n {
			c := (offset[i] + next[i]*skip[i]) % mm
			for entry[c] >= 0 {
				next[i]++
				c = (offset[i] + next[i]*skip[i]) % mm
			}
			entry[c] = int32(i)
			next[i]++
			filled++
			if filled == m {
				return entry
			}
		}
	}
}

// ReferenceResult is maglev.Build against referencePopulate for the same
// backends (N of them, equal weights) and M, timed alternately on one core
// so that whatever else the machine does weighs on both alike.
type ReferenceResult struct {
	Key         string    `json:"key"` // table_gen_ms key
	N           int       `json:"n"`
	M           uint32    `json:"m"`
	BuildMs     float64   `json:"build_median_ms"`
	ReferenceMs float64   `json:"reference_median_ms"`
	Ratio       float64   `json:"ratio"` // BuildMs / ReferenceMs
	BuildRuns   []float64 `json:"build_runs_ms"`
	RefRuns     []float64 `json:"reference_runs_ms"`
}

// versusReference times maglev.Build and referencePopulate on n backends
// named like addresses, runs times each (after a warm-up of each, which
// also checks that both compute the same table), alternating.
func versusReference(n int, m uint32, runs int) (ReferenceResult, error) {
	bs := backends(n, false)
	names := make([]string, n)
	for i, b := range bs {
		names[i] = b.Name // study.BackendNames sorts them as Build does
	}
	t, err := maglev.Build(bs, m)
	if err != nil {
		return ReferenceResult{}, err
	}
	if ref := referencePopulate(names, m); !slices.Equal(ref, t.Entries) {
		return ReferenceResult{}, fmt.Errorf("m %d, n %d: maglev.Build and the paper's pseudocode compute different tables", m, n)
	}
	res := ReferenceResult{Key: fmt.Sprintf("m%d_n%d", m, n), N: n, M: m}
	for range runs {
		start := time.Now()
		referencePopulate(names, m)
		res.RefRuns = append(res.RefRuns, ms(time.Since(start)))
		start = time.Now()
		if _, err := maglev.Build(bs, m); err != nil {
			return res, err
		}
		res.BuildRuns = append(res.BuildRuns, ms(time.Since(start)))
	}
	res.BuildMs, res.ReferenceMs = stats.Median(res.BuildRuns), stats.Median(res.RefRuns)
	res.Ratio = res.BuildMs / res.ReferenceMs
	return res, nil
}

// versusReference times maglev.Build against the paper's pseudocode for
// N = 1000 at both table sizes and records table_gen_reference_ms and
// their ratio, table_gen_vs_reference.
func (b *runner) versusReference(ctx context.Context, runs int) error {
	for _, m := range []uint32{study.SmallM, study.LargeM} {
		if err := ctx.Err(); err != nil {
			return err
		}
		r, err := versusReference(1000, m, runs)
		if err != nil {
			return err
		}
		b.r.Details.TableGenReference = append(b.r.Details.TableGenReference, r)
		b.put("table_gen_reference_ms."+r.Key, r.ReferenceMs, "ms", fmt.Sprintf("the paper's pseudocode; maglev.Build %s ms in alternate runs", fmtNum(r.BuildMs)))
		b.put("table_gen_vs_reference."+r.Key, r.Ratio, "×", "maglev.Build over the reference, medians of alternate runs")
		b.targetNote("table_gen_vs_reference."+r.Key, "maglev.Build %s ms, reference %s ms (medians of %d alternate runs)",
			fmtNum(r.BuildMs), fmtNum(r.ReferenceMs), runs)
	}
	return nil
}
