package config

import (
	"time"

	"github.com/xlbproject/xlb/internal/sched"
)

// Scheduler is a backend selection algorithm: how a service picks the
// backend of a flow its node does not track yet: the index + 1 of its name
// in the scheduler list (internal/sched.List), from which the constants
// and names of sched_names.go are generated. docs/ARCHITECTURE.md,
// "Schedulers", says what each guarantees on one CPU, across CPUs and
// across nodes.
type Scheduler uint8

// String returns the scheduler's name as written in the file.
func (s Scheduler) String() string { return enumString(schedulerNames, s) }

// ParseScheduler returns the scheduler named name, as the file spells it.
func ParseScheduler(name string) (Scheduler, bool) {
	for _, n := range schedulerNames {
		if n.name == name {
			return n.val, true
		}
	}
	return 0, false
}

// Info is the scheduler s names, an alias resolved (sh: maglev-source);
// nil for no scheduler.
func (s Scheduler) Info() *sched.Info {
	if s == 0 || int(s) > len(sched.List) {
		return nil
	}
	return sched.Resolve(&sched.List[s-1])
}

// HashesSource reports whether the scheduler hashes the client address
// under SourceNetmask(6).
func (s Scheduler) HashesSource() bool {
	i := s.Info()
	return i != nil && i.HashesSource
}

// Persistence keeps clients on one backend (IPVS persistent services, -p
// and -M) with a template: (client address under the netmask, service or
// group) -> backend, one per client in a table the node's CPUs share
// (bpf/persist.h). A new connection of the client goes to the template's
// backend while that is usable for the service (else the scheduler
// chooses and the template is rewritten). The template's time is moved on
// by each new connection of the client and by the packets of its tracked
// connections, at most once per conntrack tick (about 0.27 s); it expires
// Timeout after that last use. Unlike IPVS, a connection that sends
// nothing for longer than Timeout does not keep its template alive.
// Nothing sweeps templates: an expired one is overwritten by the next
// connection whose template hashes to its slot.
type Persistence struct {
	// Timeout is how long a template lives after its last use (see
	// above). Required for UDP; DefaultPersistenceTimeout for TCP.
	Timeout time.Duration
	// Netmask and Netmask6 are the prefix lengths that group clients;
	// 0 (absent): the whole address (see Prefix).
	Netmask, Netmask6 uint8
	// Group names the services that share templates (IPVS firewall-mark
	// services): a client of one service of the group reaches the same
	// backend address through every other. "" for the service alone.
	Group string
}

const (
	// DefaultPersistenceTimeout is persistence.timeout of a TCP service
	// when absent (ipvsadm's default for -p).
	DefaultPersistenceTimeout = 300 * time.Second
	// MaxPersistenceTimeout bounds persistence.timeout.
	MaxPersistenceTimeout = 4 * time.Hour
)

// Prefix returns a netmask as a prefix length of an address of bits
// bits: 0 (not set) is the whole address.
func Prefix(v uint8, bits int) int {
	if v == 0 {
		return bits
	}
	return int(v)
}

// validateSched checks a service's scheduler, source netmasks and
// persistence.
func validateSched(s *Service, path string, c *collector) {
	if !s.Scheduler.HashesSource() && (s.SourceNetmask != 0 || s.SourceNetmask6 != 0) {
		key := kSourceNetmask
		if s.SourceNetmask == 0 {
			key = kSourceNetmask6
		}
		c.errf(join(path, key), ErrInvalid, "only maglev-source and sh hash the source address; scheduler %s does not use it (remove it)", s.Scheduler)
	}
	p := s.Persistence
	if p == nil {
		return
	}
	pp := join(path, kPersistence)
	switch {
	case p.Timeout == 0 && s.Proto == ProtoUDP:
		c.errf(pp, ErrRequired, "persistence of a UDP service needs a timeout (UDP has no connection end to count from): add timeout, such as 300s")
	case p.Timeout == 0:
		c.errf(join(pp, kTimeout), ErrRequired, "required: how long a template outlives its last connection, such as 300s")
	}
	if p.Group != "" && !validName(p.Group) {
		c.errf(join(pp, kGroup), ErrInvalid, "%q is not a valid group name: use 1 to %d of A-Z a-z 0-9 _ . -", p.Group, MaxNameLen)
	}
}

// validateGroups checks that the services of each persistence group agree
// on what their shared templates mean: scheduler, timeout and netmasks.
func validateGroups(cfg *Config, c *collector) {
	first := map[string]int{}
	for i := range cfg.Services {
		s := &cfg.Services[i]
		if s.Persistence == nil || s.Persistence.Group == "" {
			continue
		}
		g := s.Persistence.Group
		j, seen := first[g]
		if !seen {
			first[g] = i
			continue
		}
		o := &cfg.Services[j]
		path, opath := servicePath(i), servicePath(j)
		switch {
		case s.Scheduler != o.Scheduler:
			c.errf(join(path, kScheduler), ErrInvalid, "%s differs from %s of service %s (%s) in persistence group %s: the services of a group share templates and must schedule alike",
				s.Scheduler, o.Scheduler, o.Name, c.where(join(opath, kScheduler)), g)
		case s.Persistence.Timeout != o.Persistence.Timeout:
			c.errf(join(join(path, kPersistence), kTimeout), ErrInvalid, "%s differs from %s of service %s (%s) in persistence group %s",
				s.Persistence.Timeout, o.Persistence.Timeout, o.Name, c.where(join(opath, kPersistence)), g)
		case s.Persistence.Netmask != o.Persistence.Netmask || s.Persistence.Netmask6 != o.Persistence.Netmask6:
			c.errf(join(path, kPersistence), ErrInvalid, "netmasks /%d, /%d differ from /%d, /%d of service %s (%s) in persistence group %s",
				s.Persistence.Netmask, s.Persistence.Netmask6, o.Persistence.Netmask, o.Persistence.Netmask6, o.Name, c.where(join(opath, kPersistence)), g)
		}
	}
}
