package lab

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/xlbproject/xlb/internal/testenv/kubeenv"
)

// kubeDemoPool is the demo's kubernetes.address_pools.
var kubeDemoPool = netip.MustParsePrefix("10.200.0.0/29")

// KubeDemoOptions shape RunKubeDemo.
type KubeDemoOptions struct {
	BinDir, Prefix string
	Keep           bool // leave the lab up (the API server stops with the demo)
}

// kubeDemo is one run of the Kubernetes demo.
type kubeDemo struct {
	w   io.Writer
	l   *Lab
	env *kubeenv.Env
	kc  *KubeCluster
	vip netip.Addr
}

// RunKubeDemo tells the Kubernetes story on a real API server: the lab's
// backends are the cluster's nodes; a LoadBalancer Service gets an
// address in its status; traffic reaches only the nodes with ready
// endpoints; a bad annotation gives an Event; a node joining breaks no
// session; a terminating endpoint drains its node; an API server outage
// keeps forwarding; deleting the Service withdraws its address.
func RunKubeDemo(ctx context.Context, w io.Writer, opts KubeDemoOptions) (err error) {
	fmt.Fprintf(w, "starting an API server (etcd and kube-apiserver on loopback, from make kube-bin) ...\n")
	env, stop, err := StartAPIServer()
	if err != nil {
		return err
	}
	defer stop()
	l, err := New(ctx, Config{Prefix: opts.Prefix, Backends: 3, BinDir: opts.BinDir, VIPs: PoolAddrs(kubeDemoPool)})
	if err != nil {
		return err
	}
	defer func() { err = l.endDemo(w, opts.Keep, err) }()
	PrintTopology(w, l)
	d := &kubeDemo{w: w, l: l, env: env, kc: &KubeCluster{CS: env.Client}}
	if err := d.start(ctx); err != nil {
		return err
	}
	for _, step := range []func(context.Context) error{d.service, d.badAnnotation, d.nodeJoins, d.drain, d.outage, d.delete} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "\nthe Kubernetes demo passed\n")
	return nil
}

