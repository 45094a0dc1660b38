package config

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/xlbproject/xlb/internal/maglev"
)

// Validate checks c as Parse checks a file after decoding it: names, ranges,
// addresses, enumerations, pool references and cycles, duplicates, table
// sizes and the node addresses the backends need. It does not fill in
// defaults, so zero values are rejected where the file would have had a
// default. It returns nil or a non-empty ErrorList whose errors carry field
// paths but no lines.
func (c *Config) Validate() error {
	col := newCollector("")
	validate(c, col)
	return col.result()
}

// validate runs the semantic checks, reporting to c. Problems the decoder
// already reported are not reported again (see collector.failed).
func validate(cfg *Config, c *collector) {
	configKeys.check(cfg, loc{}, c) // types and bounds of each key
	validateNode(&cfg.Node, c)
	validateEndpoints(&cfg.Node, c)
	checks := checkIndex(cfg.HealthChecks)
	validateHealthChecks(cfg.HealthChecks, checks, c)
	idx := poolIndex(cfg.Pools)
	for i := range cfg.Pools {
		validatePool(&cfg.Pools[i], idx, checks, c)
	}
	for _, cyc := range findCycles(cfg.Pools, idx) {
		c.errf(index(join(poolPath(cyc.from), kInclude), cyc.index), ErrPoolCycle,
			"pool cycle %s: a pool must not include itself", strings.Join(cyc.path, " -> "))
	}
	checkConflicts(cfg.Pools, idx, c)
	validateServices(cfg, idx, c)
	validateMethods(cfg, idx, c)
	validateGroups(cfg, c)
	validateBGP(cfg.BGP, &cfg.Node, c)
	validateKubernetes(cfg.Kubernetes, c)
	if cfg.BGP != nil && len(cfg.BGP.Peers) > 0 {
		for i, s := range cfg.Services {
			if s.VIP.IsValid() && !cfg.BGP.Carries(s.VIP) {
				fam, key := "IPv6", "next_hop6"
				if s.VIP.Is4() {
					fam, key = "IPv4", "next_hop4"
				}
				c.errf(fmt.Sprintf("services[%d].vip", i), ErrInvalid,
					"%s VIP %s cannot be announced: no BGP peer of that family (add one, or set bgp.%s)", fam, s.VIP, key)
			}
		}
	}
}

func validateNode(n *Node, c *collector) {
	switch p := join(kNode, kName); {
	case n.Name == "":
	case !validName(n.Name):
		c.errf(p, ErrInvalid, "%q is not a valid instance name: use 1 to %d of A-Z a-z 0-9 _ . - (not \".\" or \"..\")",
			n.Name, MaxNameLen)
	}
	if i := n.Interface; i != "" && !validIfName(i) {
		c.errf(join(kNode, kInterface), ErrInvalid, "%q is not a valid interface name (1 to 15 bytes, no '/', ':' or spaces)", i)
	}
	if a := n.Address; a.IsValid() {
		if !a.Is4() {
			c.errf(join(kNode, kAddress), ErrInvalid, "%s is not an IPv4 address (an IPv6 source goes in node.address6)", a)
		} else if msg := unicastProblem(a); msg != "" {
			c.errf(join(kNode, kAddress), ErrInvalid, "%s %s", a, msg)
		}
	}
	if a := n.Address6; a.IsValid() {
		if !a.Is6() || a.Is4In6() {
			c.errf(join(kNode, kAddress6), ErrInvalid, "%s is not an IPv6 address (an IPv4 source goes in node.address)", a)
		} else if msg := unicastProblem(a); msg != "" {
			c.errf(join(kNode, kAddress6), ErrInvalid, "%s %s", a, msg)
		}
	}
	if m := n.GatewayMAC; m != nil {
		switch {
		case len(m) != 6:
			c.errf(join(kNode, kGatewayMAC), ErrInvalid, "%s is not a 6-byte Ethernet address", m)
		case m[0]&1 != 0:
			c.errf(join(kNode, kGatewayMAC), ErrInvalid, "%s is a multicast or broadcast address; the gateway needs its unicast address", m)
		case string(m) == "\x00\x00\x00\x00\x00\x00":
			c.errf(join(kNode, kGatewayMAC), ErrInvalid, "%s is the all-zero address", m)
		}
	}
	validateFragmentPool(n, c)
	validateDefence(&n.Defence, c)
}

