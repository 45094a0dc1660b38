package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/xlbproject/xlb/internal/kube"
	"github.com/xlbproject/xlb/internal/testenv"
	"github.com/xlbproject/xlb/internal/testenv/kubeenv"
	"github.com/xlbproject/xlb/lab"
)

// The Kubernetes lab: a real API server, the lab's backends as the
// cluster's nodes (Node objects with their InternalIP, decapsulating and
// serving on the pool's addresses as kube-proxy would), xlbd on the lab's
// nodes serving the Services of class xlb.io/l4.
const (
	kubeTable = 100 // bgp.mode external: the VIP routes xlbd would announce
	kubeNS    = lab.KubeNamespace
)

var kubePool4 = netip.MustParsePrefix("10.200.0.0/29")

type kubeEnv struct {
	k       *kubeenv.Env
	cs      kubernetes.Interface
	kc      *lab.KubeCluster
	l       *lab.Lab
	daemons []*lab.Daemon
	configs []string
}

// setupKube starts the API server, a lab of nodes xlb nodes and 3
// backends (Nodes b1..b3), and xlbd on every node.
func setupKube(t *testing.T, nodes int, sync bool) *kubeEnv {
	t.Helper()
	testenv.RequireNetns(t)
	testenv.RequireCommands(t, "nsenter", "ip")
	k := kubeenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := lab.New(ctx, lab.Config{Nodes: nodes, Backends: 3, VIPs: lab.PoolAddrs(kubePool4)})
	if err != nil {
		t.Fatalf("build lab: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Destroy(); err != nil {
			t.Errorf("destroy lab: %v", err)
		}
	})
	if _, err := l.StartServers(lab.Ports{HTTP: lab.KubeHCPort}); err != nil {
		t.Fatal(err)
	}
	if err := l.AttachDecap(ctx); err != nil {
		t.Fatal(err)
	}
	e := &kubeEnv{k: k, cs: k.Client, kc: &lab.KubeCluster{CS: k.Client}, l: l, daemons: make([]*lab.Daemon, nodes), configs: make([]string, nodes)}
	for _, b := range l.Backends {
		if err := e.kc.AddNode(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	host := strings.TrimPrefix(k.Config.Host, "https://")
	for i := range nodes {
		if err := l.ReachFromNode(l.Nodes[i], host); err != nil {
			t.Fatal(err)
		}
		e.configs[i] = filepath.Join(l.Dir, fmt.Sprintf("xlbd-kube-%d.yaml", i))
		cfg := l.KubeXLBDConfig(i, lab.KubeOptions{Kubeconfig: k.Kubeconfig, AddressPools: []netip.Prefix{kubePool4},
			RouteTable: kubeTable, Sync: sync})
		if err := os.WriteFile(e.configs[i], cfg, 0o644); err != nil {
			t.Fatal(err)
		}
		e.start(t, i)
	}
	return e
}

// start starts xlbd on node i and waits until it has read the cluster.
func (e *kubeEnv) start(t *testing.T, i int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := e.l.StartXLBD(ctx, i, e.configs[i])
	if err != nil {
		t.Fatal(err)
	}
	e.daemons[i] = d
	if err := d.WaitOutput(ctx, lab.KubeReadMessage, 1, 45*time.Second); err != nil {
		t.Fatalf("xlbd on node %d did not read the cluster: %v\n%s", i, err, d.Output())
	}
}

func (e *kubeEnv) createService(t *testing.T, s *corev1.Service) {
	t.Helper()
	if _, err := e.cs.CoreV1().Services(s.Namespace).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (e *kubeEnv) waitAddress(t *testing.T, name string) (netip.Addr, *corev1.Service) {
	t.Helper()
	a, s, err := e.kc.WaitAddress(context.Background(), name, 20*time.Second)
	if err != nil {
		t.Fatalf("%v\n%s", err, e.daemons[0].Output())
	}
	return a, s
}

type kep = lab.KubeEndpoint

func readyOn(node string) kep { return lab.ReadyOn(node) }

func (e *kubeEnv) setEndpoints(t *testing.T, svc string, eps ...kep) {
	t.Helper()
	if err := e.kc.SetEndpoints(context.Background(), svc, eps...); err != nil {
		t.Fatal(err)
	}
}

// inTable: see lab.ServiceTable (the echo port).
func (e *kubeEnv) inTable(t *testing.T, i int, vip netip.Addr) (table, drained []string, found bool) {
	t.Helper()
	table, drained, found, err := e.l.ServiceTable(context.Background(), i, vip, lab.DefaultPorts.TCP)
	if err != nil {
		t.Fatal(err)
	}
	return table, drained, found
}

// waitBackends waits until node i's table of vip holds exactly the
// backends named (Short names, sorted).
func (e *kubeEnv) waitBackends(t *testing.T, i int, vip netip.Addr, names ...string) {
	t.Helper()
	e.waitBackendsWithin(t, 15*time.Second, i, vip, names...)
}

// waitBackendsWithin is waitBackends with its timeout.
func (e *kubeEnv) waitBackendsWithin(t *testing.T, timeout time.Duration, i int, vip netip.Addr, names ...string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		// A node that has just started answers "xlbd is starting"
		// until its first commit: wait for it like for the table.
		table, _, _, err := e.l.ServiceTable(context.Background(), i, vip, lab.DefaultPorts.TCP)
		if err == nil && slices.Equal(table, names) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %d: %s's table has %v (%v), want %v\n%s", i, vip, table, err, names, e.daemons[i].Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *kubeEnv) waitEvent(t *testing.T, svc, reason, want string) corev1.Event {
	t.Helper()
	ev, err := e.kc.WaitEvent(context.Background(), svc, reason, want, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// condition returns the Service's xlb condition.
func (e *kubeEnv) condition(t *testing.T, svc string) *metav1.Condition {
	t.Helper()
	s, err := e.cs.CoreV1().Services(kubeNS).Get(context.Background(), svc, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range s.Status.Conditions {
		if s.Status.Conditions[i].Type == kube.ConditionAccepted {
			return &s.Status.Conditions[i]
		}
	}
	return nil
}

// routeIn reports whether node i's kernel table kubeTable routes vip.
func (e *kubeEnv) routeIn(t *testing.T, i int, vip netip.Addr) bool {
	t.Helper()
	out, err := e.l.Nodes[i].Run(context.Background(), "ip", "route", "show", "table", fmt.Sprint(kubeTable))
	if err != nil {
		t.Fatalf("ip route: %v %s", err, out)
	}
	// "blackhole 10.200.0.1 proto 250": xlbd's routes for the host's
	// routing daemon.
	for _, line := range strings.Split(string(out), "\n") {
		for _, f := range strings.Fields(line) {
			if f == vip.String() || f == vip.String()+"/32" {
				return true
			}
		}
	}
	return false
}

// sessions runs n short TCP sessions to vip's echo port from the client.
func (e *kubeEnv) sessions(t *testing.T, vip netip.Addr, n int) map[string]int {
	t.Helper()
	s, err := lab.StartTCPSessions(context.Background(), e.l.Client.NS, netip.AddrPortFrom(vip, lab.DefaultPorts.TCP), n, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	res := s.Stop()
	if len(res.Breaks) > 0 {
		t.Fatalf("%d sessions broke, first: %v", len(res.Breaks), res.Breaks[0])
	}
	return res.Counts()
}
