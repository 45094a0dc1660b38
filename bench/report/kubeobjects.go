package report

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/kube"
)

func kubeSvcName(i int) string { return fmt.Sprintf("svc-%04d", i) }

// kubeObjects creates the nodes, the Services and one EndpointSlice per
// Service with an endpoint on every node.
func kubeObjects(ctx context.Context, cs kubernetes.Interface, services int) error {
	for k := range kubeEndpoints {
		n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%02d", k)}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.211.0.%d", k+1)}}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	return parallel(16, services, func(i int) error {
		class, no := config.DefaultLoadBalancerClass, false
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: kubeSvcName(i)},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class, AllocateLoadBalancerNodePorts: &no,
				Ports:                 []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
				ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal}}
		if _, err := cs.CoreV1().Services("default").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return err
		}
		_, err := cs.DiscoveryV1().EndpointSlices("default").Create(ctx, kubeSlice(i, true), metav1.CreateOptions{})
		return err
	})
}

// kubeSlice is Service i's EndpointSlice; first says whether its first
// endpoint is ready.
func kubeSlice(i int, first bool) *discoveryv1.EndpointSlice {
	name := kubeSvcName(i)
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name + "-1",
		Labels: map[string]string{discoveryv1.LabelServiceName: name}}, AddressType: discoveryv1.AddressTypeIPv4}
	for k := range kubeEndpoints {
		node, ready := fmt.Sprintf("node-%02d", k), k > 0 || first
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.244.%d.%d", i/250, 1+i%250)},
			NodeName: &node, Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
	}
	return es
}

// parallel runs f(0..n-1) on workers goroutines; the first error wins.
func parallel(workers, n int, f func(int) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		next = make(chan int)
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

// usable is how many nodes take new flows in service name's pool at the
// last commit (-1: not programmed).
func (s *kubeSink) usable(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.last.Services {
		if svc := &s.last.Services[i]; svc.Name == name && len(svc.Pools) > 0 {
			return countUsable(svc.Pools[0].Backends)
		}
	}
	return -1
}

// waitFor waits for a commit after which ok holds.
func (s *kubeSink) waitFor(ctx context.Context, timeout time.Duration, ok func() bool) (time.Time, error) {
	deadline := time.After(timeout)
	for !ok() {
		select {
		case <-s.commits:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			return time.Time{}, fmt.Errorf("not programmed within %v", timeout)
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
	return time.Now(), nil
}

// kubeMeasure runs the source on the objects and times the two figures.
func kubeMeasure(ctx context.Context, b *runner, cfg *config.Config, rc *rest.Config, cs kubernetes.Interface, sink *kubeSink, services, runs int) (*KubeResult, error) {
	src, err := kube.New(kube.Options{Config: cfg, RestConfig: rc, Log: quietLogger(), Namespace: "kube-system"})
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	src.Start(rctx)
	if !src.WaitSynced(rctx) {
		return nil, fmt.Errorf("informers not synced")
	}
	synced := time.Now()
	go src.Run(rctx, sink)
	done, err := sink.waitFor(ctx, 2*time.Minute, func() bool { return sink.programmed(kubeEndpoints) == services })
	if err != nil {
		return nil, fmt.Errorf("%d Services: %w (%d programmed)", services, err, sink.programmed(kubeEndpoints))
	}
	res := &KubeResult{Services: services, Endpoints: kubeEndpoints, SyncToProgrammedS: done.Sub(synced).Seconds()}
	b.printf("  informers synced; every Service programmed %.2f s later\n", res.SyncToProgrammedS)
	for r := range runs {
		i, ready := (r/2)%services, r%2 == 1
		name := fmt.Sprintf("k8s.default.%s.80.tcp", kubeSvcName(i))
		want := kubeEndpoints
		if !ready {
			want--
		}
		es := kubeSlice(i, ready)
		cur, err := cs.DiscoveryV1().EndpointSlices("default").Get(ctx, es.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		es.ResourceVersion = cur.ResourceVersion
		start := time.Now()
		if _, err := cs.DiscoveryV1().EndpointSlices("default").Update(ctx, es, metav1.UpdateOptions{}); err != nil {
			return nil, err
		}
		at, err := sink.waitFor(ctx, 10*time.Second, func() bool { return sink.usable(name) == want })
		if err != nil {
			return nil, fmt.Errorf("change %d: %w", r, err)
		}
		res.ChangeMs = append(res.ChangeMs, float64(at.Sub(start).Microseconds())/1000)
	}
	return res, nil
}
