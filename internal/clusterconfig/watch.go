package clusterconfig

import (
	"context"
	"fmt"
	"time"

	"github.com/xlbproject/xlb/internal/config"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Committer commits a config on the node (the controller); source is what
// the status should say it came from.
type Committer interface {
	CommitFrom(ctx context.Context, cfg *config.Config, source string) error
	SetSource(ctx context.Context, source string) error
}

// Run watches the key until ctx ends: each new value is composed with
// the node file, validated and committed; one that fails is refused (the
// node keeps running the previous one) with the reason in the status.
// Every second it checks that etcd answers; while it does not, the node
// keeps forwarding on its last committed config and says so (log, status,
// metrics); when it answers again, the key is read afresh.
func (s *Source) Run(ctx context.Context, c Committer) {
	s.publish(ctx)
	c.SetSource(ctx, s.sourceText())
	for ctx.Err() == nil {
		s.watch(ctx, c)
		if ctx.Err() != nil {
			return
		}
		time.Sleep(time.Second)
	}
}

// watch follows the key from the running revision until etcd stops
// answering.
func (s *Source) watch(ctx context.Context, c Committer) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	// Catch up first: a value written while etcd was unreachable to us.
	if doc, rev, err := s.get(ctx); err != nil {
		s.unreachable(ctx, c, err)
		return
	} else if rev != s.Status().Revision || s.Status().State == StateUnreachable {
		s.reachable(ctx, c)
		s.apply(ctx, c, doc, rev)
	}
	go s.probe(wctx, cancel)
	wch := s.cli.Watch(wctx, s.o.Location.Key, clientv3.WithRev(s.Status().Revision+1))
	for resp := range wch {
		if err := resp.Err(); err != nil {
			s.o.Log.Warn("etcd watch ended", "error", err)
			break
		}
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypePut {
				s.apply(ctx, c, ev.Kv.Value, ev.Kv.ModRevision)
			} else {
				s.refuse(ctx, c, ev.Kv.ModRevision, "the key was deleted: keeping the running config")
			}
		}
	}
	if ctx.Err() == nil {
		s.unreachable(ctx, c, fmt.Errorf("watch of %s ended", s.o.Location.Key))
	}
}

// probe cancels the watch when etcd stops answering (a watch alone waits
// for a dead server forever); while it answers, probe writes the node's
// status again if its last write failed.
func (s *Source) probe(ctx context.Context, cancel func()) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, pcancel := context.WithTimeout(ctx, s.o.Timeout)
		_, err := s.cli.Get(pctx, s.o.Location.Key, clientv3.WithCountOnly())
		pcancel()
		if err != nil && ctx.Err() == nil {
			cancel()
			return
		}
		s.publish(ctx) // a status whose write failed (nothing when written)
	}
}

// apply composes, validates and commits one value.
func (s *Source) apply(ctx context.Context, c Committer, doc []byte, rev int64) {
	cfg, err := s.compose(doc)
	if err == nil {
		prev := s.doc
		s.doc = doc
		if err = c.CommitFrom(ctx, cfg, s.sourceTextAt(rev)); err != nil {
			s.doc = prev
		}
	}
	if err != nil {
		s.o.Log.Error("cluster config refused; the node keeps its running config", "revision", rev, "error", err)
		s.refuse(ctx, c, rev, err.Error())
		return
	}
	s.o.Log.Info("cluster config committed", "revision", rev, "version", cfg.ClusterVersion())
	s.Committed(ctx, cfg, rev)
}

func (s *Source) refuse(ctx context.Context, c Committer, rev int64, reason string) {
	s.set(func(st *Status) { st.State, st.Refused = StateRefused, &Refusal{Revision: rev, Reason: reason} })
	s.publish(ctx)
	c.SetSource(ctx, s.sourceText())
}

func (s *Source) unreachable(ctx context.Context, c Committer, err error) {
	if s.Status().State != StateUnreachable {
		s.o.Log.Warn("etcd unreachable: forwarding on the last committed config", "location", s.o.Location.String(),
			"revision", s.Status().Revision, "error", err)
	}
	s.set(func(st *Status) { st.State = StateUnreachable })
	c.SetSource(ctx, s.sourceText())
}

func (s *Source) reachable(ctx context.Context, c Committer) {
	if s.Status().State == StateUnreachable {
		s.o.Log.Info("etcd reachable again", "location", s.o.Location.String())
		s.set(func(st *Status) { st.State = StateRunning })
		c.SetSource(ctx, s.sourceText())
	}
}

// sourceText is the status's config source: the location, the revision
// running and, when etcd is unreachable or a value was refused, that.
func (s *Source) sourceText() string { return s.sourceTextAt(s.Status().Revision) }

func (s *Source) sourceTextAt(rev int64) string {
	st := s.Status()
	t := fmt.Sprintf("%s (revision %d)", s.o.Location, rev)
	switch st.State {
	case StateUnreachable:
		t += "; etcd unreachable: forwarding on the last committed config"
	case StateRefused:
		if st.Refused != nil && st.Refused.Revision > rev {
			t += fmt.Sprintf("; revision %d refused: %s", st.Refused.Revision, st.Refused.Reason)
		}
	}
	return t
}
