package kube

import (
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/xlbproject/xlb/internal/config"
)

// Key names a Service: namespace and name.
type Key struct{ Namespace, Name string }

func (k Key) String() string { return k.Namespace + "/" + k.Name }

func keyOf(svc *corev1.Service) Key { return Key{svc.Namespace, svc.Name} }

// Translated is one Service as xlb services: one per address, port and
// protocol, and the health check of its nodes, if any.
type Translated struct {
	Services []config.DesiredService
	Checks   map[string]config.HealthCheck
}

// translate turns svc, served on addrs, into xlb services whose backends
// are its nodes (backends). It builds the file's form of them and
// validates it with the file's rules against the running node (base), so
// what comes from the API is held to what a file is held to; a failure is
// a Problem naming the Service's field, and nothing of svc is returned.
func translate(base *config.Config, svc *corev1.Service, addrs []netip.Addr, nodes map[string]*Node, eps []*discoveryv1.EndpointSlice) (Translated, *Problem) {
	st, prob := readSettings(svc)
	if prob != nil {
		return Translated{}, prob
	}
	prefix := namePrefix(keyOf(svc))
	cfg := &config.Config{Node: base.Node, BGP: base.BGP}
	var hcName string
	if hc := healthCheck(svc, prefix); hc != nil {
		cfg.HealthChecks = []config.HealthCheck{*hc}
		hcName = hc.Name
	}
	empty := map[string]bool{}
	for _, a := range addrs {
		pool := prefix + "-v6"
		if a.Is4() {
			pool = prefix + "-v4"
		}
		if !hasPool(cfg.Pools, pool) {
			bs := backends(svc, nodes, eps, a.Is4())
			if len(bs) == 0 {
				// Validated with a stand-in, programmed with none: the
				// service drops new flows until a node serves it.
				empty[pool] = true
				bs = []config.Backend{{Addr: standIn(a.Is4()), Weight: config.DefaultWeight}}
			}
			cfg.Pools = append(cfg.Pools, config.Pool{Name: pool, Backends: bs, HealthCheck: hcName})
		}
		for _, p := range svc.Spec.Ports {
			s, prob := xlbService(svc, st, prefix, a, pool, p)
			if prob != nil {
				return Translated{}, prob
			}
			cfg.Services = append(cfg.Services, s)
		}
	}
	if err := cfg.Validate(); err != nil {
		return Translated{}, problemOf(err)
	}
	d := cfg.Desired()
	for i := range d.Services {
		for j := range d.Services[i].Pools {
			p := &d.Services[i].Pools[j]
			if empty[p.Name] {
				p.Backends = nil
			}
			for k := range p.Backends {
				// A draining node's check fails (kube-proxy answers 503
				// without a ready endpoint); unchecked, its tracked flows
				// keep going until its endpoints are gone.
				if p.Backends[k].Drain {
					p.Backends[k].HealthCheck = ""
				}
			}
		}
	}
	return Translated{Services: d.Services, Checks: d.HealthChecks}, nil
}

// standIn is the address an empty pool is validated with (documentation
// ranges, RFC 5737 and RFC 3849).
func standIn(is4 bool) netip.Addr {
	if is4 {
		return netip.MustParseAddr("192.0.2.1")
	}
	return netip.MustParseAddr("2001:db8::1")
}

func hasPool(pools []config.Pool, name string) bool {
	for _, p := range pools {
		if p.Name == name {
			return true
		}
	}
	return false
}

// xlbService is the file's service for one address and port of svc.
func xlbService(svc *corev1.Service, st settings, prefix string, a netip.Addr, pool string, p corev1.ServicePort) (config.Service, *Problem) {
	var proto config.Proto
	switch p.Protocol {
	case corev1.ProtocolTCP, "":
		proto = config.ProtoTCP
	case corev1.ProtocolUDP:
		proto = config.ProtoUDP
	default:
		return config.Service{}, invalid("spec.ports["+portName(p)+"].protocol", "%s is not served (TCP and UDP are)", p.Protocol)
	}
	s := config.Service{
		Name: fmt.Sprintf("%s.%d.%s%s", prefix, p.Port, proto, map[bool]string{true: "", false: "6"}[a.Is4()]),
		VIP:  a, Port: uint16(p.Port), Proto: proto, Pools: []string{pool},
		Scheduler: st.sched, TableSize: st.tableSize, Encap: st.method,
	}
	if st.persistence != nil {
		pc := *st.persistence
		s.Persistence = &pc
	}
	return s, nil
}

func portName(p corev1.ServicePort) string {
	if p.Name != "" {
		return p.Name
	}
	return fmt.Sprint(p.Port)
}

// namePrefix is the xlb name of a Service's services and pools:
// k8s.NAMESPACE.NAME (neither has a dot), within the file's length limit
// once a port and protocol are added (.80.tcp, .80.tcp6 for IPv6) (a long one is cut and given a
// hash of the whole).
func namePrefix(k Key) string {
	n := "k8s." + k.Namespace + "." + k.Name
	if len(n) <= config.MaxNameLen-12 {
		return n
	}
	h := fnv.New32a()
	h.Write([]byte(n))
	return fmt.Sprintf("%s-%08x", n[:config.MaxNameLen-12-9], h.Sum32())
}

// fieldNames map the file's fields to the Service's, for messages.
var fieldNames = []struct{ suffix, field string }{
	{".table_size", AnnotationTableSize},
	{".scheduler", AnnotationScheduler},
	{".method", AnnotationMethod},
	{".persistence.netmask6", AnnotationPersistenceNetmask},
	{".persistence.netmask", AnnotationPersistenceNetmask},
	{".persistence", "spec.sessionAffinity"},
	{".vip", "status.loadBalancer.ingress"},
	{".source_netmask", AnnotationScheduler},
}

// problemOf turns a validation error into a Problem naming the Service's
// fields (the file's names for what only xlbd's config holds).
func problemOf(err error) *Problem {
	var list config.ErrorList
	if !errors.As(err, &list) || len(list) == 0 {
		return &Problem{Reason: ReasonRefused, Message: err.Error()}
	}
	e := list[0]
	field := e.Field
	switch {
	case strings.HasPrefix(field, "pools."):
		field = "nodes (InternalIP)"
	case strings.HasPrefix(field, "node.") || strings.HasPrefix(field, "bgp"):
		field = "xlbd's " + field
	default:
		for _, f := range fieldNames {
			if strings.HasSuffix(field, f.suffix) || strings.Contains(field, f.suffix+".") {
				field = f.field
				break
			}
		}
	}
	return invalid(field, "%s", e.Msg)
}
