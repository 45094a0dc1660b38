package kube

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/xlbproject/xlb/internal/config"
)

const class = config.DefaultLoadBalancerClass

func baseConfig(t testing.TB) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte("node: {name: n1, interface: eth0, address: 10.0.0.11, address6: fd00::11}\n"+
		"kubernetes: {address_pools: [10.250.0.0/29, \"fd00:250::/125\"]}\n"), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func lbService(name string, mod ...func(*corev1.Service)) *corev1.Service {
	cl := class
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, ResourceVersion: "1", Annotations: map[string]string{},
			CreationTimestamp: metav1.NewTime(time.Unix(1000, 0))},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &cl,
			Ports:                 []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster},
	}
	for _, m := range mod {
		m(s)
	}
	return s
}

func withStatus(addrs ...string) func(*corev1.Service) {
	return func(s *corev1.Service) {
		for _, a := range addrs {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: a})
		}
	}
}

func local(hcPort int32) func(*corev1.Service) {
	return func(s *corev1.Service) {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = hcPort
	}
}

func node(name string, ready bool, addrs ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}
	for _, a := range addrs {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
	}
	return n
}

type ep struct {
	node                        string
	ready, serving, terminating bool
}

func slice(svc, name string, eps ...ep) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, ResourceVersion: "1",
		Labels: map[string]string{discoveryv1.LabelServiceName: svc}}, AddressType: discoveryv1.AddressTypeIPv4}
	for _, e := range eps {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.244.0.1"}, NodeName: &e.node,
			Conditions: discoveryv1.EndpointConditions{Ready: &e.ready, Serving: &e.serving, Terminating: &e.terminating}})
	}
	return s
}

func nodeMap(ns ...*corev1.Node) map[string]*Node {
	m := newModel(nil, class)
	m.setNodes(ns)
	return m.nodes
}

func addrsOf(bs []config.Backend) string {
	var s []string
	for _, b := range bs {
		x := b.Addr.String()
		if b.Drain {
			x += "(drain)"
		}
		s = append(s, x)
	}
	return strings.Join(s, " ")
}

func TestBackends(t *testing.T) {
	nodes := nodeMap(node("a", true, "10.0.1.1", "fd00:1::1"), node("b", true, "10.0.1.2"), node("c", false, "10.0.1.3"),
		node("d", true, "10.0.1.4"))
	eps := []*discoveryv1.EndpointSlice{slice("web", "web-1",
		ep{node: "a", ready: true, serving: true},
		ep{node: "b", serving: true, terminating: true},  // draining
		ep{node: "c", ready: true, serving: true},        // ready endpoint on a NotReady node: the endpoint decides
		ep{node: "d", serving: false, terminating: true}, // gone for good
	)}
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		is4  bool
		want string
	}{
		{"cluster: every ready node", lbService("web"), true, "10.0.1.1 10.0.1.2 10.0.1.4"},
		{"cluster, IPv6: nodes with an IPv6 InternalIP", lbService("web"), false, "fd00:1::1"},
		{"local: ready endpoints, terminating ones drain", lbService("web", local(30000)), true, "10.0.1.1 10.0.1.2(drain) 10.0.1.3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := addrsOf(backends(tc.svc, nodes, eps, tc.is4)); got != tc.want {
				t.Errorf("backends = %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("a node with ready and terminating endpoints is not draining", func(t *testing.T) {
		eps := []*discoveryv1.EndpointSlice{slice("web", "web-1", ep{node: "a", ready: true, serving: true}),
			slice("web", "web-2", ep{node: "a", serving: true, terminating: true})}
		if got := addrsOf(backends(lbService("web", local(1)), nodes, eps, true)); got != "10.0.1.1" {
			t.Errorf("backends = %q", got)
		}
	})
	t.Run("excluded by label", func(t *testing.T) {
		n := node("x", true, "10.0.1.9")
		n.Labels = map[string]string{LabelExcludeFromLB: ""}
		if got := addrsOf(backends(lbService("web"), nodeMap(n), nil, true)); got != "" {
			t.Errorf("backends = %q, want none", got)
		}
	})
}