// validateDefence: the thresholds that are set rise in the order the
// modes escalate, and the hysteresis lets each go off again.
func validateDefence(d *Defence, c *collector) {
	at := func(k string) string { return join(join(kNode, kDefence), k) }
	if !(d.Hysteresis >= 0 && d.Hysteresis <= MaxDefenceHysteresis) {
		c.errf(at(kHysteresis), ErrInvalid, "%v is out of range 0..%v", d.Hysteresis, MaxDefenceHysteresis)
	}
	prev, prevKey := 0.0, ""
	for _, m := range []struct {
		key string
		v   float64
	}{{kSecureTCP, d.SecureTCP}, {kDropEntry, d.DropEntry}, {kDropPacket, d.DropPacket}} {
		if !(m.v > 0 && m.v <= 1) { // 0: never on; out of range: reported by the key
			continue
		}
		if m.v < prev {
			c.errf(at(m.key), ErrInvalid, "%v is below %s (%v): the modes go on in the order secure_tcp, drop_entry, drop_packet (0 turns one off)",
				m.v, prevKey, prev)
		}
		if d.Hysteresis >= m.v {
			c.errf(at(kHysteresis), ErrInvalid, "%v is not below %s (%v): that mode would never go off", d.Hysteresis, m.key, m.v)
		}
		prev, prevKey = max(prev, m.v), m.key
	}
}

// validateFragmentPool: unicast, unique, at most MaxFragmentPool, this
// node among them, and a source address of each family used.
func validateFragmentPool(n *Node, c *collector) {
	p := join(kNode, kFragmentPool)
	if len(n.FragmentPool) == 0 {
		return
	}
	if len(n.FragmentPool) > MaxFragmentPool {
		c.errf(p, ErrInvalid, "%d nodes, at most %d", len(n.FragmentPool), MaxFragmentPool)
	}
	seen := map[netip.Addr]int{}
	self := false
	for i, a := range n.FragmentPool {
		ip := index(p, i)
		if !a.IsValid() {
			continue // reported by the decoder
		}
		if msg := unicastProblem(a); msg != "" {
			c.errf(ip, ErrInvalid, "%s %s", a, msg)
			continue
		}
		if j, dup := seen[a]; dup {
			c.errf(ip, ErrDuplicate, "%s appears twice (also at index %d)", a, j)
			continue
		}
		seen[a] = i
		if a == n.Address || a == n.Address6 {
			self = true
		}
		if a.Is4() && !n.Address.IsValid() {
			c.errf(ip, ErrInvalid, "%s is IPv4: redirects to it need node.address as their source", a)
		}
		if a.Is6() && !n.Address6.IsValid() {
			c.errf(ip, ErrInvalid, "%s is IPv6: redirects to it need node.address6 as their source", a)
		}
	}
	if !self {
		c.errf(p, ErrInvalid, "this node is not in the pool: add node.address or node.address6 (every node lists the same pool)")
	}
}

// validateEntryName checks the name of an entry (a pool, a health check) of
// a mapping from names to entries at path: it must be valid, and first says
// whether the entry is the first of its name. It reports whether the entry
// is to be checked further (a duplicate is not).
func validateEntryName(kind, name, path string, first bool, c *collector) bool {
	switch {
	case !validName(name):
		c.errf(path, ErrInvalid, "%q is not a valid %s name: use 1 to %d of A-Z a-z 0-9 _ . -", name, kind, MaxNameLen)
	case !first:
		c.errf(path, ErrDuplicate, "duplicate %s name %q", kind, name)
		return false
	}
	return true
}

func validatePool(p *Pool, idx map[string]*Pool, checks map[string]*HealthCheck, c *collector) {
	path := poolPath(p.Name)
	if !validateEntryName("pool", p.Name, path, idx[p.Name] == p, c) {
		return
	}
	if len(p.Backends) == 0 && len(p.Include) == 0 {
		c.errf(path, ErrEmptyPool, "pool has neither backends nor include: give it at least one")
	}
	if p.HealthCheck != "" {
		checkRef(p.HealthCheck, join(path, kHealthCheck), checks, c)
	}
	first := make(map[netip.Addr]int, len(p.Backends))
	// The paths are built only for a message: pools can hold many backends.
	field := func(j int, name string) string { return join(backendPath(p.Name, j), name) }
	for j, b := range p.Backends {
		switch {
		case !b.Addr.IsValid(): // required: reported by backendKeys' check
		case unicastProblem(b.Addr) != "":
			c.errf(field(j, kAddress), ErrInvalid, "%s %s", b.Addr, unicastProblem(b.Addr))
		default:
			if k, dup := first[b.Addr]; dup {
				c.errf(field(j, kAddress), ErrDuplicate, "backend %s is listed twice in pool %q (first at %s)",
					b.Addr, p.Name, c.where(backendPath(p.Name, k)))
			} else {
				first[b.Addr] = j
			}
		}
		if b.HealthCheck != "" {
			if _, ok := checks[b.HealthCheck]; !ok {
				checkRef(b.HealthCheck, field(j, kHealthCheck), checks, c)
			}
		}
	}
	seen := map[string]int{}
	for j, inc := range p.Include {
		ip := index(join(path, kInclude), j)
		if k, dup := seen[inc]; dup {
			c.errf(ip, ErrDuplicate, "pool %q is included twice (first at %s)", inc, c.where(index(join(path, kInclude), k)))
			continue
		}
		seen[inc] = j
		if _, ok := idx[inc]; !ok {
			c.errf(ip, ErrUnknownPool, "unknown pool %q%s", inc, knownPools(idx))
		}
	}
}

