package kube

import (
	"github.com/xlbproject/xlb/internal/config"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Addresses: the leader decides each Service's addresses and writes them
// to its status; every node programs what the status says (statusAddrs),
// so all compute the same tables from the same objects.

// statusAddrs are the addresses in svc's status, one per family it asks
// for, in its order; an entry of a family it does not ask for, or twice
// a family, is ignored.
func statusAddrs(svc *corev1.Service) []netip.Addr {
	have := map[bool]netip.Addr{}
	for _, in := range svc.Status.LoadBalancer.Ingress {
		a, err := netip.ParseAddr(in.IP)
		if err != nil || !a.Unmap().IsValid() {
			continue
		}
		a = a.Unmap()
		if _, dup := have[a.Is4()]; !dup {
			have[a.Is4()] = a
		}
	}
	var out []netip.Addr
	for _, f := range families(svc) {
		if a, ok := have[f == corev1.IPv4Protocol]; ok {
			out = append(out, a)
		}
	}
	return out
}

// requested are the addresses svc asks for: xlb.io/address (one, or one
// per family separated by commas), else spec.loadBalancerIP.
func requested(svc *corev1.Service) ([]netip.Addr, *Problem) {
	field, v := AnnotationAddress, svc.Annotations[AnnotationAddress]
	if v == "" {
		field, v = "spec.loadBalancerIP", svc.Spec.LoadBalancerIP
	}
	if v == "" {
		return nil, nil
	}
	var out []netip.Addr
	seen := map[bool]bool{}
	for _, s := range strings.Split(v, ",") {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil || a.Zone() != "" {
			return nil, invalid(field, "%q is not an IP address", s)
		}
		a = a.Unmap()
		if why := unicastOK(a); why != "" {
			return nil, invalid(field, "%s %s", a, why)
		}
		if seen[a.Is4()] {
			return nil, invalid(field, "%q gives two addresses of one family", v)
		}
		if !slices.Contains(families(svc), familyOf(a)) {
			return nil, invalid(field, "%s is not of the Service's spec.ipFamilies %v", a, families(svc))
		}
		seen[a.Is4()] = true
		out = append(out, a)
	}
	return out, nil
}

func familyOf(a netip.Addr) corev1.IPFamily {
	if a.Is4() {
		return corev1.IPv4Protocol
	}
	return corev1.IPv6Protocol
}

// Allocator picks free addresses from the pools, in pool order, lowest
// first; in an IPv4 prefix of /30 or wider the network and broadcast
// addresses are skipped, in IPv6 the subnet-router anycast address.
type Allocator struct {
	Pools []netip.Prefix
}

// Contains reports whether a is in a pool.
func (al *Allocator) Contains(a netip.Addr) bool {
	for _, p := range al.Pools {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Pick returns the first free address of the family (is4) that used
// does not hold.
func (al *Allocator) Pick(is4 bool, used map[netip.Addr]Key) (netip.Addr, bool) {
	for _, p := range al.Pools {
		if p.Addr().Is4() != is4 {
			continue
		}
		a := p.Addr()
		if p.Bits() < a.BitLen()-1 {
			a = a.Next() // network / subnet-router anycast
		}
		for ; a.IsValid() && p.Contains(a); a = a.Next() {
			if is4 && p.Bits() < 31 && !p.Contains(a.Next()) {
				break // broadcast
			}
			if _, taken := used[a]; !taken {
				return a, true
			}
		}
	}
	return netip.Addr{}, false
}

// assign decides svc's addresses, one per family: the requested one when
// free, else the one in its status when still in a pool and free, else a
// free one from the pools. used maps the addresses taken to their owner
// (other Services, and the file's VIPs under Key{}); assign adds svc's.
func (al *Allocator) assign(svc *corev1.Service, used map[netip.Addr]Key) ([]netip.Addr, *Problem) {
	req, prob := requested(svc)
	if prob != nil {
		return nil, prob
	}
	k := keyOf(svc)
	current := statusAddrs(svc)
	var out []netip.Addr
	for _, f := range families(svc) {
		is4 := f == corev1.IPv4Protocol
		a, ok := pickFamily(req, is4)
		if ok {
			if owner, taken := used[a]; taken && owner != k {
				return nil, &Problem{Reason: ReasonAddressInUse, Message: addrField(svc) + ": " + a.String() + " is in use by " + ownerName(owner)}
			}
		} else if c, has := pickFamily(current, is4); has && al.Contains(c) && free(used, c, k) {
			a = c
		} else if a, ok = al.Pick(is4, used); !ok {
			return nil, &Problem{Reason: ReasonNoAddress, Message: "kubernetes.address_pools: no free " + string(f) + " address"}
		}
		out = append(out, a)
	}
	for _, a := range out {
		used[a] = k
	}
	return out, nil
}

func free(used map[netip.Addr]Key, a netip.Addr, k Key) bool {
	owner, taken := used[a]
	return !taken || owner == k
}

func pickFamily(addrs []netip.Addr, is4 bool) (netip.Addr, bool) {
	for _, a := range addrs {
		if a.Is4() == is4 {
			return a, true
		}
	}
	return netip.Addr{}, false
}

func addrField(svc *corev1.Service) string {
	if svc.Annotations[AnnotationAddress] != "" {
		return AnnotationAddress
	}
	return "spec.loadBalancerIP"
}

func ownerName(k Key) string {
	if k == (Key{}) {
		return "a service of xlbd's config file"
	}
	return "Service " + k.String()
}

// unicastOK is "" for an address a Service may have: the file's rules
// (config.AddressProblem), and not link-local.
func unicastOK(a netip.Addr) string {
	if a.IsLinkLocalUnicast() {
		return "is a link-local address"
	}
	return config.AddressProblem(a)
}