func TestTranslate(t *testing.T) {
	base := baseConfig(t)
	nodes := nodeMap(node("a", true, "10.0.1.1", "fd00:1::1"), node("b", true, "10.0.1.2", "fd00:1::2"))
	v4, v6 := netip.MustParseAddr("10.250.0.1"), netip.MustParseAddr("fd00:250::1")
	svc := lbService("web", local(31000), func(s *corev1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP})
		s.Annotations[AnnotationScheduler] = "wrr"
		s.Annotations[AnnotationMethod] = "ipip"
		s.Annotations[AnnotationTableSize] = "251"
		s.Annotations[AnnotationPersistenceNetmask] = "24,64"
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		sec := int32(600)
		s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &sec}}
	})
	eps := []*discoveryv1.EndpointSlice{slice("web", "web-1", ep{node: "b", ready: true, serving: true})}
	tr, prob := translate(base, svc, []netip.Addr{v4, v6}, nodes, eps)
	if prob != nil {
		t.Fatal(prob)
	}
	if len(tr.Services) != 4 {
		t.Fatalf("%d services, want 4 (2 addresses x 2 ports)", len(tr.Services))
	}
	s := tr.Services[1]
	if s.VIP != v4 || s.Port != 53 || s.Proto != config.ProtoUDP || s.Name != "k8s.default.web.53.udp" {
		t.Errorf("service 1 = %s %s:%d/%v", s.Name, s.VIP, s.Port, s.Proto)
	}
	wrr, _ := config.ParseScheduler("wrr")
	if s.Scheduler != wrr || s.Encap != config.EncapIPIP || s.TableSize != 251 ||
		s.Persistence.Timeout != 600*time.Second || s.Persistence.Netmask != 24 || s.Persistence.Netmask6 != 64 {
		t.Errorf("settings = %+v", s)
	}
	if got := addrsOf(s.Pools[0].Backends); got != "10.0.1.2" || s.Pools[0].Backends[0].HealthCheck != "k8s.default.web" {
		t.Errorf("backends = %q (check %q)", got, s.Pools[0].Backends[0].HealthCheck)
	}
	if got := addrsOf(tr.Services[2].Pools[0].Backends); got != "fd00:1::2" {
		t.Errorf("IPv6 backends = %q", got)
	}
	hc := tr.Checks["k8s.default.web"]
	if hc.Type != config.CheckHTTP || hc.Port != 31000 || hc.Path != "/healthz" {
		t.Errorf("check = %+v", hc)
	}

	t.Run("a draining node is not health-checked", func(t *testing.T) {
		eps := []*discoveryv1.EndpointSlice{slice("web", "web-1", ep{node: "a", ready: true, serving: true},
			ep{node: "b", serving: true, terminating: true})}
		tr, prob := translate(base, lbService("web", local(31000)), []netip.Addr{v4}, nodes, eps)
		if prob != nil {
			t.Fatal(prob)
		}
		bs := tr.Services[0].Pools[0].Backends
		if len(bs) != 2 || bs[0].HealthCheck == "" || !bs[1].Drain || bs[1].HealthCheck != "" {
			t.Fatalf("backends = %+v", bs)
		}
	})
	t.Run("no ready endpoint: programmed without backends", func(t *testing.T) {
		tr, prob := translate(base, lbService("web", local(31000)), []netip.Addr{v4}, nodes, nil)
		if prob != nil || len(tr.Services) != 1 || len(tr.Services[0].Pools[0].Backends) != 0 {
			t.Fatalf("got %+v, %v", tr, prob)
		}
	})
	t.Run("no address yet: nothing", func(t *testing.T) {
		tr, prob := translate(base, lbService("web"), nil, nodes, nil)
		if prob != nil || len(tr.Services) != 0 {
			t.Fatalf("got %+v, %v", tr, prob)
		}
	})
}

func TestTranslateRefuses(t *testing.T) {
	base := baseConfig(t)
	nodes := nodeMap(node("a", true, "10.0.1.1"), node("b", true, "10.0.1.2"), node("c", true, "10.0.1.3"))
	v4 := []netip.Addr{netip.MustParseAddr("10.250.0.1")}
	ann := func(k, v string) func(*corev1.Service) { return func(s *corev1.Service) { s.Annotations[k] = v } }
	for _, tc := range []struct {
		name         string
		svc          *corev1.Service
		reason, want string
	}{
		{"scheduler", lbService("w", ann(AnnotationScheduler, "fastest")), ReasonInvalidAnnotation, "xlb.io/scheduler: \"fastest\" is not a scheduler (maglev"},
		{"method", lbService("w", ann(AnnotationMethod, "nat")), ReasonInvalidAnnotation, "xlb.io/method: \"nat\" is not a method (gre, ipip, gue, dr)"},
		{"table size not a number", lbService("w", ann(AnnotationTableSize, "big")), ReasonInvalidAnnotation, "xlb.io/table-size: \"big\" is not a whole number"},
		{"table size not prime", lbService("w", ann(AnnotationTableSize, "100")), ReasonInvalidAnnotation, "xlb.io/table-size: "},
		{"table size below the nodes", lbService("w", ann(AnnotationTableSize, "2")), ReasonInvalidAnnotation, "xlb.io/table-size: "},
		{"netmask without affinity", lbService("w", ann(AnnotationPersistenceNetmask, "24")), ReasonInvalidAnnotation, "needs spec.sessionAffinity: ClientIP"},
		{"netmask too long", lbService("w", ann(AnnotationPersistenceNetmask, "33"), func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		}), ReasonInvalidAnnotation, "IPv4 lengths are 1..32"},
		{"SCTP", lbService("w", func(s *corev1.Service) { s.Spec.Ports[0].Protocol = corev1.ProtocolSCTP }), ReasonInvalidSpec, "spec.ports[http].protocol: SCTP is not served"},
		{"affinity timeout", lbService("w", func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			sec := int32(86400)
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &sec}}
		}), ReasonInvalidSpec, "spec.sessionAffinityConfig.clientIP.timeoutSeconds: 86400 is outside 1..14400"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, prob := translate(base, tc.svc, v4, nodes, nil)
			if prob == nil {
				t.Fatalf("accepted: %+v", tr)
			}
			if prob.Reason != tc.reason || !strings.Contains(prob.Message, tc.want) {
				t.Fatalf("problem %s: %s, want %s containing %q", prob.Reason, prob.Message, tc.reason, tc.want)
			}
		})
	}
}
