package kube

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestAllocatorPick(t *testing.T) {
	al := &Allocator{Pools: []netip.Prefix{netip.MustParsePrefix("10.250.0.0/30"), netip.MustParsePrefix("10.251.0.7/32"),
		netip.MustParsePrefix("fd00:250::/127")}}
	used := map[netip.Addr]Key{}
	var got []string
	for {
		a, ok := al.Pick(true, used)
		if !ok {
			break
		}
		used[a] = Key{"x", a.String()}
		got = append(got, a.String())
	}
	// /30: network and broadcast skipped; /32: the address itself.
	if want := "10.250.0.1 10.250.0.2 10.251.0.7"; strings.Join(got, " ") != want {
		t.Errorf("picked %v, want %s", got, want)
	}
	if a, ok := al.Pick(false, used); !ok || a != netip.MustParseAddr("fd00:250::") {
		t.Errorf("IPv6 /127: picked %v %v, want fd00:250:: (both addresses usable)", a, ok)
	}
}

func TestAssign(t *testing.T) {
	al := &Allocator{Pools: []netip.Prefix{netip.MustParsePrefix("10.250.0.0/29"), netip.MustParsePrefix("fd00:250::/125")}}
	fileVIP := netip.MustParseAddr("10.250.0.1")
	used := map[netip.Addr]Key{fileVIP: {}}
	dual := func(s *corev1.Service) {
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
	}
	ask := func(v string) func(*corev1.Service) {
		return func(s *corev1.Service) { s.Annotations[AnnotationAddress] = v }
	}
	steps := []struct {
		svc          *corev1.Service
		want, reason string
	}{
		{lbService("a"), "10.250.0.2", ""},                                              // the file's VIP skipped
		{lbService("b", dual), "fd00:250::1 10.250.0.3", ""},                            // one per family, in the Service's order
		{lbService("c", withStatus("10.250.0.6")), "10.250.0.6", ""},                    // its status kept
		{lbService("d", withStatus("10.250.0.6")), "10.250.0.4", ""},                    // the status is c's: another
		{lbService("e", ask("10.250.0.2")), "", ReasonAddressInUse},                     // a's
		{lbService("f", ask("10.250.0.1")), "", ReasonAddressInUse},                     // the file's
		{lbService("g", ask("192.0.2.10"), withStatus("10.250.0.5")), "192.0.2.10", ""}, // asked for, outside the pools: given
		{lbService("h", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "10.250.0.5" }), "10.250.0.5", ""},
		{lbService("i", ask("fd00::1")), "", ReasonInvalidAnnotation}, // not of its family
		{lbService("j"), "", ReasonNoAddress},                         // 10.250.0.0/29 is full
	}
	for _, st := range steps {
		addrs, prob := al.assign(st.svc, used)
		var reason string
		if prob != nil {
			reason = prob.Reason
		}
		if got := joinAddrs(addrs); got != strings.ReplaceAll(st.want, " ", ", ") || reason != st.reason {
			t.Errorf("%s: got %q %v, want %q %q", st.svc.Name, got, prob, st.want, st.reason)
		}
	}
	if p, _ := al.assign(lbService("e", ask("10.250.0.2")), used); p != nil {
		t.Error("assign is not idempotent")
	}
}

func TestModelBuild(t *testing.T) {
	m := newModel(baseConfig(t), class)
	m.setNodes([]*corev1.Node{node("a", true, "10.0.1.1"), node("b", true, "10.0.1.2")})
	eps := map[Key][]*discoveryv1.EndpointSlice{}
	slicesOf := func(k Key) []*discoveryv1.EndpointSlice { return eps[k] }
	older := lbService("old", withStatus("10.250.0.2"), local(30001))
	newer := lbService("new", withStatus("10.250.0.2"), func(s *corev1.Service) {
		s.CreationTimestamp = metav1.NewTime(time.Unix(2000, 0))
	})
	other := lbService("other", withStatus("10.250.0.3"), func(s *corev1.Service) { c := "other.io/lb"; s.Spec.LoadBalancerClass = &c })
	d, changed, problems := m.build([]*corev1.Service{newer, older, other}, slicesOf, nil)
	if !changed || len(d.Services) != 1 || d.Services[0].Name != "k8s.default.old.80.tcp" {
		t.Fatalf("build = %+v (changed %v)", d.Services, changed)
	}
	if p := problems[Key{"default", "new"}]; p == nil || p.Reason != ReasonAddressInUse {
		t.Errorf("the newer Service's problem = %v, want %s", p, ReasonAddressInUse)
	}
	if len(d.Services[0].Pools[0].Backends) != 0 {
		t.Errorf("Local without endpoints: backends %v", d.Services[0].Pools[0].Backends)
	}
	if _, changed, _ := m.build([]*corev1.Service{newer, older, other}, slicesOf, nil); changed {
		t.Error("a build of the same objects changed something")
	}
	eps[Key{"default", "old"}] = []*discoveryv1.EndpointSlice{slice("old", "old-1", ep{node: "b", ready: true, serving: true})}
	d, changed, _ = m.build([]*corev1.Service{newer, older}, slicesOf, nil)
	if !changed || addrsOf(d.Services[0].Pools[0].Backends) != "10.0.1.2" {
		t.Fatalf("after an EndpointSlice: %v (changed %v)", d.Services, changed)
	}

	bad := older.DeepCopy()
	bad.ResourceVersion = "2"
	bad.Annotations[AnnotationScheduler] = "nope"
	d, _, problems = m.build([]*corev1.Service{bad}, slicesOf, nil)
	if p := problems[Key{"default", "old"}]; p == nil || p.Reason != ReasonInvalidAnnotation {
		t.Errorf("problem = %v", p)
	}
	if len(d.Services) != 1 || addrsOf(d.Services[0].Pools[0].Backends) != "10.0.1.2" {
		t.Errorf("a refused version must leave the last good one programmed: %v", d.Services)
	}

	file := map[netip.Addr]bool{netip.MustParseAddr("10.250.0.2"): true}
	d, _, problems = m.build([]*corev1.Service{older}, slicesOf, file)
	if len(d.Services) != 0 || problems[Key{"default", "old"}] == nil {
		t.Errorf("a VIP the file has: services %v, problems %v", d.Services, problems)
	}
	if d, changed, _ := m.build(nil, slicesOf, nil); !changed || len(d.Services) != 0 {
		t.Errorf("deleted: %v changed %v", d.Services, changed)
	}
}
