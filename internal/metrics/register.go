package metrics

import "github.com/prometheus/client_golang/prometheus"

// Register adds a collector of another part of the daemon (connection
// sync) to the exporter. A nil *Metrics ignores it.
func (m *Metrics) Register(c prometheus.Collector) error {
	if m == nil {
		return nil
	}
	return m.reg.Register(c)
}
