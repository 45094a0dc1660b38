package config

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"
)

//go:generate go run ./internal/keydoc ../../docs/CONFIG.md

// The keys of the configuration file, each declared once: its name, its
// value (type, default, bounds), when it must be given and a line of
// documentation. Parse reads, Marshal writes, Validate checks and
// docs/CONFIG.md documents the file from these tables (schema.go); the
// rules that span keys are code (validate.go, checks.go, bgp.go, sched.go,
// methods.go, endpoints.go). The order of each table is the order Marshal
// writes.

// The names of the keys that the rules (validate.go and its neighbours)
// name in field paths; the tables use them too, so that each name is
// spelled once.
const (
	kAPISocket      = "api_socket"
	kAddress        = "address"
	kAddress6       = "address6"
	kBGP            = "bgp"
	kCommand        = "command"
	kDefence        = "defence"
	kDropEntry      = "drop_entry"
	kDropPacket     = "drop_packet"
	kHysteresis     = "hysteresis"
	kSecureTCP      = "secure_tcp"
	kDummyInterface = "dummy_interface"
	kExpect         = "expect"
	kExpectBody     = "expect_body"
	kFragmentPool   = "fragment_pool"
	kFragments      = "fragments"
	kGUEPort        = "gue_port"
	kGatewayMAC     = "gateway_mac"
	kGroup          = "group"
	kHealthCheck    = "health_check"
	kHoldTime       = "hold_time"
	kHost           = "host"
	kInclude        = "include"
	kInterface      = "interface"
	kKeepalive      = "keepalive"
	kMaxBackends    = "max_backends"
	kMaxServices    = "max_services"
	kKubernetes     = "kubernetes"
	kMetricsAddr    = "metrics_addr"
	kName           = "name"
	kNextHop4       = "next_hop4"
	kNextHop6       = "next_hop6"
	kNode           = "node"
	kPassword       = "password"
	kPath           = "path"
	kPayload        = "payload"
	kPeers          = "peers"
	kPersistence    = "persistence"
	kPools          = "pools"
	kPort           = "port"
	kRouteTable     = "route_table"
	kRouterID       = "router_id"
	kScheduler      = "scheduler"
	kSourceNetmask  = "source_netmask"
	kSourceNetmask6 = "source_netmask6"
	kStatusPage     = "status_page"
	kTableSize      = "table_size"
	kTimeout        = "timeout"
	kVIP            = "vip"
)

var configKeys = newSection(false,
	key[Config]{name: kNode, v: nestedOf(func(c *Config) *Node { return &c.Node }, nodeKeys),
		need: "required (at least node.interface)", keep: always[Config],
		doc: "This machine."},
	key[Config]{name: "health_checks", v: namedOf(func(c *Config) *[]HealthCheck { return &c.HealthChecks }, checkKeys,
		"check", func(h *HealthCheck) *string { return &h.Name }),
		doc: "Named health checks; a pool or a backend names the one that probes it."},
	key[Config]{name: kPools, v: namedOf(func(c *Config) *[]Pool { return &c.Pools }, poolKeys,
		"pool", func(p *Pool) *string { return &p.Name }),
		doc: "Named sets of backends, which may include other pools (no cycles)."},
	key[Config]{name: "services", v: entriesOf(func(c *Config) *[]Service { return &c.Services }, serviceKeys, "services"),
		doc: "The services: a VIP, port and protocol each, unique, served from pools in order of preference."},
	key[Config]{name: kBGP, v: optionalOf(func(c *Config) **BGP { return &c.BGP }, bgpKeys),
		doc: "Who announces the VIPs: the embedded BGP speaker or, with mode external, the host's routing daemon. Absent: nothing is announced."},
	key[Config]{name: kKubernetes, v: optionalOf(func(c *Config) **Kubernetes { return &c.Kubernetes }, kubernetesKeys),
		doc: "Also serve a cluster's LoadBalancer Services of one class (docs/KUBERNETES.md). Absent: the file's services only."},
)

