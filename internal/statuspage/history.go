package statuspage

import (
	"time"

	pb "github.com/xlbproject/xlb/api/xlb/v1"
)

// History is the charts' data: each service's rates, oldest first, over the
// last Options.History.
type History struct {
	Seconds float64  `json:"seconds"` // the span the charts show
	Series  []Series `json:"series"`  // in the services' order
}

// Series is one service's rates at the sample times T (Unix milliseconds).
type Series struct {
	Service  string    `json:"service"`
	T        []int64   `json:"t"`
	Packets  []float64 `json:"packets"`   // per second
	Bytes    []float64 `json:"bytes"`     // per second
	NewFlows []float64 `json:"new_flows"` // per second
}

// history keeps the series of the services of the last sample; a service
// that is gone loses its series, a new one starts empty.
type history struct {
	span   time.Duration
	series map[string]*Series
	order  []string
}

func newHistory(span time.Duration) *history {
	return &history{span: span, series: map[string]*Series{}}
}

func (h *history) add(at time.Time, svcs []*pb.Service) {
	keep := make(map[string]*Series, len(svcs))
	h.order = h.order[:0]
	cut := at.Add(-h.span).UnixMilli()
	for _, s := range svcs {
		sr := h.series[s.GetName()]
		if sr == nil {
			sr = &Series{Service: s.GetName()}
		}
		r := s.GetRates()
		sr.T = append(sr.T, at.UnixMilli())
		sr.Packets = append(sr.Packets, r.GetPackets())
		sr.Bytes = append(sr.Bytes, r.GetBytes())
		sr.NewFlows = append(sr.NewFlows, r.GetNewFlows())
		i := 0
		for i < len(sr.T) && sr.T[i] < cut {
			i++
		}
		if i > 0 {
			sr.T, sr.Packets, sr.Bytes, sr.NewFlows = sr.T[i:], sr.Packets[i:], sr.Bytes[i:], sr.NewFlows[i:]
		}
		keep[s.GetName()] = sr
		h.order = append(h.order, s.GetName())
	}
	h.series = keep
}

// export copies the series (the snapshot outlives the next add).
func (h *history) export() History {
	out := History{Seconds: h.span.Seconds(), Series: make([]Series, 0, len(h.order))}
	for _, n := range h.order {
		s := h.series[n]
		out.Series = append(out.Series, Series{
			Service: s.Service, T: append([]int64(nil), s.T...),
			Packets:  append([]float64(nil), s.Packets...),
			Bytes:    append([]float64(nil), s.Bytes...),
			NewFlows: append([]float64(nil), s.NewFlows...),
		})
	}
	return out
}
