// Package kube is xlbd's Kubernetes source: it serves the cluster's
// Services of type LoadBalancer of one class (the config's kubernetes
// section). Informers hold the Services, EndpointSlices and Nodes; a pure
// model (model.go) turns them into xlb services whose backends are the
// Service's nodes, which the controller programs beside the file's. One
// node, the holder of a Lease, allocates addresses and writes the
// Services' status and Events (leader.go); every node programs what the
// status says, so all compute the same tables.
package kube

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/xlbproject/xlb/internal/config"
)

// Sink is the controller as the source sees it.
type Sink interface {
	// SetKubernetes makes d the services programmed from Kubernetes,
	// beside the file's, and commits. It returns the VIPs refused and why
	// (a file service has them); an error leaves the running state as it
	// was.
	SetKubernetes(ctx context.Context, d Desired) (refused map[netip.Addr]string, err error)
	// FileVIPs are the file services' addresses, which no Service may have.
	FileVIPs(ctx context.Context) ([]netip.Addr, error)
	// SetKubernetesStatus is what the status says of the source.
	SetKubernetesStatus(ctx context.Context, status string) error
}

// Options configure New.
type Options struct {
	Config *config.Config // the running config: its kubernetes section, node and bgp
	// Identity names this node in the Lease (default node.name).
	Identity string
	// Namespace holds the Lease (default: the pod's namespace, else
	// kube-system).
	Namespace string
	Log       *slog.Logger
	// Lease timing (defaults 15s, 10s, 2s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// RestConfig, when set, is used instead of the kubeconfig (tests).
	RestConfig *rest.Config
}

// Source follows the cluster and feeds a Sink.
type Source struct {
	o        Options
	log      *slog.Logger
	client   kubernetes.Interface
	factory  informers.SharedInformerFactory
	svcs     cache.SharedIndexInformer
	eps      cache.SharedIndexInformer
	nodes    cache.SharedIndexInformer
	model    *model
	alloc    *Allocator
	kick     chan struct{}
	fileVIPs map[netip.Addr]bool // of the last commit
	// leaderKick wakes the status writer; sink is Run's.
	leaderKick chan struct{}
	sink       Sink

	mu       sync.Mutex
	status   Status
	problems map[Key]*Problem
	leading  bool
	// Synced is closed once the informers hold the cluster and the first
	// build is committed.
	synced chan struct{}
}

// Status is the source's state, for xlbctl status and tests.
type Status struct {
	Connected      bool
	Since          time.Time // of the last change of Connected
	LastErr        string
	Services       int // Services served
	Leader         bool
	CommitErr      string
	LastCommit     time.Time
	CommittedBuild uint64
}

const slicesByService = "service"

// New connects to the cluster (kubeconfig, else in-cluster) and sets up
// the informers; nothing runs before Run.
func New(o Options) (*Source, error) {
	k := o.Config.Kubernetes
	if k == nil {
		return nil, fmt.Errorf("no kubernetes section")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Identity == "" {
		o.Identity = o.Config.Node.Name
	}
	rc := o.RestConfig
	if rc == nil {
		var err error
		if rc, err = restConfig(k.Kubeconfig); err != nil {
			return nil, err
		}
	}
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = 500, 1000 // status writes of a thousand Services
	rc.UserAgent = "xlbd/" + o.Identity
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return newWithClient(o, cs), nil
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		rc, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("kubernetes: in-cluster config: %w (outside a pod, set kubernetes.kubeconfig)", err)
		}
		return rc, nil
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubernetes.kubeconfig %s: %w", kubeconfig, err)
	}
	return rc, nil
}

func newWithClient(o Options, cs kubernetes.Interface) *Source {
	f := informers.NewSharedInformerFactory(cs, 0)
	s := &Source{
		o: o, log: o.Log.With("source", "kubernetes"), client: cs, factory: f,
		svcs:  f.Core().V1().Services().Informer(),
		eps:   f.Discovery().V1().EndpointSlices().Informer(),
		nodes: f.Core().V1().Nodes().Informer(),
		model: newModel(o.Config, o.Config.Kubernetes.LoadBalancerClass),
		alloc: &Allocator{Pools: o.Config.Kubernetes.AddressPools},
		kick:  make(chan struct{}, 1), leaderKick: make(chan struct{}, 1), synced: make(chan struct{}),
	}
	s.eps.AddIndexers(cache.Indexers{slicesByService: func(obj any) ([]string, error) {
		es, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok || es.Labels[discoveryv1.LabelServiceName] == "" {
			return nil, nil
		}
		return []string{es.Namespace + "/" + es.Labels[discoveryv1.LabelServiceName]}, nil
	}})
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.poke() },
		UpdateFunc: func(any, any) { s.poke() },
		DeleteFunc: func(any) { s.poke() },
	}
	for _, inf := range []cache.SharedIndexInformer{s.svcs, s.eps, s.nodes} {
		inf.AddEventHandler(h)
	}
	return s
}

func (s *Source) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Synced is closed once the cluster is read and first committed.
func (s *Source) Synced() <-chan struct{} { return s.synced }

// Status returns the source's state.
func (s *Source) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

// slicesOf lists k's EndpointSlices, by name.
func (s *Source) slicesOf(k Key) []*discoveryv1.EndpointSlice {
	objs, _ := s.eps.GetIndexer().ByIndex(slicesByService, k.String())
	out := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*discoveryv1.EndpointSlice))
	}
	slices.SortFunc(out, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (s *Source) services() []*corev1.Service {
	objs := s.svcs.GetStore().List()
	out := make([]*corev1.Service, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*corev1.Service))
	}
	return out
}

func (s *Source) nodeList() []*corev1.Node {
	l := s.factory.Core().V1().Nodes().Lister()
	ns, _ := l.List(labels.Everything())
	return ns
}