var nodeKeys = newSection(false,
	key[Node]{name: kName, v: textOf(func(n *Node) *string { return &n.Name }), keep: always[Node],
		req: "required", derive: hostName, defDoc: "the host name",
		doc: "Instance name: the bpffs pin directory and the default API socket; 1 to 64 of A-Z a-z 0-9 _ . - (not . or ..)."},
	key[Node]{name: kInterface, v: textOf(func(n *Node) *string { return &n.Interface }), keep: always[Node],
		req: "required: the network interface to attach the XDP program to",
		doc: "The interface the XDP program is attached to."},
	key[Node]{name: kAPISocket, v: textOf(func(n *Node) *string { return &n.APISocket }),
		defDoc: "/run/xlb/<name>.sock",
		doc:    "The API's unix socket, an absolute path (xlbd --api-socket overrides it)."},
	key[Node]{name: kMetricsAddr, v: textOf(func(n *Node) *string { return &n.MetricsAddr }),
		defDoc: "127.0.0.1:9469",
		doc:    "The metrics listener, HOST:PORT, or off (xlbd --metrics-addr overrides it)."},
	key[Node]{name: kStatusPage, v: flagOf(func(n *Node) *bool { return &n.StatusPage }),
		doc: "Serve the live status page at / of the metrics listener. Read at start."},
	key[Node]{name: kAddress, v: addressOf(func(n *Node) *netip.Addr { return &n.Address }),
		doc: "IPv4 source of the packets sent to IPv4 backends; required when a service has one."},
	key[Node]{name: kAddress6, v: addressOf(func(n *Node) *netip.Addr { return &n.Address6 }),
		doc: "IPv6 source of the packets sent to IPv6 backends; required when a service has one."},
	key[Node]{name: kGatewayMAC, v: hwAddrOf(func(n *Node) *net.HardwareAddr { return &n.GatewayMAC }),
		doc: "Next hop when the kernel FIB has no neighbour for a backend."},
	key[Node]{name: "xdp_mode", v: choiceOf(func(n *Node) *XDPMode { return &n.XDPMode }, XDPModeAuto, xdpModeNames),
		keep: always[Node],
		doc:  "How the program is attached; auto: native when the device delivers what native XDP transmits, else generic."},
	key[Node]{name: "conntrack_entries", v: numberOf(func(n *Node) *uint32 { return &n.ConntrackEntries },
		DefaultConntrackEntries, MinConntrackEntries, MaxConntrackEntries), keep: always[Node],
		doc: "Connection tracking capacity of each CPU."},
	key[Node]{name: kMaxServices, v: numberOf(func(n *Node) *uint32 { return &n.MaxServices },
		DefaultMaxServices, 1, MaxMaxServices), keep: always[Node],
		doc: "Services (VIP, port, protocol) the data plane's maps hold; sizes them, with the memory check at start. Read at start."},
	key[Node]{name: kMaxBackends, v: numberOf(func(n *Node) *uint32 { return &n.MaxBackends },
		DefaultMaxBackends, 1, MaxMaxBackends), keep: always[Node],
		doc: "(service, backend) pairs the data plane's maps hold: each service counts each backend of its pools once. Read at start."},
	key[Node]{name: "timeouts", v: nestedOf(func(n *Node) *Timeouts { return &n.Timeouts }, timeoutKeys),
		doc: "Idle timeouts of tracked flows."},
	key[Node]{name: "flood_syn_rate", v: numberOf(func(n *Node) *uint32 { return &n.FloodSynRate }, 0, 0, MaxFloodSynRate),
		defDoc: "0: no limit",
		doc:    "New SYN flows per second each CPU tracks; beyond it they are forwarded untracked."},
	key[Node]{name: "flood_new_flow_rate", v: numberOf(func(n *Node) *uint32 { return &n.FloodNewFlowRate }, 0, 0, MaxFloodSynRate),
		defDoc: "0: flood_syn_rate",
		doc:    "The same for other new flows (TCP not opening with a SYN, UDP)."},
	key[Node]{name: kDefence, v: nestedOf(func(n *Node) *Defence { return &n.Defence }, defenceKeys),
		doc: "Defence modes switched on and off by the connection table's fill (IPVS's secure_tcp, drop_entry, drop_packet), the cheapest first: on before the table is full, so that new flows keep finding room and established ones keep their entries."},
	key[Node]{name: "icmp_echo_rate", v: numberOf(func(n *Node) *uint32 { return &n.ICMPEchoRate },
		DefaultICMPEchoRate, 0, MaxICMPEchoRate), keep: always[Node],
		doc: "Echo requests to a VIP each CPU answers per second; 0: none."},
	key[Node]{name: "icmp_too_big_rate", v: numberOf(func(n *Node) *uint32 { return &n.ICMPTooBigRate },
		DefaultICMPTooBigRate, 0, MaxICMPTooBigRate), keep: always[Node],
		doc: "ICMP frag-needed / packet-too-big each CPU sends per second for packets that no longer fit once encapsulated; 0: none."},
	key[Node]{name: kFragmentPool, v: addressesOf(func(n *Node) *[]netip.Addr { return &n.FragmentPool }),
		doc: "Every node of the LB pool, this one among them, alike on all (at most 64): fragments meet on the node their datagram hashes to."},
	key[Node]{name: "fragment_table_entries", v: numberOf(func(n *Node) *uint32 { return &n.FragmentTableEntries },
		DefaultFragmentTableEntries, MinFragmentTableEntries, MaxFragmentTableEntries), keep: always[Node],
		doc: "Datagrams whose first fragment's decision is kept. Read at start."},
	key[Node]{name: "trace_rate", v: numberOf(func(n *Node) *uint32 { return &n.TraceRate },
		DefaultTraceRate, 0, MaxTraceRate), keep: always[Node],
		doc: "Packet tracer records each CPU emits per second; 0: tracer off."},
	key[Node]{name: "sync", v: optionalOf(func(n *Node) **Sync { return &n.Sync }, syncKeys),
		doc: "Connection sync with the other nodes; absent: off."},
	key[Node]{name: kGUEPort, v: numberOf(func(n *Node) *uint16 { return &n.GUEPort }, DefaultGUEPort, 0, 65535),
		keep: always[Node],
		doc:  "Destination UDP port of GUE packets (method gue)."},
)