// checkRef reports a reference to a health check that is not defined.
func checkRef(name, path string, checks map[string]*HealthCheck, c *collector) {
	if _, ok := checks[name]; ok {
		return
	}
	known := ""
	switch n := len(checks); {
	case n == 0:
		known = " (no health_checks are defined)"
	case n <= 10:
		names := make([]string, 0, n)
		for k := range checks {
			names = append(names, k)
		}
		slices.Sort(names)
		known = " (defined: " + strings.Join(names, ", ") + ")"
	}
	c.errf(path, ErrUnknownCheck, "unknown health check %q%s", name, known)
}

// checkConflicts reports a backend address reached from one pool through two
// different pools with different settings. Each pair is reported once, at the
// occurrence that was dropped.
func checkConflicts(pools []Pool, idx map[string]*Pool, c *collector) {
	type pair struct{ a, b string }
	reported := map[pair]bool{}
	for i := range pools {
		root := pools[i].Name
		if idx[root] != &pools[i] {
			continue
		}
		if len(pools[i].Include) == 0 {
			// Visited once, its own backends only: nothing to report
			// here (validatePool reports a backend listed twice).
			continue
		}
		flatten(idx, root, func(kept, dropped member) {
			if kept.pool == dropped.pool && kept.index == dropped.index {
				// One backend reached through two include paths that
				// hand its pool different health checks.
				if kept.HealthCheck == dropped.HealthCheck {
					return
				}
				pp := poolPath(kept.pool)
				key := pair{pp, root}
				if reported[key] {
					return
				}
				reported[key] = true
				c.errf(pp, ErrConflict,
					"pool %q sets no health_check and inherits two from pool %q through different includes (%s and %s): set health_check on pool %q",
					kept.pool, root, checkName(kept.HealthCheck), checkName(dropped.HealthCheck), kept.pool)
				return
			}
			if kept.pool == dropped.pool {
				return // listed twice in one pool: validatePool reports it
			}
			diff := settingsDiff(kept.Backend, dropped.Backend)
			if diff == "" {
				return
			}
			kp, dp := backendPath(kept.pool, kept.index), backendPath(dropped.pool, dropped.index)
			key := pair{kp, dp}
			if kp > dp {
				key = pair{dp, kp}
			}
			if reported[key] {
				return
			}
			reported[key] = true
			c.errf(dp, ErrConflict,
				"backend %s conflicts with %s%s, both reached from pool %q: %s (give it the same weight, encap, state and health check everywhere)",
				dropped.Addr, kp, c.onLine(kp, " (line %d)"), root, diff)
		})
	}
}

// settingsDiff describes how a and b differ as "weight 2 vs 1, ...", or returns
// "" when they have the same settings.
func settingsDiff(kept, dropped Backend) string {
	var d []string
	if kept.Weight != dropped.Weight {
		d = append(d, fmt.Sprintf("weight %d vs %d", dropped.Weight, kept.Weight))
	}
	if kept.Encap != dropped.Encap {
		d = append(d, fmt.Sprintf("encap %s vs %s", dropped.Encap, kept.Encap))
	}
	if kept.Port != dropped.Port {
		d = append(d, fmt.Sprintf("port %d vs %d", dropped.Port, kept.Port))
	}
	if kept.Drain != dropped.Drain {
		d = append(d, fmt.Sprintf("state %s vs %s", stateName(dropped.Drain), stateName(kept.Drain)))
	}
	if kept.HealthCheck != dropped.HealthCheck {
		d = append(d, fmt.Sprintf("health check %s vs %s", checkName(dropped.HealthCheck), checkName(kept.HealthCheck)))
	}
	return strings.Join(d, ", ")
}

func checkName(name string) string {
	if name == "" {
		return "none"
	}
	return name
}

