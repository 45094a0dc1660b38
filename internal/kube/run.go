package kube

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"time"

	"k8s.io/client-go/tools/cache"
)

// probeInterval is how often the source checks that the API server
// answers: informers retry on their own, silently, so the status needs
// its own look.
const probeInterval = time.Second

// Start starts the informers; WaitSynced then waits for them.
func (s *Source) Start(ctx context.Context) {
	s.factory.Start(ctx.Done())
	go s.probe(ctx)
}

// WaitSynced waits until the informers hold the cluster or ctx ends; it
// reports whether they do.
func (s *Source) WaitSynced(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), s.svcs.HasSynced, s.eps.HasSynced, s.nodes.HasSynced)
}

// Build computes the desired services from the informers' objects (the
// first commit takes them, before Run).
func (s *Source) Build() Desired {
	file := map[netip.Addr]bool{}
	for _, f := range s.o.Config.Services {
		file[f.VIP] = true
	}
	s.model.setNodes(s.nodeList())
	d, _, problems := s.model.build(s.services(), s.slicesOf, file)
	s.mu.Lock()
	s.problems = problems
	s.mu.Unlock()
	return d
}

// Run commits every change of the cluster to sink until ctx ends, runs
// the leader election, and keeps the status. Start must have been
// called.
func (s *Source) Run(ctx context.Context, sink Sink) {
	s.sink = sink
	go s.lead(ctx) // leader.go
	if !s.WaitSynced(ctx) {
		return
	}
	s.sync(ctx, sink, true)
	close(s.synced)
	tick := time.NewTicker(probeInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-tick.C: // the status text, and a commit that failed
		}
		s.sync(ctx, sink, false)
	}
}

// sync builds and, when something changed (or force), commits.
func (s *Source) sync(ctx context.Context, sink Sink, force bool) {
	s.mu.Lock()
	failed := s.status.CommitErr != ""
	s.mu.Unlock()
	file := map[netip.Addr]bool{}
	vips, err := sink.FileVIPs(ctx)
	if err != nil {
		return // ctx ended
	}
	for _, a := range vips {
		file[a] = true
	}
	nodesChanged := s.model.setNodes(s.nodeList())
	d, changed, problems := s.model.build(s.services(), s.slicesOf, file)
	if changed || nodesChanged || force || failed || !maps.Equal(file, s.fileVIPs) {
		s.fileVIPs = file
		s.commit(ctx, sink, d)
	}
	s.mu.Lock()
	s.problems = problems
	s.status.Services = len(s.model.cache)
	st := s.status
	s.mu.Unlock()
	_ = sink.SetKubernetesStatus(ctx, statusText(st))
	s.notifyLeader()
}

// commit hands d to the sink and records how it went.
func (s *Source) commit(ctx context.Context, sink Sink, d Desired) {
	refused, err := sink.SetKubernetes(ctx, d)
	for a, why := range refused { // the model keeps file VIPs out: a race with a reload
		s.log.Warn("address refused by the controller", "address", a, "reason", why)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.status.CommitErr = err.Error()
		s.log.Error("services from Kubernetes not committed; the data plane keeps its state", "error", err)
		return
	}
	s.status.CommitErr, s.status.LastCommit = "", time.Now()
	s.status.CommittedBuild++
}

func statusText(st Status) string {
	role := "follower"
	if st.Leader {
		role = "leader"
	}
	var t string
	if st.Connected {
		t = fmt.Sprintf("connected, %d Services, %s", st.Services, role)
	} else {
		t = fmt.Sprintf("disconnected since %s (%s): forwarding on the last committed state", st.Since.Format(time.RFC3339), st.LastErr)
	}
	if st.CommitErr != "" {
		t += "; last commit refused: " + st.CommitErr
	}
	return t
}

// probe asks the API server for its version every probeInterval and
// records whether it answers.
func (s *Source) probe(ctx context.Context) {
	t := time.NewTicker(probeInterval)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, probeInterval)
		err := s.client.Discovery().RESTClient().Get().AbsPath("/version").Do(pctx).Error()
		cancel()
		if ctx.Err() != nil {
			return
		}
		s.setConnected(err)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Source) setConnected(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ok := err == nil
	if err != nil {
		s.status.LastErr = err.Error()
	}
	if ok == s.status.Connected && !s.status.Since.IsZero() {
		return
	}
	s.status.Connected, s.status.Since = ok, time.Now()
	if ok {
		s.log.Info("API server answers")
	} else {
		s.log.Warn("API server unreachable: forwarding on the last committed state", "error", err)
	}
	s.poke()
}