// hostName is node.name's default.
func hostName(n *Node) error {
	h, err := os.Hostname()
	switch {
	case err != nil:
		return fmt.Errorf("not set and the host name is unknown (%v): set node.name", err)
	case !validName(h):
		return fmt.Errorf("not set and the host name %q is not a valid instance name ([A-Za-z0-9_.-]{1,%d}): set node.name", h, MaxNameLen)
	}
	n.Name = h
	return nil
}

func timeout(at func(*Timeouts) *time.Duration, def time.Duration) value[Timeouts] {
	return durationOf(at, def, MinTimeout, MaxTimeout)
}

var timeoutKeys = newSection(false,
	key[Timeouts]{name: "tcp", v: timeout(func(t *Timeouts) *time.Duration { return &t.TCP }, DefaultTCPTimeout),
		keep: always[Timeouts], doc: "An established TCP flow."},
	key[Timeouts]{name: "tcp_syn", v: timeout(func(t *Timeouts) *time.Duration { return &t.TCPSyn }, DefaultTCPSynTimeout),
		keep: always[Timeouts], doc: "A TCP flow seen opening only (SYN)."},
	key[Timeouts]{name: "tcp_fin", v: timeout(func(t *Timeouts) *time.Duration { return &t.TCPFin }, DefaultTCPFinTimeout),
		keep: always[Timeouts], doc: "A TCP flow seen closing (FIN or RST)."},
	key[Timeouts]{name: "udp", v: timeout(func(t *Timeouts) *time.Duration { return &t.UDP }, DefaultUDPTimeout),
		keep: always[Timeouts], doc: "A UDP flow."},
)

// defenceTimeout is a timeout of node.defence: 0 is left to the rules
// (the normal timeout).
func defenceTimeout(at func(*Defence) *time.Duration, def time.Duration) value[Defence] {
	v := durationOf(at, def, MinTimeout, MaxTimeout)
	v.unset = true
	return v
}