func stateName(drain bool) string {
	if drain {
		return "drain"
	}
	return "active"
}

// vipKey identifies what the data plane matches a packet on.
type vipKey struct {
	addr  netip.Addr
	port  uint16
	proto Proto
}

func (k vipKey) String() string {
	port := "all ports"
	if k.port != 0 {
		port = fmt.Sprintf("port %d", k.port)
	}
	return fmt.Sprintf("%s %s %s", k.addr, port, k.proto)
}

func validateServices(cfg *Config, idx map[string]*Pool, c *collector) {
	sc := &serviceChecks{cfg: cfg, idx: idx, c: c,
		names: map[string]int{}, vips: map[vipKey]int{}, flat: map[string][]member{}}
	for i := range cfg.Services {
		sc.service(i)
	}
	sc.nodeAddresses()
	checkCapacity(&cfg.Node, len(cfg.Services), sc.pairs, c) // capacity.go
}

// serviceChecks is what the checks of one service need of the others.
type serviceChecks struct {
	cfg   *Config
	idx   map[string]*Pool
	c     *collector
	names map[string]int
	vips  map[vipKey]int
	flat  map[string][]member // flattened pools, by name
	// The first backend of each family that a service uses, for the node
	// address checks.
	used4, used6         *member
	used4Path, used6Path string
	pairs                int // (service, backend) pairs: node.max_backends
}

// resolve returns the flattened members of pool name.
func (sc *serviceChecks) resolve(name string) []member {
	m, ok := sc.flat[name]
	if !ok {
		m = flatten(sc.idx, name, nil)
		sc.flat[name] = m
	}
	return m
}

// service checks services[i].
func (sc *serviceChecks) service(i int) {
	s, c := &sc.cfg.Services[i], sc.c
	path := servicePath(i)
	sc.name(i, s, path)
	sc.vipAndProtocol(i, s, path)
	validateSched(s, path, c) // sched.go
	tableOK := false
	switch tp, m := join(path, kTableSize), s.TableSize; {
	case m > MaxTableSize:
		c.errf(tp, ErrInvalid, "%d exceeds the maximum table size %d (largest prime allowed: %d)",
			m, MaxTableSize, prevPrime(MaxTableSize))
	case !maglev.IsPrime(m):
		c.errf(tp, ErrInvalid, "%d is not prime (nearest primes: %s)", m, nearestPrimes(m))
	default:
		tableOK = true
	}
	sc.pools(i, s, path, tableOK)
}

// name checks a service's name: valid and unique.
func (sc *serviceChecks) name(i int, s *Service, path string) {
	c := sc.c
	switch np := join(path, kName); {
	case s.Name == "":
	case !validName(s.Name):
		c.errf(np, ErrInvalid, "%q is not a valid service name: use 1 to %d of A-Z a-z 0-9 _ . -", s.Name, MaxNameLen)
	default:
		if j, dup := sc.names[s.Name]; dup {
			c.errf(np, ErrDuplicate, "duplicate service name %q (first at %s)", s.Name, c.where(servicePath(j)))
		} else {
			sc.names[s.Name] = i
		}
	}
}

// vipAndProtocol checks a service's VIP and protocol, and that no other
// service has the same (VIP, port, protocol).
func (sc *serviceChecks) vipAndProtocol(i int, s *Service, path string) {
	c := sc.c
	vipOK := false
	switch vp := join(path, kVIP); {
	case !s.VIP.IsValid():
	case unicastProblem(s.VIP) != "":
		c.errf(vp, ErrInvalid, "%s %s", s.VIP, unicastProblem(s.VIP))
	default:
		vipOK = true
	}
	if vipOK && enumValid(protoNames, s.Proto) {
		k := vipKey{s.VIP, s.Port, s.Proto}
		if j, dup := sc.vips[k]; dup {
			c.errf(join(path, kVIP), ErrDuplicate, "duplicate VIP %s: services[%d] %q%s serves it already",
				k, j, sc.cfg.Services[j].Name, c.onLine(servicePath(j), " (line %d)"))
		} else {
			sc.vips[k] = i
		}
	}
}

