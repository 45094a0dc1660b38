package study

import (
	"fmt"
	"strconv"
	"time"
)

// ConsistentOptions selects what ConsistentStudy runs.
type ConsistentOptions struct {
	N        int       // backends
	Ms       []int     // table sizes
	Percents []float64 // failure percentages for Disruption
	Reps     int       // Disruption repetitions per percentage
	// Sets is the number of backend sets for BalanceSets; 0 skips it.
	Sets int
}

// PaperConsistentOptions are the paper's settings (section 5.3): N = 1000,
// M = 65537 and 655373, 0-10% failures, 200 repetitions; and 10 backend
// sets for the spread of the over-provision factor. On two cores of the
// development machine this takes about a minute.
func PaperConsistentOptions() ConsistentOptions {
	return ConsistentOptions{
		N: 1000, Ms: []int{SmallM, LargeM},
		Percents: []float64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10},
		Reps:     200, Sets: 10,
	}
}

// ConsistentResult is the outcome of ConsistentStudy: for each table size
// in order, each method of Methods in order.
type ConsistentResult struct {
	Balance    []BalanceResult   `json:"balance"`
	Spread     []BalanceSpread   `json:"spread,omitempty"`
	Disruption []DisruptionPoint `json:"disruption"`
	// Seconds is the wall time of the whole study.
	Seconds float64 `json:"seconds"`
}

// ConsistentStudy runs Balance, BalanceSets (if o.Sets > 0) and Disruption
// for every method and table size of o.
func ConsistentStudy(o ConsistentOptions) (ConsistentResult, error) {
	start := time.Now()
	var r ConsistentResult
	for _, m := range o.Ms {
		for _, method := range Methods {
			b, err := Balance(method, o.N, m)
			if err != nil {
				return ConsistentResult{}, err
			}
			r.Balance = append(r.Balance, b)
			if o.Sets > 0 {
				s, err := BalanceSets(method, o.N, m, o.Sets)
				if err != nil {
					return ConsistentResult{}, err
				}
				r.Spread = append(r.Spread, s)
			}
			d, err := Disruption(method, o.N, m, o.Percents, o.Reps)
			if err != nil {
				return ConsistentResult{}, err
			}
			r.Disruption = append(r.Disruption, d...)
		}
	}
	r.Seconds = time.Since(start).Seconds()
	return r, nil
}

// BalanceFigure is one method's balance at one table size in a report.
type BalanceFigure struct {
	MaxShare      float64 `json:"max_share"`
	MinShare      float64 `json:"min_share"`
	OverProvision float64 `json:"over_provision"`
	// PaperOverProvision is the paper's figure, absent if it gives none.
	PaperOverProvision *float64 `json:"paper_over_provision,omitempty"`
}

// BalanceReport arranges results for report.json:
// method -> "m<M>" -> figures, e.g. report["karger"]["m65537"].
func BalanceReport(results []BalanceResult) map[string]map[string]BalanceFigure {
	out := map[string]map[string]BalanceFigure{}
	for _, r := range results {
		f := BalanceFigure{MaxShare: r.MaxShare, MinShare: r.MinShare, OverProvision: r.OverProvision}
		if op, ok := PaperOverProvision(r.Method, r.M); ok {
			f.PaperOverProvision = &op
		}
		if out[string(r.Method)] == nil {
			out[string(r.Method)] = map[string]BalanceFigure{}
		}
		out[string(r.Method)][fmt.Sprintf("m%d", r.M)] = f
	}
	return out
}

// DisruptionReport arranges points for report.json:
// method -> "m<M>" -> "p<percent>" -> mean fraction of entries changed,
// e.g. report["maglev"]["m65537"]["p5"].
func DisruptionReport(points []DisruptionPoint) map[string]map[string]map[string]float64 {
	out := map[string]map[string]map[string]float64{}
	for _, pt := range points {
		byM := out[string(pt.Method)]
		if byM == nil {
			byM = map[string]map[string]float64{}
			out[string(pt.Method)] = byM
		}
		k := fmt.Sprintf("m%d", pt.M)
		if byM[k] == nil {
			byM[k] = map[string]float64{}
		}
		byM[k]["p"+strconv.FormatFloat(pt.Percent, 'f', -1, 64)] = pt.Changed
	}
	return out
}

// HashFigure is one hash's balance at one worker count in a report.
type HashFigure struct {
	CV          float64 `json:"cv"`
	MaxOverMean float64 `json:"max_over_mean"`
	IdealCV     float64 `json:"ideal_cv"`
}

// BalanceReport arranges the first dataset's balance (the joined
// reflection captures) for report.json's hash_balance key:
// hash -> "n<N>" -> figures, e.g. hash_balance["flowhash_v1"]["n16"].cv.
func (r HashStudyResult) BalanceReport() map[string]map[string]HashFigure {
	out := map[string]map[string]HashFigure{}
	if len(r.Datasets) == 0 {
		return out
	}
	for _, b := range r.Datasets[0].Balance {
		if out[b.Hash] == nil {
			out[b.Hash] = map[string]HashFigure{}
		}
		out[b.Hash][fmt.Sprintf("n%d", b.N)] = HashFigure{CV: b.CV, MaxOverMean: b.MaxOverMean, IdealCV: b.IdealCV}
	}
	return out
}

// QualityReport returns hash -> VarianceRatio on the first dataset, for
// report.json.
func (r HashStudyResult) QualityReport() map[string]float64 {
	out := map[string]float64{}
	if len(r.Datasets) > 0 {
		for _, q := range r.Datasets[0].Quality {
			out[q.Hash] = q.VarianceRatio
		}
	}
	return out
}

// NsReport returns hash -> median ns per hash, for report.json.
func (r HashStudyResult) NsReport() map[string]float64 {
	out := map[string]float64{}
	for _, t := range r.Timing {
		out[t.Hash] = t.NsPerHash
	}
	return out
}
