package kube

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/xlbproject/xlb/internal/config"
)

// LabelExcludeFromLB marks a node that external load balancers must not
// send to (the label Kubernetes defines for it); such a node is never a
// backend.
const LabelExcludeFromLB = "node.kubernetes.io/exclude-from-external-load-balancers"

// Node is what xlb reads of a Kubernetes Node: its name, its InternalIP
// addresses and whether it is Ready and may take load-balanced traffic.
type Node struct {
	Name   string
	Addrs  []netip.Addr // InternalIP, in the Node's order
	Usable bool         // Ready condition True, not excluded by label
}

// nodeOf reads n.
func nodeOf(n *corev1.Node) Node {
	out := Node{Name: n.Name}
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil && config.AddressProblem(ip.Unmap()) == "" {
			out.Addrs = append(out.Addrs, ip.Unmap())
		}
	}
	ready := false
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = c.Status == corev1.ConditionTrue
		}
	}
	_, excluded := n.Labels[LabelExcludeFromLB]
	out.Usable = ready && !excluded
	return out
}

// addrOf returns n's first InternalIP of a's family.
func (n *Node) addrOf(is4 bool) (netip.Addr, bool) {
	for _, a := range n.Addrs {
		if a.Is4() == is4 {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// endpointNodes reads a Service's EndpointSlices: the nodes with a ready
// endpoint, and those whose endpoints are all serving but terminating
// (their node drains: tracked flows stay, new ones go elsewhere).
func endpointNodes(slices []*discoveryv1.EndpointSlice) (ready, draining map[string]bool) {
	ready, draining = map[string]bool{}, map[string]bool{}
	for _, s := range slices {
		if s.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		for _, e := range s.Endpoints {
			if e.NodeName == nil || *e.NodeName == "" {
				continue
			}
			c := e.Conditions
			terminating := c.Terminating != nil && *c.Terminating
			// An unset ready means ready (the API's convention), unless
			// the endpoint is terminating.
			isReady := (c.Ready == nil && !terminating) || (c.Ready != nil && *c.Ready)
			serving := c.Serving == nil && isReady || c.Serving != nil && *c.Serving
			switch {
			case isReady:
				ready[*e.NodeName] = true
			case serving && terminating:
				draining[*e.NodeName] = true
			}
		}
	}
	for n := range ready {
		delete(draining, n)
	}
	return ready, draining
}

// backends are the nodes that serve svc for one address family, sorted
// by address: with externalTrafficPolicy Local the nodes with a ready
// endpoint (and, draining, those with only terminating ones); with
// Cluster every usable node. A node without an InternalIP of the family
// is left out.
func backends(svc *corev1.Service, nodes map[string]*Node, eps []*discoveryv1.EndpointSlice, is4 bool) []config.Backend {
	var out []config.Backend
	add := func(n *Node, drain bool) {
		if a, ok := n.addrOf(is4); ok {
			out = append(out, config.Backend{Addr: a, Weight: config.DefaultWeight, Drain: drain})
		}
	}
	if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		ready, draining := endpointNodes(eps)
		for name, n := range nodes {
			if ready[name] || draining[name] {
				add(n, !ready[name])
			}
		}
	} else {
		for _, n := range nodes {
			if n.Usable {
				add(n, false)
			}
		}
	}
	slices.SortFunc(out, func(a, b config.Backend) int { return a.Addr.Compare(b.Addr) })
	return out
}

// Health checks of the Local policy's nodes: kube-proxy answers
// /healthz on the Service's healthCheckNodePort with 200 while the node
// has a ready endpoint of it, 503 otherwise.
const (
	checkPath     = "/healthz"
	checkInterval = 2e9 // 2s
	checkTimeout  = 1e9
	checkRise     = 1
	checkFall     = 2
)

// healthCheck is the check of svc's nodes: nil with the Cluster policy,
// whose nodes are followed by their Ready condition (kubelet's
// heartbeat), as kube-proxy's Cluster routing reaches any endpoint.
func healthCheck(svc *corev1.Service, name string) *config.HealthCheck {
	if svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal || svc.Spec.HealthCheckNodePort == 0 {
		return nil
	}
	return &config.HealthCheck{Name: name, Type: config.CheckHTTP, Port: uint16(svc.Spec.HealthCheckNodePort),
		Path: checkPath, ExpectStatus: 200, Interval: checkInterval, Timeout: checkTimeout, Rise: checkRise, Fall: checkFall}
}