var defenceKeys = newSection(false,
	key[Defence]{name: kSecureTCP, v: fractionOf(func(d *Defence) *float64 { return &d.SecureTCP }, DefaultSecureTCPAt),
		keep: always[Defence],
		doc:  "Fill (of the fullest CPU's slice) at which half-open and closing entries get the shorter timeouts below; 0: never."},
	key[Defence]{name: kDropEntry, v: fractionOf(func(d *Defence) *float64 { return &d.DropEntry }, DefaultDropEntryAt),
		keep: always[Defence],
		doc:  "Fill at which idle entries are freed (established ones idle drop_entry_idle, unestablished ones idle half a second) and full buckets give up unestablished entries first; 0: never. At least secure_tcp."},
	key[Defence]{name: kDropPacket, v: fractionOf(func(d *Defence) *float64 { return &d.DropPacket }, DefaultDropPacketAt),
		keep: always[Defence],
		doc:  "Fill at which a share of new flows, rising to all at a full table, is forwarded by the Maglev table untracked; 0: never. At least drop_entry."},
	key[Defence]{name: kHysteresis, v: fractionOf(func(d *Defence) *float64 { return &d.Hysteresis }, DefaultDefenceHysteresis),
		keep: always[Defence],
		doc:  "A mode goes off when the fill has stayed this far below its threshold for 5 sweeps (5 s) in a row (0..0.5, below every threshold set)."},
	key[Defence]{name: "secure_tcp_syn_timeout", v: defenceTimeout(func(d *Defence) *time.Duration { return &d.SecureTCPSyn }, DefaultSecureTCPSynTimeout),
		keep: always[Defence], doc: "Timeout of a half-open TCP entry while secure_tcp is on (at most timeouts.tcp_syn: the shorter holds)."},
	key[Defence]{name: "secure_tcp_fin_timeout", v: defenceTimeout(func(d *Defence) *time.Duration { return &d.SecureTCPFin }, DefaultSecureTCPFinTimeout),
		keep: always[Defence], doc: "Timeout of a closing TCP entry while secure_tcp is on (at most timeouts.tcp_fin: the shorter holds)."},
	key[Defence]{name: "drop_entry_idle", v: defenceTimeout(func(d *Defence) *time.Duration { return &d.DropEntryIdle }, DefaultDropEntryIdle),
		keep: always[Defence], doc: "While drop_entry is on, established TCP and UDP entries idle this long are freed."},
)

var syncKeys = newSection(false,
	key[Sync]{name: "listen", v: addrPortOf(func(s *Sync) *netip.AddrPort { return &s.Listen }), keep: always[Sync],
		need: "required: the ADDR:PORT this node receives sync messages on",
		doc:  "Where this node receives its peers' messages (UDP)."},
	key[Sync]{name: kPeers, v: addrPortsOf(func(s *Sync) *[]netip.AddrPort { return &s.Peers }), keep: always[Sync],
		doc: "The other nodes' listen addresses; messages from any other address are dropped."},
	key[Sync]{name: "key_file", v: keyFile{}, keep: always[Sync],
		need: fmt.Sprintf("required: a file with at least %d random bytes as hex, the same on every node (openssl rand -hex 32 > FILE)", MinSyncKeyBytes),
		doc:  "The file of the shared key, hex (openssl rand -hex 32), the same on every node; read with the configuration."},
)

// checkFor is a health check key's only: it applies to checks of types.
func checkFor(types ...CheckType) *onlyWhen[HealthCheck] {
	return &onlyWhen[HealthCheck]{doc: "Only for " + strings.TrimSuffix(typeList(types), " only"),
		why: func(h *HealthCheck) string {
			if !enumValid(checkTypeNames, h.Type) || slices.Contains(types, h.Type) {
				return ""
			}
			return fmt.Sprintf("applies to %s, not to this %s check", typeList(types), h.Type)
		}}
}

var httpCheck = checkFor(CheckHTTP, CheckHTTPS)

// whenApplies is a keep that writes a key whenever it applies.
func whenApplies(only *onlyWhen[HealthCheck]) func(*HealthCheck) bool {
	return func(h *HealthCheck) bool { return only.why(h) == "" }
}

