package config

import (
	"time"

	"gopkg.in/yaml.v3"

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
// and -M): a template (client address under the netmask, service or
// group) -> backend lives while a connection of it lives and Timeout after
// the last.
type Persistence struct {
	// Timeout is how long a template outlives its last connection.
	// Required for UDP; DefaultPersistenceTimeout for TCP.
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

func (d *decoder) schedFields(f fieldSet, s *Service) {
	if v, fp := f.at("scheduler"); v != nil {
		s.Scheduler, _ = decodeEnum(d, v, fp, schedulerNames)
	}
	if v, fp := f.at("source_netmask"); v != nil {
		s.SourceNetmask, _ = d.prefixLen(v, fp, 32)
	}
	if v, fp := f.at("source_netmask6"); v != nil {
		s.SourceNetmask6, _ = d.prefixLen(v, fp, 128)
	}
	if v, fp := f.at("persistence"); v != nil {
		s.Persistence = d.persistence(v, fp)
		if s.Persistence.Timeout == 0 && s.Proto == ProtoTCP {
			s.Persistence.Timeout = DefaultPersistenceTimeout
		}
	}
}

// prefixLen decodes a prefix length 1..max.
func (d *decoder) prefixLen(n *ynode, path string, max uint64) (uint8, bool) {
	u, ok := d.uint(n, path, max)
	if ok && u == 0 {
		d.c.at(pos(n), path, ErrInvalid, "0 is out of range 1..%d (a prefix length; leave the key out for the whole address)", max)
		return 0, false
	}
	return uint8(u), ok
}

func (d *decoder) persistence(n *ynode, path string) *Persistence {
	p := &Persistence{}
	f := d.fields(n, path, "timeout", "netmask", "netmask6", "group")
	if v, fp := f.at("timeout"); v != nil {
		p.Timeout, _ = d.duration(v, fp)
	}
	if v, fp := f.at("netmask"); v != nil {
		p.Netmask, _ = d.prefixLen(v, fp, 32)
	}
	if v, fp := f.at("netmask6"); v != nil {
		p.Netmask6, _ = d.prefixLen(v, fp, 128)
	}
	if v, fp := f.at("group"); v != nil {
		p.Group, _ = d.str(v, fp)
	}
	return p
}

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
	sp := join(path, "scheduler")
	if !enumValid(schedulerNames, s.Scheduler) {
		c.errf(sp, ErrInvalid, "%s is not one of %s", s.Scheduler, enumList(schedulerNames))
	}
	netmask(c, join(path, "source_netmask"), s.SourceNetmask, 32)
	netmask(c, join(path, "source_netmask6"), s.SourceNetmask6, 128)
	if !s.Scheduler.HashesSource() && (s.SourceNetmask != 0 || s.SourceNetmask6 != 0) {
		key := "source_netmask"
		if s.SourceNetmask == 0 {
			key = "source_netmask6"
		}
		c.errf(join(path, key), ErrInvalid, "only maglev-source and sh hash the source address; scheduler %s does not use it (remove it)", s.Scheduler)
	}
	p := s.Persistence
	if p == nil {
		return
	}
	pp := join(path, "persistence")
	switch tp := join(pp, "timeout"); {
	case p.Timeout == 0 && s.Proto == ProtoUDP:
		c.errf(pp, ErrRequired, "persistence of a UDP service needs a timeout (UDP has no connection end to count from): add timeout, such as 300s")
	case p.Timeout < MinTimeout || p.Timeout > MaxPersistenceTimeout:
		c.errf(tp, ErrInvalid, "%s is out of range %s..%s", p.Timeout, MinTimeout, MaxPersistenceTimeout)
	}
	netmask(c, join(pp, "netmask"), p.Netmask, 32)
	netmask(c, join(pp, "netmask6"), p.Netmask6, 128)
	if p.Group != "" && !validName(p.Group) {
		c.errf(join(pp, "group"), ErrInvalid, "%q is not a valid group name: use 1 to %d of A-Z a-z 0-9 _ . -", p.Group, MaxNameLen)
	}
}

func netmask(c *collector, path string, v, max uint8) {
	if v > max {
		c.errf(path, ErrInvalid, "%d is out of range 1..%d (a prefix length)", v, max)
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
			c.errf(join(path, "scheduler"), ErrInvalid, "%s differs from %s of service %s (%s) in persistence group %s: the services of a group share templates and must schedule alike",
				s.Scheduler, o.Scheduler, o.Name, c.where(join(opath, "scheduler")), g)
		case s.Persistence.Timeout != o.Persistence.Timeout:
			c.errf(join(path, "persistence.timeout"), ErrInvalid, "%s differs from %s of service %s (%s) in persistence group %s",
				s.Persistence.Timeout, o.Persistence.Timeout, o.Name, c.where(join(opath, "persistence")), g)
		case s.Persistence.Netmask != o.Persistence.Netmask || s.Persistence.Netmask6 != o.Persistence.Netmask6:
			c.errf(join(path, "persistence"), ErrInvalid, "netmasks /%d, /%d differ from /%d, /%d of service %s (%s) in persistence group %s",
				s.Persistence.Netmask, s.Persistence.Netmask6, o.Persistence.Netmask, o.Persistence.Netmask6, o.Name, c.where(join(opath, "persistence")), g)
		}
	}
}

// schedNodes are a service's source netmasks and persistence for Marshal,
// only those the file would have.
func schedNodes(s *Service) []*yaml.Node {
	var out []*yaml.Node
	if s.SourceNetmask != 0 {
		out = append(out, str("source_netmask"), integer(uint64(s.SourceNetmask)))
	}
	if s.SourceNetmask6 != 0 {
		out = append(out, str("source_netmask6"), integer(uint64(s.SourceNetmask6)))
	}
	p := s.Persistence
	if p == nil {
		return out
	}
	pn := mapping()
	if p.Timeout != 0 {
		pn.Content = append(pn.Content, str("timeout"), str(p.Timeout.String()))
	}
	if p.Netmask != 0 {
		pn.Content = append(pn.Content, str("netmask"), integer(uint64(p.Netmask)))
	}
	if p.Netmask6 != 0 {
		pn.Content = append(pn.Content, str("netmask6"), integer(uint64(p.Netmask6)))
	}
	if p.Group != "" {
		pn.Content = append(pn.Content, str("group"), str(p.Group))
	}
	return append(out, str("persistence"), pn)
}
