package kube

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/xlbproject/xlb/internal/config"
)

// Desired is what the Kubernetes source asks the controller to program
// beside the file's services: every served Service's xlb services, in
// the order of their Services' keys, and the health checks they name.
type Desired struct {
	Services []config.DesiredService
	Checks   map[string]config.HealthCheck
}

// model turns the objects the informers hold into Desired. It is pure:
// the same objects give the same Desired on every node. A Service's
// translation is cached and done again only when its own inputs change
// (the Service, its EndpointSlices, the nodes), so one EndpointSlice
// change costs one Service's work.
type model struct {
	base  *config.Config // the running file config: node, bgp
	class string
	cache map[Key]*entry
	nodes map[string]*Node
	gen   uint64 // changes of nodes
}

type entry struct {
	svcRV, epRV string
	nodesGen    uint64
	addrs       []netip.Addr
	baseGen     *config.Config
	// good is the last translation that passed; it stays programmed while
	// a later version of the Service is refused.
	good    *Translated
	problem *Problem
}

func newModel(base *config.Config, class string) *model {
	return &model{base: base, class: class, cache: map[Key]*entry{}}
}

// serves reports whether svc is xlb's: type LoadBalancer, our class.
func serves(svc *corev1.Service, class string) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.Spec.LoadBalancerClass != nil && *svc.Spec.LoadBalancerClass == class
}

// setNodes takes the nodes; it reports whether what xlb reads of them
// changed.
func (m *model) setNodes(nodes []*corev1.Node) bool {
	next := make(map[string]*Node, len(nodes))
	for _, n := range nodes {
		v := nodeOf(n)
		next[n.Name] = &v
	}
	if maps.EqualFunc(next, m.nodes, func(a, b *Node) bool {
		return a.Usable == b.Usable && slices.Equal(a.Addrs, b.Addrs)
	}) && m.nodes != nil {
		return false
	}
	m.nodes = next
	m.gen++
	return true
}

// byAge sorts Services oldest first, then by key: the order addresses
// are claimed in, so an older Service keeps an address a newer one asks for.
func byAge(a, b *corev1.Service) int {
	if c := a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
}

// build computes Desired from the served Services (any order) and their
// EndpointSlices (slicesOf); fileVIPs are the file services' addresses,
// which no Service may have. changed is false when nothing programmed
// differs from the last build. problems are the Services not programmed
// as asked, and why.
func (m *model) build(services []*corev1.Service, slicesOf func(Key) []*discoveryv1.EndpointSlice, fileVIPs map[netip.Addr]bool) (d Desired, changed bool, problems map[Key]*Problem) {
	svcs := slices.Clone(services)
	slices.SortFunc(svcs, byAge)
	problems = map[Key]*Problem{}
	claimed := map[netip.Addr]Key{}
	seen := make(map[Key]bool, len(svcs))
	for _, svc := range svcs {
		if !serves(svc, m.class) {
			continue
		}
		k := keyOf(svc)
		seen[k] = true
		addrs := m.claim(svc, claimed, fileVIPs, problems)
		if m.update(k, svc, addrs, slicesOf(k)) {
			changed = true
		}
		if e := m.cache[k]; e.problem != nil && problems[k] == nil {
			problems[k] = e.problem
		}
	}
	for k := range m.cache {
		if !seen[k] {
			delete(m.cache, k)
			changed = true
		}
	}
	return m.desired(), changed, problems
}

// claim returns the addresses of svc's status that are its own: not
// claimed by an older Service, not a file service's VIP.
func (m *model) claim(svc *corev1.Service, claimed map[netip.Addr]Key, file map[netip.Addr]bool, problems map[Key]*Problem) []netip.Addr {
	k := keyOf(svc)
	var out []netip.Addr
	for _, a := range statusAddrs(svc) {
		if owner, taken := claimed[a]; taken {
			problems[k] = &Problem{Reason: ReasonAddressInUse, Message: "status.loadBalancer.ingress: " + a.String() + " is in use by " + ownerName(owner)}
			continue
		}
		if file[a] {
			problems[k] = &Problem{Reason: ReasonAddressInUse, Message: "status.loadBalancer.ingress: " + a.String() + " is in use by " + ownerName(Key{})}
			continue
		}
		claimed[a] = k
		out = append(out, a)
	}
	return out
}

// update translates svc again when one of its inputs changed; it
// reports whether what is programmed for it changed.
func (m *model) update(k Key, svc *corev1.Service, addrs []netip.Addr, eps []*discoveryv1.EndpointSlice) bool {
	epRV := sliceVersions(eps)
	e := m.cache[k]
	if e != nil && e.svcRV == svc.ResourceVersion && e.epRV == epRV && e.nodesGen == m.gen &&
		slices.Equal(e.addrs, addrs) && e.baseGen == m.base {
		return false
	}
	if e == nil {
		e = &entry{}
		m.cache[k] = e
	}
	e.svcRV, e.epRV, e.nodesGen, e.addrs, e.baseGen = svc.ResourceVersion, epRV, m.gen, addrs, m.base
	t, prob := translate(m.base, svc, addrs, m.nodes, eps)
	e.problem = prob
	if prob != nil {
		return false // the last good translation stays
	}
	e.good = &t
	return true
}

func sliceVersions(eps []*discoveryv1.EndpointSlice) string {
	var b strings.Builder
	for _, s := range eps {
		b.WriteString(s.Name)
		b.WriteByte('@')
		b.WriteString(s.ResourceVersion)
		b.WriteByte(',')
	}
	return b.String()
}

// desired concatenates the good translations in key order.
func (m *model) desired() Desired {
	keys := slices.Collect(maps.Keys(m.cache))
	slices.SortFunc(keys, func(a, b Key) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	d := Desired{Checks: map[string]config.HealthCheck{}}
	for _, k := range keys {
		if g := m.cache[k].good; g != nil {
			d.Services = append(d.Services, g.Services...)
			maps.Copy(d.Checks, g.Checks)
		}
	}
	return d
}