var checkKeys = newSection(false,
	key[HealthCheck]{name: "type", v: choiceOf(func(h *HealthCheck) *CheckType { return &h.Type }, 0, checkTypeNames),
		keep: always[HealthCheck], need: "required: " + enumList(checkTypeNames), req: "required: " + enumList(checkTypeNames),
		doc: "tcp: connect; http, https: GET; udp: request and reply; exec: a command's exit status."},
	key[HealthCheck]{name: kPort, v: fullRange(func(h *HealthCheck) *uint16 { return &h.Port }, 0),
		keep: func(h *HealthCheck) bool { return h.Type != CheckExec },
		doc:  "The backend port probed; required except for exec, which gets it as {{port}}."},
	key[HealthCheck]{name: kPath, v: text[HealthCheck]{plain[HealthCheck, string]{func(h *HealthCheck) *string { return &h.Path }, DefaultHTTPPath}},
		only: httpCheck, keep: whenApplies(httpCheck),
		doc: "The request target: an absolute path, with an optional query."},
	key[HealthCheck]{name: "expect_status", v: numberOf(func(h *HealthCheck) *uint16 { return &h.ExpectStatus }, DefaultExpectStatus, 100, 599),
		only: httpCheck, keep: whenApplies(httpCheck),
		doc: "The HTTP status that counts as healthy."},
	key[HealthCheck]{name: kExpectBody, v: textOf(func(h *HealthCheck) *string { return &h.ExpectBody }), only: httpCheck,
		doc: "A substring the first 64 KiB of the body must hold (at most 4096 bytes)."},
	key[HealthCheck]{name: kHost, v: textOf(func(h *HealthCheck) *string { return &h.Host }), only: httpCheck,
		doc: "The Host header, also the TLS server name."},
	key[HealthCheck]{name: "tls_skip_verify", v: flagOf(func(h *HealthCheck) *bool { return &h.TLSSkipVerify }),
		only: checkFor(CheckHTTPS), keep: whenApplies(checkFor(CheckHTTPS)),
		doc: "Do not verify the backend's certificate."},
	key[HealthCheck]{name: kPayload, v: payloadOf(func(h *HealthCheck) *[]byte { return &h.Payload }), only: checkFor(CheckUDP),
		doc: "Required: the datagram sent (at most 65507 bytes)."},
	key[HealthCheck]{name: kExpect, v: payloadOf(func(h *HealthCheck) *[]byte { return &h.Expect }), only: checkFor(CheckUDP),
		defDoc: "any reply",
		doc:    "Bytes the reply must hold (at most 4096)."},
	key[HealthCheck]{name: kCommand, v: stringsOf(func(h *HealthCheck) *[]string { return &h.Command }), only: checkFor(CheckExec),
		doc: "Required: the argv, run without a shell; {{address}} and {{port}} are replaced (also XLB_BACKEND, XLB_PORT)."},
	key[HealthCheck]{name: "interval", v: durationOf(func(h *HealthCheck) *time.Duration { return &h.Interval },
		DefaultCheckInterval, MinCheckInterval, MaxCheckInterval), keep: always[HealthCheck],
		doc: "Time between two probes of a target."},
	key[HealthCheck]{name: kTimeout, v: durationOf(func(h *HealthCheck) *time.Duration { return &h.Timeout }, 0, MinCheckTimeout, MaxCheckInterval).checkedByRules(),
		keep: always[HealthCheck], derive: checkTimeout, defDoc: "1s, or half the interval when shorter",
		doc: "Time allowed for one probe, shorter than the interval."},
	key[HealthCheck]{name: "rise", v: numberOf(func(h *HealthCheck) *int { return &h.Rise }, DefaultRise, 1, MaxRiseFall),
		keep: always[HealthCheck], doc: "Consecutive successes that bring a target up."},
	key[HealthCheck]{name: "fall", v: numberOf(func(h *HealthCheck) *int { return &h.Fall }, DefaultFall, 1, MaxRiseFall),
		keep: always[HealthCheck], doc: "Consecutive failures that take a target down."},
	key[HealthCheck]{name: "jitter", v: fractionOf(func(h *HealthCheck) *float64 { return &h.Jitter }, DefaultJitter),
		keep: always[HealthCheck], doc: "Share of the interval by which each wait is shortened at random, so probes spread out."},
)

// persistenceTimeout is written as Go writes durations ("5m0s").
var persistenceTimeout = func() value[Persistence] {
	v := durationOf(func(p *Persistence) *time.Duration { return &p.Timeout }, 0, MinTimeout, MaxPersistenceTimeout)
	v.format, v.unset = time.Duration.String, true
	return v
}()

