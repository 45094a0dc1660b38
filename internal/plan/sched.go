package plan

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"time"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/sched"
	"github.com/xlbproject/xlb/internal/state"
)

// schedOf is the data plane's scheduler of service s, whose usable
// backends (active pool, healthy, weight > 0, not drained) are usable and
// whose real ids are ids. What each scheduler needs written is in the
// scheduler list (internal/sched).
func schedOf(s *config.DesiredService, usable []config.Backend, ids map[netip.Addr]uint32) (state.Sched, error) {
	if s.Scheduler == 0 { // a DesiredService built without one: maglev
		return state.Sched{}, nil
	}
	info := s.Scheduler.Info()
	if info == nil {
		return state.Sched{}, fmt.Errorf("scheduler %s is not supported by this forwarder", s.Scheduler)
	}
	sc := state.Sched{Kind: state.SchedKind(info.Kind)}
	if info.HashesSource {
		sc.Plen4, sc.Plen6 = uint8(config.Prefix(s.SourceNetmask, 32)), uint8(config.Prefix(s.SourceNetmask6, 128))
	}
	if !info.UsesList() {
		return sc, nil
	}
	sc, err := schedList(s, info, usable, ids)
	if info.Expires {
		sc.Expire = LBLCExpiration
	}
	return sc, err
}

// LBLCExpiration is how long an lblc or lblcr destination's entry lives
// unused, and how long an lblcr set stays unchanged before its most loaded
// backend leaves it: IPVS's default (its sysctls lblc_expiration and
// lblcr_expiration).
const LBLCExpiration = 24 * time.Hour

// schedList is the list of a list scheduler (info): the usable backends
// by address (the same list for the same backends, whatever the config
// order), the weights as info.Weights says: 1 (rr), divided by their
// greatest common divisor, or as configured (lblc and lblcr, whose
// overload test compares connection counts with the weights themselves).
func schedList(s *config.DesiredService, info *sched.Info, usable []config.Backend, ids map[netip.Addr]uint32) (state.Sched, error) {
	if len(usable) > state.SchedListMax {
		return state.Sched{}, fmt.Errorf("scheduler %s takes at most %d usable backends, the active pool has %d (use a hash scheduler, or fewer backends per pool)",
			s.Scheduler, state.SchedListMax, len(usable))
	}
	sc := state.Sched{Kind: state.SchedKind(info.Kind)}
	bs := slices.Clone(usable)
	slices.SortFunc(bs, func(a, b config.Backend) int { return a.Addr.Compare(b.Addr) })
	var g uint32
	for _, b := range bs {
		g = gcd(g, b.Weight)
	}
	if info.Weights == sched.WeightsAsIs {
		g = 1
	}
	for _, b := range bs {
		w := uint32(1)
		if info.Weights != sched.WeightsOne {
			w = b.Weight / g
		}
		sc.List = append(sc.List, state.SchedEnt{RealID: ids[b.Addr], Weight: w})
	}
	if info.Stride {
		sc.Stride = wrrStride(sc.Total())
	}
	return sc, nil
}

func gcd(a, b uint32) uint32 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// persistOf gives sc the persistence of service s (id): templates keyed
// by the service id, or by its group's (FNV-1a of the name, top bit set:
// never a service id), over the usable backends' list.
func persistOf(sc *state.Sched, s *config.DesiredService, id uint32, usable []config.Backend, ids map[netip.Addr]uint32) error {
	p := s.Persistence
	if p.Timeout == 0 {
		return nil
	}
	sc.Persist = state.Persist{ID: id, Timeout: p.Timeout,
		Plen4: uint8(config.Prefix(p.Netmask, 32)), Plen6: uint8(config.Prefix(p.Netmask6, 128))}
	if p.Group != "" {
		h := fnv.New32a()
		h.Write([]byte(p.Group))
		sc.Persist.ID = h.Sum32() | 1<<31
	}
	if sc.List != nil {
		return nil
	}
	if len(usable) > state.SchedListMax {
		return fmt.Errorf("persistence takes at most %d usable backends, the active pool has %d", state.SchedListMax, len(usable))
	}
	l, err := schedList(s, config.SchedulerWRR.Info(), usable, ids)
	sc.List = l.List
	return err
}
