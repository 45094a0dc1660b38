package plan

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"time"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/state"
)

// schedOf is the data plane's scheduler of service s, whose usable
// backends (active pool, healthy, weight > 0, not drained) are usable and
// whose real ids are ids.
func schedOf(s *config.DesiredService, usable []config.Backend, ids map[netip.Addr]uint32) (state.Sched, error) {
	switch s.Scheduler {
	case config.SchedulerMaglevSource, config.SchedulerSH:
		return state.Sched{Kind: state.SchedMaglevSource,
			Plen4: uint8(config.Prefix(s.SourceNetmask, 32)), Plen6: uint8(config.Prefix(s.SourceNetmask6, 128))}, nil
	case config.SchedulerDH:
		return state.Sched{Kind: state.SchedDH}, nil
	case config.SchedulerRR, config.SchedulerWRR, config.SchedulerLC, config.SchedulerWLC,
		config.SchedulerSED, config.SchedulerNQ:
		return schedList(s, usable, ids)
	case config.SchedulerLBLC, config.SchedulerLBLCR:
		sc, err := schedList(s, usable, ids)
		sc.Expire = LBLCExpiration
		return sc, err
	case config.SchedulerMaglev, 0: // 0: a DesiredService built without one
		return state.Sched{}, nil
	}
	return state.Sched{}, fmt.Errorf("scheduler %s is not supported by this forwarder", s.Scheduler)
}

// listKinds are the list schedulers' kinds.
var listKinds = map[config.Scheduler]state.SchedKind{
	config.SchedulerRR: state.SchedRR, config.SchedulerWRR: state.SchedWRR, config.SchedulerLC: state.SchedLC,
	config.SchedulerWLC: state.SchedWLC, config.SchedulerSED: state.SchedSED, config.SchedulerNQ: state.SchedNQ,
	config.SchedulerLBLC: state.SchedLBLC, config.SchedulerLBLCR: state.SchedLBLCR,
}

// LBLCExpiration is how long an lblc or lblcr destination's entry lives
// unused, and how long an lblcr set stays unchanged before its most loaded
// backend leaves it: IPVS's default (its sysctls lblc_expiration and
// lblcr_expiration).
const LBLCExpiration = 24 * time.Hour

// schedList is the list of a list scheduler: the usable backends by
// address (the same list for the same backends, whatever the config
// order), the weights divided by their greatest common divisor (rr: 1;
// lblc and lblcr: as configured, since their overload test compares
// connection counts with the weights themselves).
func schedList(s *config.DesiredService, usable []config.Backend, ids map[netip.Addr]uint32) (state.Sched, error) {
	if len(usable) > state.SchedListMax {
		return state.Sched{}, fmt.Errorf("scheduler %s takes at most %d usable backends, the active pool has %d (use a hash scheduler, or fewer backends per pool)",
			s.Scheduler, state.SchedListMax, len(usable))
	}
	sc := state.Sched{Kind: listKinds[s.Scheduler]}
	bs := slices.Clone(usable)
	slices.SortFunc(bs, func(a, b config.Backend) int { return a.Addr.Compare(b.Addr) })
	var g uint32
	for _, b := range bs {
		g = gcd(g, b.Weight)
	}
	if s.Scheduler == config.SchedulerLBLC || s.Scheduler == config.SchedulerLBLCR {
		g = 1
	}
	for _, b := range bs {
		w := uint32(1)
		if sc.Kind != state.SchedRR {
			w = b.Weight / g
		}
		sc.List = append(sc.List, state.SchedEnt{RealID: ids[b.Addr], Weight: w})
	}
	if sc.Kind == state.SchedWRR {
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

// wrrStride is the stride of wrr's walk over total weight units: coprime
// with total (every unit once per total new flows) and near the golden
// section of it, so consecutive new flows land far apart on the line of
// weights, interleaving the backends.
func wrrStride(total uint32) uint32 {
	if total <= 2 {
		return 1
	}
	st := uint32(uint64(total) * 618 / 1000)
	for gcd(total, st) != 1 {
		st++
	}
	return st
}

// schedName is the scheduler's name as the file spells it (maglev when
// none was set).
func schedName(s config.Scheduler) string {
	if s == 0 {
		return config.SchedulerMaglev.String()
	}
	return s.String()
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
	l, err := schedList(&config.DesiredService{Scheduler: config.SchedulerWRR}, usable, ids)
	sc.List = l.List
	return err
}