// wholeSeconds is a duration of whole seconds, 0..max.
func wholeSeconds[T any](at func(*T) *time.Duration, def, max time.Duration) duration[T] {
	v := durationOf(at, def, 0, max)
	v.whole = true
	return v
}

var gracefulRestartTime = func() value[BGP] {
	v := wholeSeconds(func(b *BGP) *time.Duration { return &b.GracefulRestartTime }, DefaultGracefulRestartTime, MaxGracefulRestartTime)
	v.zero = " (0: no graceful restart)"
	return v
}()

// keepaliveDefault is RFC 4271 10: a third of the hold time, in whole
// seconds.
func keepaliveDefault(p *BGPPeer) error {
	p.Keepalive = (p.HoldTime / 3).Truncate(time.Second)
	return nil
}

func checkTimeout(h *HealthCheck) error {
	h.Timeout = min(DefaultCheckTimeout, h.Interval/2)
	return nil
}

var poolKeys = newSection(false,
	key[Pool]{name: "backends", v: entriesOf(func(p *Pool) *[]Backend { return &p.Backends }, backendKeys, "backends"),
		keep: func(p *Pool) bool { return len(p.Include) == 0 },
		doc:  "The pool's own backends; no address twice."},
	key[Pool]{name: kInclude, v: stringsOf(func(p *Pool) *[]string { return &p.Include }),
		doc: "Pools whose backends belong to this one too, after its own, depth first."},
	key[Pool]{name: kHealthCheck, v: textOf(func(p *Pool) *string { return &p.HealthCheck }),
		doc: "The check of the pool's backends and of those of included pools that name none."},
)

var backendKeys = newSection(true,
	key[Backend]{name: kAddress, v: addressOf(func(b *Backend) *netip.Addr { return &b.Addr }), keep: always[Backend],
		req: "required", doc: "The backend's unicast address."},
	key[Backend]{name: "weight", v: numberOf(func(b *Backend) *uint32 { return &b.Weight }, DefaultWeight, 0, MaxWeight),
		keep: always[Backend], doc: "Share of new flows relative to the pool's other backends; 0 takes none."},
	key[Backend]{name: "method", older: "encap", v: choice[Backend, Encap]{plain: plain[Backend, Encap]{at: func(b *Backend) *Encap { return &b.Encap }},
		names: encapNames, unset: true},
		defDoc: "the service's", doc: "The forwarding method to this backend."},
	key[Backend]{name: kPort, v: fullRange(func(b *Backend) *uint16 { return &b.Port }, 0),
		defDoc: "the VIP's port", doc: "Method nat only: the port the VIP's port is rewritten to."},
	key[Backend]{name: "state", v: drainState{}, doc: "drain: no new flows, tracked flows stay."},
	key[Backend]{name: kHealthCheck, v: textOf(func(b *Backend) *string { return &b.HealthCheck }),
		defDoc: "the pool's", doc: "The check of this backend."},
)