// pools checks a service's pool list: present, known, each once, not all
// empty, each smaller than the table.
func (sc *serviceChecks) pools(i int, s *Service, path string, tableOK bool) {
	c := sc.c
	pp := join(path, kPools)
	if len(s.Pools) == 0 {
		return // required: reported by serviceKeys' check
	}
	refsOK := true
	seen := map[string]int{}
	addrs := map[netip.Addr]bool{}
	total := 0
	for j, name := range s.Pools {
		rp := index(pp, j)
		if k, dup := seen[name]; dup {
			c.errf(rp, ErrDuplicate, "pool %q is listed twice (first at %s)", name, c.where(index(pp, k)))
			continue
		}
		seen[name] = j
		if _, ok := sc.idx[name]; !ok {
			c.errf(rp, ErrUnknownPool, "unknown pool %q%s", name, knownPools(sc.idx))
			refsOK = false
			continue
		}
		members := sc.resolve(name)
		total += len(members)
		for _, m := range members {
			addrs[m.Addr] = true
		}
		if tableOK && uint64(len(members)) > uint64(s.TableSize) {
			c.errf(join(path, kTableSize), ErrInvalid,
				"%d is smaller than the %d backends of pool %q: use a prime at least 100 times the number of backends (Maglev paper, section 3.4)",
				s.TableSize, len(members), name)
		}
		sc.noteFamilies(i, s, name, members)
	}
	sc.pairs += len(addrs)
	if refsOK && total == 0 {
		c.errf(pp, ErrEmptyService, "service %q has no backend: its pools %s resolve to none",
			s.Name, strings.Join(s.Pools, ", "))
	}
}

// noteFamilies remembers the first IPv4 and IPv6 backend services use.
func (sc *serviceChecks) noteFamilies(i int, s *Service, pool string, members []member) {
	for k := range members {
		m := &members[k]
		if m.Addr.Is4() && sc.used4 == nil {
			sc.used4, sc.used4Path = m, fmt.Sprintf("services[%d] %q via pool %q", i, s.Name, pool)
		}
		if m.Addr.Is6() && sc.used6 == nil {
			sc.used6, sc.used6Path = m, fmt.Sprintf("services[%d] %q via pool %q", i, s.Name, pool)
		}
	}
}

// nodeAddresses requires a node address of each family a backend has.
func (sc *serviceChecks) nodeAddresses() {
	c, node := sc.c, sc.cfg.Node
	if sc.used4 != nil && !node.Address.IsValid() {
		c.errf(join(kNode, kAddress), ErrRequired,
			"required: the source address of packets to IPv4 backends, such as %s (%s) used by %s",
			sc.used4.Addr, c.where(backendPath(sc.used4.pool, sc.used4.index)), sc.used4Path)
	}
	if sc.used6 != nil && !node.Address6.IsValid() {
		c.errf(join(kNode, kAddress6), ErrRequired,
			"required: the source address of packets to IPv6 backends, such as %s (%s) used by %s",
			sc.used6.Addr, c.where(backendPath(sc.used6.pool, sc.used6.index)), sc.used6Path)
	}
}

// knownPools lists the pool names for an "unknown pool" message, or returns ""
// when there are too many to list.
func knownPools(idx map[string]*Pool) string {
	if len(idx) == 0 {
		return " (no pools are defined)"
	}
	if len(idx) > 10 {
		return ""
	}
	names := make([]string, 0, len(idx))
	for n := range idx {
		names = append(names, n)
	}
	slices.Sort(names)
	return " (defined: " + strings.Join(names, ", ") + ")"
}

// unicastProblem returns why a cannot be a VIP, backend or source address, or
// "" when it can.
func unicastProblem(a netip.Addr) string {
	switch {
	case a.Zone() != "":
		return "has a zone; zones are not supported"
	case a.Is4In6():
		return fmt.Sprintf("is an IPv4-mapped IPv6 address: write it as %s", a.Unmap())
	case a.IsUnspecified():
		return "is the unspecified address"
	case a.IsMulticast():
		return "is a multicast address"
	case a.IsLoopback():
		return "is a loopback address"
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "is the broadcast address"
	}
	return ""
}

// validName reports whether s may name a node, pool or service:
// [A-Za-z0-9_.-]{1,MaxNameLen}, and neither "." nor ".." (the node name is a
// directory name in bpffs).
func validName(s string) bool {
	if s == "" || len(s) > MaxNameLen || s == "." || s == ".." {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-') {
			return false
		}
	}
	return true
}

// validIfName reports whether s is a valid Linux interface name (the kernel's
// dev_valid_name: shorter than IFNAMSIZ, not "." or "..", no '/', ':' or
// white space), also refusing control characters.
func validIfName(s string) bool {
	if s == "" || len(s) > 15 || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		if b := s[i]; b == '/' || b == ':' || b <= ' ' || b == 0x7f {
			return false
		}
	}
	return true
}

// formatDuration formats d as time.Duration.String does, without zero
// trailing units: "2h" rather than "2h0m0s". time.ParseDuration reads it back.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
