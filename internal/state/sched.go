package state

import (
	"slices"
	"time"

	"github.com/xlbproject/xlb/internal/sched"
)

// SchedKind is how the forwarder picks the backend of a flow it does not
// track: svc_sched.kind, the data plane's enum xlb_sched, numbered by the
// scheduler list (internal/sched).
type SchedKind uint8

// Info is the scheduler of kind k in the list (internal/sched), which
// numbers the kinds (sched_kind.go is generated from it); nil for a kind
// not in it.
func (k SchedKind) Info() *sched.Info {
	i, _ := sched.Of(uint8(k))
	return i
}

// Sched is a service's scheduler; the zero value is Maglev on the 5-tuple.
type Sched struct {
	Kind SchedKind
	// Proto is the service's protocol (6, 17): the timeouts by which the
	// connection table's sweep frees the service's idle entries.
	Proto uint8
	// Plen4 and Plen6 are the client prefix lengths of SchedMaglevSource
	// (1..32, 1..128); 0 otherwise.
	Plen4, Plen6 uint8
	// List is the usable backends of the list schedulers (rr, wrr, lc,
	// wlc, sed, nq, lblc, lblcr), in a fixed order; nil otherwise.
	List []SchedEnt
	// Stride (SchedWRR) is coprime with the sum of the List's weights.
	Stride uint32
	// Expire (SchedLBLC, SchedLBLCR) is how long a destination's entry
	// lives unused, and how long an lblcr set stays unchanged before its
	// most loaded backend leaves it.
	Expire time.Duration
	// Persist is the service's persistence; the zero value: none.
	Persist Persist
}

// Persist is a service's persistence (IPVS -p, -M): templates of (client
// under Plen4 / Plen6, ID) live Timeout after their last use. ID names the
// service, or the group of services sharing templates. With persistence,
// Sched.List holds the usable backends whatever the kind.
type Persist struct {
	ID           uint32
	Timeout      time.Duration // 0: no persistence
	Plen4, Plen6 uint8
}

// SchedEnt is one backend of a list scheduler.
type SchedEnt struct {
	RealID uint32
	Weight uint32 // > 0, reduced by the weights' gcd (not for lblc, lblcr); SchedRR: 1
}

// Equal reports whether s and o are the same scheduler.
func (s *Sched) Equal(o *Sched) bool {
	return s.Kind == o.Kind && s.Proto == o.Proto && s.Persist == o.Persist && s.Plen4 == o.Plen4 && s.Plen6 == o.Plen6 && s.Stride == o.Stride &&
		s.Expire == o.Expire && slices.Equal(s.List, o.List)
}

// Total is the sum of the List's weights.
func (s *Sched) Total() uint32 {
	var t uint32
	for _, e := range s.List {
		t += e.Weight
	}
	return t
}