var serviceKeys = func() *section[Service] {
	s := newSection(false,
		key[Service]{name: kName, v: textOf(func(s *Service) *string { return &s.Name }), keep: always[Service],
			req: "required", doc: "The service's name, unique: 1 to 64 of A-Z a-z 0-9 _ . -."},
		key[Service]{name: kVIP, v: addressOf(func(s *Service) *netip.Addr { return &s.VIP }), keep: always[Service],
			req: "required", doc: "The VIP, a unicast IPv4 or IPv6 address."},
		key[Service]{name: kPort, v: fullRange(func(s *Service) *uint16 { return &s.Port }, 0), keep: always[Service],
			need: "required (0 serves all ports)", doc: "Destination port; 0 serves every port (a service on the port takes precedence)."},
		key[Service]{name: "protocol", v: choiceOf(func(s *Service) *Proto { return &s.Proto }, 0, protoNames), keep: always[Service],
			req: "required: " + enumList(protoNames), doc: "The IP protocol."},
		key[Service]{name: kPools, v: stringsOf(func(s *Service) *[]string { return &s.Pools }), keep: always[Service],
			req: "required: the pools serving the service, in order of preference",
			doc: "Pools in order of preference: new flows go to the first that can take them."},
		key[Service]{name: kScheduler, v: choiceOf(func(s *Service) *Scheduler { return &s.Scheduler }, SchedulerMaglev, schedulerNames),
			keep: always[Service], doc: "How a new flow's backend is chosen (docs/ARCHITECTURE.md, Schedulers)."},
		key[Service]{name: kTableSize, v: fullRange(func(s *Service) *uint32 { return &s.TableSize }, DefaultTableSize),
			keep: always[Service], doc: "The Maglev table size: a prime, at most 4194304, at least the backends of each pool (better 100 times)."},
		key[Service]{name: "method", older: "encap", v: choiceOf(func(s *Service) *Encap { return &s.Encap }, EncapGRE, encapNames),
			keep: always[Service], doc: "The forwarding method to backends (docs/ARCHITECTURE.md, Forwarding methods)."},
		key[Service]{name: "min_healthy", v: fractionOf(func(s *Service) *float64 { return &s.MinHealthy }, 0),
			keep: always[Service], defDoc: "0: at least one",
			doc: "Share of a pool's backends that must be usable for the pool to be chosen."},
		key[Service]{name: "withdraw_when_down", v: flagOf(func(s *Service) *bool { return &s.WithdrawWhenDown }),
			keep: always[Service], doc: "Withdraw the VIP from BGP while no pool has a usable backend."},
		key[Service]{name: kFragments, v: flagOf(func(s *Service) *bool { return &s.Fragments }),
			keep: always[Service], doc: "IP fragments reach the unfragmented flow's backend; false: dropped and counted."},
		key[Service]{name: kSourceNetmask, v: prefixLenOf(func(s *Service) *uint8 { return &s.SourceNetmask }, 32),
			doc: "maglev-source and sh: the IPv4 client prefix hashed."},
		key[Service]{name: kSourceNetmask6, v: prefixLenOf(func(s *Service) *uint8 { return &s.SourceNetmask6 }, 128),
			doc: "maglev-source and sh: the IPv6 client prefix hashed."},
		key[Service]{name: kPersistence, v: optionalOf(func(s *Service) **Persistence { return &s.Persistence }, persistenceKeys),
			doc: "Keep a client on one backend across connections (IPVS -p, -M)."},
	)
	s.after = func(_ *decoder, _ string, s *Service) {
		if p := s.Persistence; p != nil && p.Timeout == 0 && s.Proto == ProtoTCP {
			p.Timeout = DefaultPersistenceTimeout
		}
	}
	return s
}()

var persistenceKeys = newSection(false,
	key[Persistence]{name: kTimeout, v: persistenceTimeout,
		defDoc: "300s for TCP; required for UDP",
		doc:    "How long a template lives after its last use (a new connection of the client or a packet of a tracked one); it lives on while a tracked connection of it does."},
	key[Persistence]{name: "netmask", v: prefixLenOf(func(p *Persistence) *uint8 { return &p.Netmask }, 32),
		doc: "The IPv4 client prefix a template covers."},
	key[Persistence]{name: "netmask6", v: prefixLenOf(func(p *Persistence) *uint8 { return &p.Netmask6 }, 128),
		doc: "The IPv6 client prefix a template covers."},
	key[Persistence]{name: kGroup, v: textOf(func(p *Persistence) *string { return &p.Group }),
		doc: "Services naming one group share templates: a client reaches one backend address through all."},
)

