package peersync

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	mSent     = prometheus.NewDesc("xlb_sync_flows_sent_total", "Flow decisions sent to peers (once per peer), bulk copies included.", nil, nil)
	mBulkSent = prometheus.NewDesc("xlb_sync_bulk_flows_sent_total", "Flow decisions sent in bulk copies to joining or restarted peers.", nil, nil)
	mRecv     = prometheus.NewDesc("xlb_sync_flows_received_total", "Flow decisions received in accepted messages.", nil, nil)
	mApplied  = prometheus.NewDesc("xlb_sync_flows_applied_total", "Received decisions written into the connection table.", nil, nil)
	mKept     = prometheus.NewDesc("xlb_sync_flows_kept_total", "Received decisions not applied: this node tracks the flow live to another backend.", nil, nil)
	mUnknown  = prometheus.NewDesc("xlb_sync_flows_unknown_total", "Received decisions not applied: a service or backend this node does not have, or a bucket it cannot place.", nil, nil)
	mLost     = prometheus.NewDesc("xlb_sync_records_lost_total", "Decisions the forwarder could not report (its record buffer full): those flows are not protected.", nil, nil)
	mRejected = prometheus.NewDesc("xlb_sync_messages_rejected_total", "Sync messages refused, by reason (unknown_sender, oversized, malformed, version, auth, replay).", []string{"reason"}, nil)
	mLag      = prometheus.NewDesc("xlb_sync_lag_seconds", "Receive time minus send time of the last flow message (includes the clocks' offset).", nil, nil)
	mPeerUp   = prometheus.NewDesc("xlb_sync_peer_up", "1 when the peer's hello came within three hello intervals.", []string{"peer", "node"}, nil)
	mMismatch = prometheus.NewDesc("xlb_sync_peer_fingerprint_mismatch", "1 when the peer is up and its tables' fingerprint differs from this node's.", []string{"peer", "node"}, nil)
	mFP       = prometheus.NewDesc("xlb_tables_fingerprint_info", "The fingerprint of this node's committed tables (label), overall, and its config version.", []string{"fingerprint", "version"}, nil)
	mSvcFP    = prometheus.NewDesc("xlb_service_table_fingerprint_info", "The fingerprint of one service's committed Maglev table (label).", []string{"vip", "fingerprint"}, nil)
)

// Collector returns the syncer's metrics.
func (s *Syncer) Collector() prometheus.Collector { return collector{s} }

type collector struct{ s *Syncer }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{mSent, mBulkSent, mRecv, mApplied, mKept, mUnknown, mLost, mRejected, mLag, mPeerUp, mMismatch, mFP, mSvcFP} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	cnt := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	cnt(mSent, st.Sent)
	cnt(mBulkSent, st.BulkSent)
	cnt(mRecv, st.Received)
	if dc, err := c.s.dp.SyncCounters(); err == nil {
		cnt(mApplied, dc.Applied)
		cnt(mKept, dc.Kept)
		cnt(mUnknown, st.Unknown+dc.Skipped)
		cnt(mLost, dc.Lost)
	}
	for _, r := range RejectReasons {
		cnt(mRejected, st.Rejected[r], r)
	}
	gauge(mLag, st.Lag.Seconds())
	for _, p := range c.s.Peers() {
		up, mm := 0.0, 0.0
		if p.State == "up" {
			up = 1
		}
		if p.Mismatch {
			mm = 1
		}
		gauge(mPeerUp, up, p.Addr.String(), p.Node)
		gauge(mMismatch, mm, p.Addr.String(), p.Node)
	}
	self := c.s.Self()
	gauge(mFP, 1, fmt.Sprintf("%016x", self.Fingerprints.Overall), self.ConfigVersion)
	for k, h := range self.Fingerprints.Services {
		gauge(mSvcFP, 1, k.String(), fmt.Sprintf("%016x", h))
	}
}
