package e2e

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pb "github.com/xlbproject/xlb/api/xlb/v1"
	"github.com/xlbproject/xlb/internal/kube"
	"github.com/xlbproject/xlb/lab"
)

// TestKubernetesService follows one LoadBalancer Service through xlbd
// against a real API server, with real TCP from the lab's client: it gets
// an address in its status; traffic reaches only the nodes with ready
// endpoints; a bad annotation gives an Event and a condition and changes
// nothing; a node joining takes new flows and no session breaks; a
// terminating endpoint drains its node; an API server outage keeps
// forwarding and the status says so; an xlbd restart breaks no session; deleting the Service withdraws the
// address from the data plane and from the routes xlbd announces.
func TestKubernetesService(t *testing.T) {
	e := setupKube(t, 1, false)
	e.createService(t, lab.KubeService("web"))
	vip, svc := e.waitAddress(t, "web")
	in := svc.Status.LoadBalancer.Ingress[0]
	if !kubePool4.Contains(vip) || in.IPMode == nil || *in.IPMode != corev1.LoadBalancerIPModeVIP ||
		len(in.Ports) != 1 || in.Ports[0].Port != int32(lab.DefaultPorts.TCP) {
		t.Fatalf("status.loadBalancer.ingress = %+v, want an address of %s, ipMode VIP, port %d", in, kubePool4, lab.DefaultPorts.TCP)
	}
	t.Logf("Service web got %s", vip)

	e.setEndpoints(t, "web", readyOn("b1"), readyOn("b2"))
	e.waitBackends(t, 0, vip, "b1", "b2")
	if c := e.sessions(t, vip, 60); c["b3"] != 0 || c["b1"] == 0 || c["b2"] == 0 {
		t.Fatalf("ready endpoints on b1 and b2; new sessions went %v", c)
	}
	if !e.routeIn(t, 0, vip) {
		t.Fatalf("%s is not among the routes xlbd announces", vip)
	}
	t.Run("bad annotation", func(t *testing.T) { kubeBadAnnotation(t, e, vip) })
	t.Run("node joins", func(t *testing.T) { kubeNodeJoins(t, e, vip) })
	t.Run("terminating endpoint drains", func(t *testing.T) { kubeDrain(t, e, vip) })
	t.Run("restart", func(t *testing.T) { kubeRestart(t, e, vip) })
	t.Run("API server outage", func(t *testing.T) { kubeOutage(t, e, vip) })
	t.Run("delete", func(t *testing.T) { kubeDelete(t, e, vip) })
}

