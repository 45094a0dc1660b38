package report

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/xlbproject/xlb/bench/stats"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/kube"
	"github.com/xlbproject/xlb/internal/plan"
	"github.com/xlbproject/xlb/internal/state"
	"github.com/xlbproject/xlb/lab"
)

// The Kubernetes source at the scale of its targets: 1,000 LoadBalancer
// Services (policy Local) of 20 endpoints each, on 20 nodes.
const (
	kubeServices  = 1000
	kubeEndpoints = 20
)

// KubeResult is what the kube part measured.
type KubeResult struct {
	Services, Endpoints int
	// SyncToProgrammedS: from the informers' sync (the cluster read) to
	// the commit holding every Service with all its nodes; the leader
	// allocates and writes the 1,000 statuses in between.
	SyncToProgrammedS float64 `json:"sync_to_programmed_s"`
	// ChangeMs: one EndpointSlice update (an endpoint's ready flips) to
	// the data plane, each run.
	ChangeMs []float64 `json:"change_ms"`
}

// kubeSink plans and commits what the source gives into a loaded
// forwarder, as the controller does, without its health probes and
// kernel neighbour entries (which a benchmark must not start on this
// machine): every node counts as healthy.
type kubeSink struct {
	node    config.Node
	dp      *datapath.Datapath
	planner *plan.Planner
	st      *state.State
	mu      sync.Mutex
	last    kube.Desired
	commits chan time.Time
}

func (s *kubeSink) SetKubernetes(ctx context.Context, d kube.Desired) (map[netip.Addr]string, error) {
	desired := &config.Desired{Node: s.node, Services: d.Services, HealthChecks: d.Checks}
	pl, err := s.planner.Plan(s.st, plan.Input{Desired: desired})
	if err != nil {
		return nil, err
	}
	if _, err := s.dp.Commit(pl.State, pl.Diff); err != nil {
		return nil, err
	}
	s.st = pl.State
	s.mu.Lock()
	s.last = d
	s.mu.Unlock()
	select {
	case s.commits <- time.Now():
	default:
	}
	return nil, nil
}

func (s *kubeSink) FileVIPs(context.Context) ([]netip.Addr, error)    { return nil, nil }
func (s *kubeSink) SetKubernetesStatus(context.Context, string) error { return nil }

// programmed reports how many services the last commit held with n
// backends in their table's pool.
func (s *kubeSink) programmed(n int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := 0
	for i := range s.last.Services {
		if ps := s.last.Services[i].Pools; len(ps) > 0 && countUsable(ps[0].Backends) == n {
			c++
		}
	}
	return c
}

func countUsable(bs []config.Backend) int {
	n := 0
	for _, b := range bs {
		if !b.Drain {
			n++
		}
	}
	return n
}

// kubePart measures the Kubernetes source against a real API server.
func (b *runner) kubePart(ctx context.Context) error {
	env, stop, err := lab.StartAPIServer()
	if errors.Is(err, lab.ErrNoAPIServer) {
		return fmt.Errorf("%w: %v", errUnavailable, err)
	}
	if err != nil {
		return err
	}
	defer stop()
	services, runs := kubeServices, 21
	if b.o.Smoke {
		services, runs = 50, 5
	}
	rc := rest.CopyConfig(env.Config)
	rc.QPS, rc.Burst = 1000, 2000
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	b.printf("  %d Services x %d endpoints on %d nodes, policy Local; a real API server (kubeenv)\n", services, kubeEndpoints, kubeEndpoints)
	t0 := time.Now()
	if err := kubeObjects(ctx, cs, services); err != nil {
		return err
	}
	b.printf("  objects created in %.1f s\n", time.Since(t0).Seconds())
	inst, err := newCtlInstance()
	if err != nil {
		return err
	}
	defer inst.close()
	cfg, err := config.Parse([]byte("node: {name: bench, interface: lo, address: 10.0.0.1}\nkubernetes: {address_pools: [10.210.0.0/20]}\n"), "bench.yaml")
	if err != nil {
		return err
	}
	sink := &kubeSink{node: cfg.Node, dp: inst.dp, planner: plan.NewPlanner(plan.Limits{MaxServices: 4096, MaxReals: ctlMaxReals}),
		st: inst.dp.Snapshot(), commits: make(chan time.Time, 1)}
	res, err := kubeMeasure(ctx, b, cfg, env.Config, cs, sink, services, runs)
	if err != nil {
		return err
	}
	b.r.Details.Kube = res
	b.put("kube.programmed_1000_services_s", res.SyncToProgrammedS, "s",
		fmt.Sprintf("%d Services x %d endpoints: informer sync to the last commit (statuses written in between)", services, kubeEndpoints))
	b.put("kube.endpointslice_change_ms", stats.Median(res.ChangeMs), "ms", fmt.Sprintf("median of %d EndpointSlice updates to the data plane", runs))
	b.targetNote("kube.endpointslice_change_ms", "median of %d runs; the source's informer, model, plan and commit", runs)
	return nil
}
