package config

import "net/netip"

// The kubernetes section: xlbd also serves the LoadBalancer Services of a
// cluster (package kube), next to the file's services.

// DefaultLoadBalancerClass is the spec.loadBalancerClass xlbd serves
// when the section does not name one.
const DefaultLoadBalancerClass = "xlb.io/l4"

// Kubernetes configures the Kubernetes source.
type Kubernetes struct {
	// Kubeconfig is the kubeconfig file; "" means in-cluster (the pod's
	// service account).
	Kubeconfig string
	// LoadBalancerClass is the spec.loadBalancerClass of the Services
	// served; others are left to their own controller.
	LoadBalancerClass string
	// AddressPools are the prefixes LoadBalancer addresses are allocated
	// from, IPv4 and IPv6, in order; none overlap.
	AddressPools []netip.Prefix
}

func (k *Kubernetes) clone() *Kubernetes {
	c := *k
	c.AddressPools = append([]netip.Prefix(nil), k.AddressPools...)
	return &c
}

var kubernetesKeys = newSection(false,
	key[Kubernetes]{name: "kubeconfig", v: textOf(func(k *Kubernetes) *string { return &k.Kubeconfig }),
		defDoc: "in-cluster", doc: "The kubeconfig file xlbd reads the cluster from; absent: the pod's service account."},
	key[Kubernetes]{name: "load_balancer_class", v: textOf(func(k *Kubernetes) *string { return &k.LoadBalancerClass }),
		derive: func(k *Kubernetes) error { k.LoadBalancerClass = DefaultLoadBalancerClass; return nil },
		defDoc: DefaultLoadBalancerClass,
		doc:    "The spec.loadBalancerClass of the LoadBalancer Services xlb serves."},
	key[Kubernetes]{name: "address_pools", v: prefixesOf(func(k *Kubernetes) *[]netip.Prefix { return &k.AddressPools }),
		doc: "CIDRs (IPv4 and IPv6) the Services' addresses are allocated from, in order; a Service may also ask for one (spec.loadBalancerIP, xlb.io/address)."},
)

// prefixesOf is a list of CIDRs in their canonical form (no host bits).
func prefixesOf[T any](at func(*T) *[]netip.Prefix) value[T] {
	return list[T, netip.Prefix]{plain: plain[T, []netip.Prefix]{at: at}, typ: "CIDRs",
		read: (*decoder).prefix, show: netip.Prefix.String}
}

// prefix decodes a CIDR with no bits set past its length.
func (d *decoder) prefix(n *ynode, path string) (netip.Prefix, bool) {
	s, ok := d.scalar(n, path, "a CIDR")
	if !ok {
		return netip.Prefix{}, false
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		d.c.at(pos(n), path, ErrInvalid, "%q is not a CIDR (ADDRESS/LENGTH)", s)
		return netip.Prefix{}, false
	}
	if p != p.Masked() {
		d.c.at(pos(n), path, ErrInvalid, "%q has bits set past its length: write %s", s, p.Masked())
		return netip.Prefix{}, false
	}
	return p, true
}

// validateKubernetes checks the section's pools: unicast, not
// overlapping each other.
func validateKubernetes(k *Kubernetes, c *collector) {
	if k == nil {
		return
	}
	if k.LoadBalancerClass == "" {
		c.errf(join(kKubernetes, "load_balancer_class"), ErrInvalid, "must not be empty (default %s)", DefaultLoadBalancerClass)
	}
	for i, p := range k.AddressPools {
		path := index(join(kKubernetes, "address_pools"), i)
		if !p.IsValid() || p != p.Masked() {
			c.errf(path, ErrInvalid, "%s is not a CIDR without host bits", p)
			continue
		}
		if a := p.Addr(); a.IsMulticast() || a.IsLoopback() || a.Is4In6() || p.Bits() == 0 {
			c.errf(path, ErrInvalid, "%s is not a range of unicast addresses", p)
			continue
		}
		for j := range i {
			if q := k.AddressPools[j]; q.Overlaps(p) {
				c.errf(path, ErrInvalid, "%s overlaps address_pools[%d] (%s)", p, j, q)
			}
		}
	}
}

// Contains reports whether a is in one of the address pools.
func (k *Kubernetes) Contains(a netip.Addr) bool {
	for _, p := range k.AddressPools {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// AddressProblem returns why a cannot be a VIP or backend address, or ""
// when it can (the rules of the file's addresses, for addresses that come
// from elsewhere).
func AddressProblem(a netip.Addr) string {
	if !a.IsValid() {
		return "is not an IP address"
	}
	return unicastProblem(a)
}

// SchedulerNames lists the schedulers as the file spells them.
func SchedulerNames() []string {
	out := make([]string, len(schedulerNames))
	for i, n := range schedulerNames {
		out[i] = n.name
	}
	return out
}

// ParseMethod returns the forwarding method named name, as the file
// spells it (gre, ipip, gue, dr, nat).
func ParseMethod(name string) (Encap, bool) {
	for _, n := range encapNames {
		if n.name == name {
			return n.val, true
		}
	}
	return 0, false
}
