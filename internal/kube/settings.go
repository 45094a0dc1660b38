package kube

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/xlbproject/xlb/internal/config"
)

// The annotations a Service tunes its xlb services with (IPVS semantics
// per Service), and the Service fields read.
const (
	AnnotationAddress            = "xlb.io/address"
	AnnotationScheduler          = "xlb.io/scheduler"
	AnnotationMethod             = "xlb.io/method"
	AnnotationTableSize          = "xlb.io/table-size"
	AnnotationPersistenceNetmask = "xlb.io/persistence-netmask"
)

// DefaultTableSize is a Service's Maglev table size without
// xlb.io/table-size: smaller than the file's default (65537), as a
// cluster has many Services and each has its table (4 bytes a slot);
// 16381 slots keep 100 nodes within about 1% of an even share.
const DefaultTableSize = 16381

// Problem is why a Service is not served as asked: Reason is the Event's
// and the condition's reason (CamelCase), Message names the field.
type Problem struct {
	Reason, Message string
}

func (p *Problem) Error() string { return p.Reason + ": " + p.Message }

// Reasons of Problems.
const (
	ReasonInvalidAnnotation = "InvalidAnnotation"
	ReasonInvalidSpec       = "InvalidSpec"
	ReasonAddressInUse      = "AddressInUse"
	ReasonNoAddress         = "NoAddressAvailable"
	ReasonRefused           = "Refused"
)

func invalid(field, format string, args ...any) *Problem {
	reason := ReasonInvalidSpec
	if strings.HasPrefix(field, "xlb.io/") {
		reason = ReasonInvalidAnnotation
	}
	return &Problem{Reason: reason, Message: field + ": " + fmt.Sprintf(format, args...)}
}

// settings are a Service's xlb settings, read from its annotations and
// session affinity.
type settings struct {
	sched       config.Scheduler
	method      config.Encap
	tableSize   uint32
	persistence *config.Persistence
}

// MethodNames are the methods a Service may ask for (nat needs backends
// that route replies back through the node, which nodes do not).
var MethodNames = []string{"gre", "ipip", "gue", "dr"}

// readSettings reads svc's annotations and session affinity; the first
// invalid one is the Problem.
func readSettings(svc *corev1.Service) (settings, *Problem) {
	s := settings{sched: config.SchedulerMaglev, method: config.EncapGRE, tableSize: DefaultTableSize}
	a := svc.Annotations
	if v, ok := a[AnnotationScheduler]; ok {
		sc, ok := config.ParseScheduler(v)
		if !ok {
			return s, invalid(AnnotationScheduler, "%q is not a scheduler (%s)", v, strings.Join(config.SchedulerNames(), ", "))
		}
		s.sched = sc
	}
	if v, ok := a[AnnotationMethod]; ok {
		m, ok := config.ParseMethod(v)
		if !ok || m == config.EncapNAT {
			return s, invalid(AnnotationMethod, "%q is not a method (%s)", v, strings.Join(MethodNames, ", "))
		}
		s.method = m
	}
	if v, ok := a[AnnotationTableSize]; ok {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return s, invalid(AnnotationTableSize, "%q is not a whole number", v)
		}
		s.tableSize = uint32(n) // a prime within bounds: checked with the service
	}
	p, prob := persistence(svc)
	if prob != nil {
		return s, prob
	}
	s.persistence = p
	return s, nil
}

// persistence reads spec.sessionAffinity ClientIP (with its timeout) and
// xlb.io/persistence-netmask: "N" (IPv4; IPv6 for a Service of IPv6
// only) or "N,M" (IPv4, IPv6).
func persistence(svc *corev1.Service) (*config.Persistence, *Problem) {
	v, hasMask := svc.Annotations[AnnotationPersistenceNetmask]
	if svc.Spec.SessionAffinity != corev1.ServiceAffinityClientIP {
		if hasMask {
			return nil, invalid(AnnotationPersistenceNetmask, "needs spec.sessionAffinity: ClientIP")
		}
		return nil, nil
	}
	p := &config.Persistence{Timeout: time.Duration(corev1.DefaultClientIPServiceAffinitySeconds) * time.Second}
	if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
		sec := *c.ClientIP.TimeoutSeconds
		if sec <= 0 || time.Duration(sec)*time.Second > config.MaxPersistenceTimeout {
			return nil, invalid("spec.sessionAffinityConfig.clientIP.timeoutSeconds", "%d is outside 1..%d", sec, int(config.MaxPersistenceTimeout/time.Second))
		}
		p.Timeout = time.Duration(sec) * time.Second
	}
	if !hasMask {
		return p, nil
	}
	v4, v6, both := strings.Cut(v, ",")
	n4, err4 := strconv.ParseUint(strings.TrimSpace(v4), 10, 8)
	n6, err6 := strconv.ParseUint(strings.TrimSpace(v6), 10, 8)
	switch {
	case err4 != nil || (both && err6 != nil):
		return nil, invalid(AnnotationPersistenceNetmask, "%q is not a prefix length N, or N,M (IPv4, IPv6)", v)
	case !both && onlyIPv6(svc):
		n6, n4 = n4, 0
	}
	if n4 > 32 || n6 > 128 || (!onlyIPv6(svc) && n4 == 0) || (both && n6 == 0) {
		return nil, invalid(AnnotationPersistenceNetmask, "%q: IPv4 lengths are 1..32, IPv6 1..128", v)
	}
	p.Netmask, p.Netmask6 = uint8(n4), uint8(n6)
	return p, nil
}

// families are the address families the Service asks for, in its order
// (spec.ipFamilies; IPv4 when it names none).
func families(svc *corev1.Service) []corev1.IPFamily {
	if len(svc.Spec.IPFamilies) == 0 {
		return []corev1.IPFamily{corev1.IPv4Protocol}
	}
	return svc.Spec.IPFamilies
}

func onlyIPv6(svc *corev1.Service) bool {
	f := families(svc)
	return len(f) == 1 && f[0] == corev1.IPv6Protocol
}