// start makes the backends nodes (servers, decap, Node objects), lets
// the xlb node reach the API server and starts xlbd on it.
func (d *kubeDemo) start(ctx context.Context) error {
	l := d.l
	if _, err := l.StartServers(Ports{HTTP: KubeHCPort}); err != nil {
		return err
	}
	fmt.Fprintf(d.w, "\nthe backends play the cluster's nodes: xlb-decap on eth0, the pool's addresses on lo (as kube-proxy would), a Node object each\n")
	if err := l.AttachDecap(ctx); err != nil {
		return err
	}
	for _, b := range l.Backends {
		if err := d.kc.AddNode(ctx, b); err != nil {
			return err
		}
	}
	if err := l.ReachFromNode(l.Nodes[0], strings.TrimPrefix(d.env.Config.Host, "https://")); err != nil {
		return err
	}
	cfg := filepath.Join(l.Dir, "xlbd-kube.yaml")
	if err := os.WriteFile(cfg, l.KubeXLBDConfig(0, KubeOptions{Kubeconfig: d.env.Kubeconfig,
		AddressPools: []netip.Prefix{kubeDemoPool}, RouteTable: 100}), 0o644); err != nil {
		return err
	}
	xlbd, err := l.StartXLBD(ctx, 0, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(d.w, "xlbd on %s with kubernetes: {address_pools: [%s]} and no file services\n", l.Nodes[0].Short, kubeDemoPool)
	return xlbd.WaitOutput(ctx, KubeReadMessage, 1, 45*time.Second)
}

// waitTable waits until the node's table holds exactly names.
func (d *kubeDemo) waitTable(ctx context.Context, names ...string) error {
	deadline := time.Now().Add(45 * time.Second)
	for {
		table, _, _, err := d.l.ServiceTable(ctx, 0, d.vip, DefaultPorts.TCP)
		if err == nil && slices.Equal(table, names) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s's table has %v (%v), want %v", d.vip, table, err, names)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sessions runs n sessions (every interval) for hold and reports them.
func (d *kubeDemo) sessions(ctx context.Context, n int, during func() error) (TCPResult, error) {
	s, err := StartTCPSessions(ctx, d.l.Client.NS, netip.AddrPortFrom(d.vip, DefaultPorts.TCP), n, 100*time.Millisecond)
	if err != nil {
		return TCPResult{}, err
	}
	time.Sleep(300 * time.Millisecond)
	err = during()
	time.Sleep(500 * time.Millisecond)
	res := s.Stop()
	if err == nil && len(res.Breaks) > 0 {
		err = fmt.Errorf("%d of %d sessions broke, first: %v", len(res.Breaks), len(res.Sessions), res.Breaks[0])
	}
	return res, err
}

func (d *kubeDemo) service(ctx context.Context) error {
	if _, err := d.kc.CS.CoreV1().Services(KubeNamespace).Create(ctx, KubeService("web"), metav1.CreateOptions{}); err != nil {
		return err
	}
	vip, svc, err := d.kc.WaitAddress(ctx, "web", 20*time.Second)
	if err != nil {
		return err
	}
	d.vip = vip
	fmt.Fprintf(d.w, "\nService web (type LoadBalancer, class xlb.io/l4, externalTrafficPolicy Local): status.loadBalancer.ingress %s, ipMode %s\n",
		vip, *svc.Status.LoadBalancer.Ingress[0].IPMode)
	if err := d.kc.SetEndpoints(ctx, "web", ReadyOn("b1"), ReadyOn("b2")); err != nil {
		return err
	}
	if err := d.waitTable(ctx, "b1", "b2"); err != nil {
		return err
	}
	res, err := d.sessions(ctx, 60, func() error { return nil })
	fmt.Fprintf(d.w, "ready endpoints on b1 and b2: 60 sessions went %v (b3 has none)\n", res.Counts())
	return err
}

func (d *kubeDemo) badAnnotation(ctx context.Context) error {
	svcs := d.kc.CS.CoreV1().Services(KubeNamespace)
	s, err := svcs.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		return err
	}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations["xlb.io/scheduler"] = "fastest"
	if _, err := svcs.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		return err
	}
	ev, err := d.kc.WaitEvent(ctx, "web", "InvalidAnnotation", "xlb.io/scheduler", 15*time.Second)
	if err != nil {
		return err
	}
	fmt.Fprintf(d.w, "\nxlb.io/scheduler: fastest -> Event %s %s: %s (the Service keeps its running settings)\n", ev.Type, ev.Reason, ev.Message)
	if s, err = svcs.Get(ctx, "web", metav1.GetOptions{}); err == nil {
		delete(s.Annotations, "xlb.io/scheduler")
		_, err = svcs.Update(ctx, s, metav1.UpdateOptions{})
	}
	return err
}

func (d *kubeDemo) nodeJoins(ctx context.Context) error {
	res, err := d.sessions(ctx, 60, func() error {
		if err := d.kc.SetEndpoints(ctx, "web", ReadyOn("b1"), ReadyOn("b2"), ReadyOn("b3")); err != nil {
			return err
		}
		return d.waitTable(ctx, "b1", "b2", "b3")
	})
	fmt.Fprintf(d.w, "\nb3 gets a ready endpoint and joins the table; of 60 sessions running meanwhile %d broke\n", len(res.Breaks))
	return err
}

func (d *kubeDemo) drain(ctx context.Context) error {
	res, err := d.sessions(ctx, 60, func() error {
		if err := d.kc.SetEndpoints(ctx, "web", ReadyOn("b1"), TerminatingOn("b2"), ReadyOn("b3")); err != nil {
			return err
		}
		return d.waitTable(ctx, "b1", "b3")
	})
	fmt.Fprintf(d.w, "\nb2's endpoint terminates (serving): b2 drains, out of the table; its %d sessions ran on, %d broke\n",
		res.Counts()["b2"], len(res.Breaks))
	return err
}

func (d *kubeDemo) outage(ctx context.Context) error {
	if err := apiCall(d.env.StopAPIServer); err != nil {
		return err
	}
	res, err := d.sessions(ctx, 40, func() error { return nil })
	fmt.Fprintf(d.w, "\nAPI server stopped: 40 new sessions went %v (forwarding on the last committed state)\n", res.Counts())
	if err != nil {
		return err
	}
	if err := apiCall(d.env.StartAPIServer); err != nil {
		return err
	}
	if err := d.kc.SetEndpoints(ctx, "web", ReadyOn("b1")); err != nil {
		return err
	}
	err = d.waitTable(ctx, "b1")
	fmt.Fprintf(d.w, "API server back: the informers catch up (only b1 ready now: table %s)\n", "[b1]")
	return err
}

func (d *kubeDemo) delete(ctx context.Context) error {
	if err := d.kc.CS.CoreV1().Services(KubeNamespace).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, _, found, err := d.l.ServiceTable(ctx, 0, d.vip, DefaultPorts.TCP)
		if err == nil && !found {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("Service deleted, yet %s stays in the data plane (%v)", d.vip, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Fprintf(d.w, "\nService deleted: %s left the data plane and the routes xlbd announces; the address is free again\n", d.vip)
	return nil
}

// apiCall runs one of kubeenv's testing.TB calls outside a test.
func apiCall(f func(testing.TB)) error {
	t := &tb{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(t)
	}()
	<-done
	return t.err
}