var bgpKeys = newSection(false,
	key[BGP]{name: "mode", v: choiceOf(func(b *BGP) *BGPMode { return &b.Mode }, BGPSpeaker, bgpModeNames),
		doc: "speaker: the embedded speaker; external: kernel routes for the host's BIRD or FRR (docs/BGP.md)."},
	key[BGP]{name: "asn", v: asnOf(func(b *BGP) *uint32 { return &b.ASN }), only: speakerOnly, keep: always[BGP],
		need: "required: the local AS number", doc: "The local AS number."},
	key[BGP]{name: kRouterID, v: addressOf(func(b *BGP) *netip.Addr { return &b.RouterID }), only: speakerOnly, keep: always[BGP],
		defDoc: "node.address", doc: "The BGP identifier, an IPv4 address unique to this node."},
	key[BGP]{name: "listen_port", v: listenPort{}, only: speakerOnly, keep: always[BGP],
		doc: "The port sessions are accepted on; 0 or -1: none (connect out only)."},
	key[BGP]{name: "graceful_restart_time", v: gracefulRestartTime, only: speakerOnly, keep: always[BGP],
		doc: "Restart time advertised (RFC 4724): how long routers keep the routes while xlbd restarts; 0: off."},
	key[BGP]{name: "shutdown_wait", v: durationOf(func(b *BGP) *time.Duration { return &b.ShutdownWait },
		DefaultShutdownWait, 0, MaxShutdownWait), only: speakerOnly, keep: always[BGP],
		doc: "How long a node drain announces with GRACEFUL_SHUTDOWN (RFC 8326) before withdrawing."},
	key[BGP]{name: kNextHop4, v: addressOf(func(b *BGP) *netip.Addr { return &b.NextHop4 }), only: speakerOnly,
		defDoc: "the session's address", doc: "Next hop announced for IPv4 VIPs; needed for them over IPv6 sessions."},
	key[BGP]{name: kNextHop6, v: addressOf(func(b *BGP) *netip.Addr { return &b.NextHop6 }), only: speakerOnly,
		defDoc: "the session's address", doc: "Next hop announced for IPv6 VIPs; needed for them over IPv4 sessions."},
	key[BGP]{name: kPeers, v: entriesOf(func(b *BGP) *[]BGPPeer { return &b.Peers }, peerKeys, "routers"), only: speakerOnly,
		doc: "The routers announced to; no address twice."},
	key[BGP]{name: kRouteTable, v: fullRange(func(b *BGP) *uint32 { return &b.RouteTable }, 0), only: externalOnly,
		doc: "The kernel table of the VIP routes (not 253 or 255)."},
	key[BGP]{name: kDummyInterface, v: textOf(func(b *BGP) *string { return &b.DummyInterface }), only: externalOnly,
		doc: "Instead of route_table: a dummy interface holding the VIPs as addresses."},
)

var peerKeys = newSection(true,
	key[BGPPeer]{name: kAddress, v: addressOf(func(p *BGPPeer) *netip.Addr { return &p.Addr }), keep: always[BGPPeer],
		req: "required", doc: "The router's address; a link-local one with %interface."},
	key[BGPPeer]{name: "asn", v: asnOf(func(p *BGPPeer) *uint32 { return &p.ASN }), keep: always[BGPPeer],
		need: "required: the router's AS number (the local one for iBGP)", doc: "The router's AS number."},
	key[BGPPeer]{name: kHoldTime, v: wholeSeconds(func(p *BGPPeer) *time.Duration { return &p.HoldTime }, DefaultHoldTime, MaxHoldTime),
		keep: always[BGPPeer], doc: "Hold time proposed: 0 (no keepalives) or at least 3s."},
	key[BGPPeer]{name: kKeepalive, v: wholeSeconds(func(p *BGPPeer) *time.Duration { return &p.Keepalive }, 0, MaxHoldTime),
		keep: always[BGPPeer], derive: keepaliveDefault, defDoc: "a third of hold_time",
		doc: "Time between KEEPALIVEs, whole seconds, 1s..hold_time (0 with hold_time 0)."},
	key[BGPPeer]{name: kPassword, v: textOf(func(p *BGPPeer) *string { return &p.Password }), keep: always[BGPPeer],
		doc: "TCP MD5 key (RFC 2385), at most 80 bytes."},
	key[BGPPeer]{name: kPort, v: fullRange(func(p *BGPPeer) *uint16 { return &p.Port }, DefaultBGPPort),
		keep: always[BGPPeer], doc: "The router's BGP port."},
)

// Paths of entries, shared by the decoder and the rules so that both name
// a field the same way.

func poolPath(name string) string { return keyed(kPools, name) }

func servicePath(i int) string { return index("services", i) }

func backendPath(pool string, i int) string { return index(join(poolPath(pool), "backends"), i) }

func checkPath(name string) string { return keyed("health_checks", name) }

func peerPath(i int) string { return index(join(kBGP, kPeers), i) }