func (e *kubeEnv) updateService(t *testing.T, name string, mod func(*corev1.Service)) {
	t.Helper()
	ctx := context.Background()
	s, err := e.cs.CoreV1().Services(kubeNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	mod(s)
	if _, err := e.cs.CoreV1().Services(kubeNS).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func kubeBadAnnotation(t *testing.T, e *kubeEnv, vip netip.Addr) {
	e.updateService(t, "web", func(s *corev1.Service) { s.Annotations[kube.AnnotationScheduler] = "fastest" })
	ev := e.waitEvent(t, "web", kube.ReasonInvalidAnnotation, kube.AnnotationScheduler)
	t.Logf("Event: %s %s: %s", ev.Type, ev.Reason, ev.Message)
	if c := e.condition(t, "web"); c == nil || c.Status != metav1.ConditionFalse || c.Reason != kube.ReasonInvalidAnnotation ||
		!strings.Contains(c.Message, kube.AnnotationScheduler) {
		t.Fatalf("condition %s = %+v, want False, %s, naming the annotation", kube.ConditionAccepted, c, kube.ReasonInvalidAnnotation)
	}
	if table, _, _ := e.inTable(t, 0, vip); !slices.Equal(table, []string{"b1", "b2"}) {
		t.Fatalf("a refused Service changed the table: %v", table)
	}
	if c := e.sessions(t, vip, 20); c["b1"]+c["b2"] != 20 {
		t.Fatalf("sessions went %v", c)
	}
	e.updateService(t, "web", func(s *corev1.Service) { delete(s.Annotations, kube.AnnotationScheduler) })
	deadline := time.Now().Add(15 * time.Second)
	for c := e.condition(t, "web"); c == nil || c.Status != metav1.ConditionTrue; c = e.condition(t, "web") {
		if time.Now().After(deadline) {
			t.Fatalf("condition stays %+v once the annotation is gone", c)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// longSessions starts n sessions sending every 100 ms.
func (e *kubeEnv) longSessions(t *testing.T, vip netip.Addr, n int) *lab.TCPSessions {
	t.Helper()
	s, err := lab.StartTCPSessions(context.Background(), e.l.Client.NS, netip.AddrPortFrom(vip, lab.DefaultPorts.TCP), n, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func kubeNodeJoins(t *testing.T, e *kubeEnv, vip netip.Addr) {
	long := e.longSessions(t, vip, 60)
	time.Sleep(300 * time.Millisecond)
	e.setEndpoints(t, "web", readyOn("b1"), readyOn("b2"), readyOn("b3"))
	e.waitBackends(t, 0, vip, "b1", "b2", "b3")
	if c := e.sessions(t, vip, 60); c["b3"] == 0 {
		t.Fatalf("b3 joined; new sessions went %v", c)
	}
	time.Sleep(500 * time.Millisecond)
	res := long.Stop()
	if len(res.Breaks) > 0 {
		t.Fatalf("b3 joining broke %d of %d sessions, first: %v", len(res.Breaks), len(res.Sessions), res.Breaks[0])
	}
	t.Logf("b3 joined: %d sessions ran on, 0 broke", len(res.Sessions))
}

func kubeDrain(t *testing.T, e *kubeEnv, vip netip.Addr) {
	long := e.longSessions(t, vip, 60)
	time.Sleep(300 * time.Millisecond)
	e.setEndpoints(t, "web", readyOn("b1"), lab.TerminatingOn("b2"), readyOn("b3"))
	e.waitBackends(t, 0, vip, "b1", "b3")
	if _, drained, _ := e.inTable(t, 0, vip); !slices.Equal(drained, []string{"b2"}) {
		t.Fatalf("b2 terminating: draining %v, want [b2] (in the data plane, out of the table)", drained)
	}
	if c := e.sessions(t, vip, 40); c["b2"] != 0 {
		t.Fatalf("b2 draining; new sessions went %v", c)
	}
	time.Sleep(500 * time.Millisecond)
	res := long.Stop()
	onB2 := 0
	for _, s := range res.Sessions {
		if s.Backend == "b2" {
			onB2++
		}
	}
	if len(res.Breaks) > 0 || onB2 == 0 {
		t.Fatalf("drain: %d sessions broke (first %v); %d ran on b2", len(res.Breaks), res.Breaks, onB2)
	}
	t.Logf("b2 drained: its %d sessions ran to the end", onB2)
	e.setEndpoints(t, "web", readyOn("b1"), readyOn("b3"))
	deadline := time.Now().Add(10 * time.Second)
	for _, drained, _ := e.inTable(t, 0, vip); len(drained) > 0; _, drained, _ = e.inTable(t, 0, vip) {
		if time.Now().After(deadline) {
			t.Fatalf("b2's endpoint is gone, yet %v stays in the data plane", drained)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func kubeRestart(t *testing.T, e *kubeEnv, vip netip.Addr) {
	long := e.longSessions(t, vip, 40)
	time.Sleep(300 * time.Millisecond)
	if err := e.daemons[0].Stop(); err != nil {
		t.Fatal(err)
	}
	e.start(t, 0)
	e.waitBackends(t, 0, vip, "b1", "b3")
	time.Sleep(500 * time.Millisecond)
	if res := long.Stop(); len(res.Breaks) > 0 {
		t.Fatalf("the restart broke %d of %d sessions, first: %v", len(res.Breaks), len(res.Sessions), res.Breaks[0])
	}
}

func kubeOutage(t *testing.T, e *kubeEnv, vip netip.Addr) {
	e.k.StopAPIServer(t)
	waitStatus(t, e.l, 0, "kubernetes disconnected", 15*time.Second, func(st *pb.StatusResponse) bool {
		return strings.Contains(st.GetConfig().GetSource(), "kubernetes: disconnected")
	})
	if c := e.sessions(t, vip, 40); c["b1"]+c["b3"] != 40 {
		t.Fatalf("API server down; sessions went %v", c)
	}
	e.k.StartAPIServer(t)
	waitStatus(t, e.l, 0, "kubernetes connected", 30*time.Second, func(st *pb.StatusResponse) bool {
		return strings.Contains(st.GetConfig().GetSource(), "kubernetes: connected")
	})
	e.setEndpoints(t, "web", readyOn("b1"))
	// The informers list and watch again after their back-off (up to 30 s).
	e.waitBackendsWithin(t, 45*time.Second, 0, vip, "b1")
	if c := e.sessions(t, vip, 20); c["b1"] != 20 {
		t.Fatalf("after the outage only b1 is ready; sessions went %v", c)
	}
}

func kubeDelete(t *testing.T, e *kubeEnv, vip netip.Addr) {
	if err := e.cs.CoreV1().Services(kubeNS).Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, _, found := e.inTable(t, 0, vip)
		if !found && !e.routeIn(t, 0, vip) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Service deleted; in the data plane: %v, routed: %v", found, e.routeIn(t, 0, vip))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
