package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/datapath"
	xmetrics "github.com/xlbproject/xlb/internal/metrics"
	"github.com/xlbproject/xlb/internal/peersync"
)

// bulkWait bounds how long a starting node waits for its peers' bulk
// copies before it announces its VIPs (a peer that is down never answers).
const bulkWait = 3 * time.Second

// newSyncer opens connection sync when node.sync is set (nil otherwise).
func newSyncer(log *slog.Logger, cfg *config.Config, dp *datapath.Datapath, m *xmetrics.Metrics) (*peersync.Syncer, error) {
	sc := cfg.Node.Sync
	if sc == nil {
		return nil, nil
	}
	s, err := peersync.New(dp, peersync.Options{Node: cfg.Node.Name, Listen: sc.Listen, Peers: sc.Peers, Key: sc.Key, Log: log})
	if err != nil {
		return nil, err
	}
	if err := m.Register(s.Collector()); err != nil {
		return nil, err
	}
	return s, nil
}

// startSync runs the syncer and, before the caller announces the VIPs,
// asks the peers for their connection tables (a joining or restarted node
// then keeps the flows the routers move to it).
func startSync(ctx context.Context, log *slog.Logger, s *peersync.Syncer, peers int) {
	if s == nil {
		return
	}
	go func() {
		if err := s.Run(ctx); err != nil {
			log.Error("connection sync stopped", "error", err)
		}
	}()
	start := time.Now()
	n := s.BulkSync(ctx, bulkWait)
	log.Info("connection sync running; bulk copies received", "peers_answered", n, "peers", peers,
		"took", time.Since(start).Round(time.Millisecond))
}
