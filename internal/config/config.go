package config

import (
	"net"
	"net/netip"
	"strconv"
	"time"
)

// Defaults and limits of the configuration file. A field left out of the file
// takes its default; a value outside its limits is rejected.
const (
	// DefaultTableSize is the Maglev lookup table size (M) of a service
	// (the paper's 65537, a prime).
	DefaultTableSize = 65537
	// MaxTableSize bounds table_size; the largest prime allowed is 4194301.
	MaxTableSize = 4194304

	// DefaultConntrackEntries is the per-CPU connection tracking capacity.
	DefaultConntrackEntries = 1 << 20
	// MinConntrackEntries and MaxConntrackEntries bound conntrack_entries.
	MinConntrackEntries = 1024
	MaxConntrackEntries = 1 << 26
	// DefaultMaxServices is node.max_services when absent: the services
	// (VIP, port, protocol) the data plane's maps hold. xlbd maps each
	// service's table into its memory, two while a table is replaced: 30,000
	// stays within the default vm.max_map_count (65,530).
	DefaultMaxServices = 30000
	// MaxMaxServices bounds node.max_services.
	MaxMaxServices = 1 << 20
	// DefaultMaxBackends is node.max_backends when absent: the (service,
	// backend) pairs the maps hold, over all pools of all services.
	DefaultMaxBackends = 327680
	// MaxMaxBackends bounds node.max_backends: a backend's id has 19 bits
	// in a tracked connection, and 0 means none.
	MaxMaxBackends = 1<<19 - 1
	// MaxFloodSynRate bounds node.flood_syn_rate and
	// node.flood_new_flow_rate (new flows per second per CPU).
	MaxFloodSynRate = 1 << 30
	// The defaults of node.defence: the fill of the fullest CPU's slice
	// of the connection table at which each defence mode goes on, the
	// cheapest first. secure_tcp only ages out half-open and closing
	// entries sooner, which no established flow notices: on at half full.
	// drop_entry frees idle entries and makes full buckets give up
	// unestablished ones first: on at three quarters, about where 8-way
	// buckets of random flows begin to overflow. drop_packet leaves new
	// flows untracked (still forwarded by the Maglev table, which gives an
	// untracked flow the same backend while the table is unchanged): the
	// last resort, at 90%. Each goes off 10 points below, and only after
	// 5 s there, so that neither a fill hovering at a threshold nor the
	// modes' own freeing of the flood's entries makes it flap.
	DefaultSecureTCPAt       = 0.5
	DefaultDropEntryAt       = 0.75
	DefaultDropPacketAt      = 0.9
	DefaultDefenceHysteresis = 0.1
	// DefaultSecureTCPSynTimeout and DefaultSecureTCPFinTimeout are the
	// timeouts of half-open and closing entries while secure_tcp is on: a
	// handshake or a close takes round trips, not seconds.
	DefaultSecureTCPSynTimeout = 5 * time.Second
	DefaultSecureTCPFinTimeout = 10 * time.Second
	// DefaultDropEntryIdle: while drop_entry is on, established entries
	// idle this long are freed.
	DefaultDropEntryIdle = time.Minute
	// MaxDefenceHysteresis bounds node.defence.hysteresis.
	MaxDefenceHysteresis = 0.5
	// DefaultICMPEchoRate is node.icmp_echo_rate when absent: echo requests
	// to a VIP address each CPU answers per second.
	DefaultICMPEchoRate = 100
	// MaxICMPEchoRate bounds node.icmp_echo_rate.
	MaxICMPEchoRate = 1 << 24
	// DefaultICMPTooBigRate is node.icmp_too_big_rate when absent: ICMP
	// frag-needed / packet-too-big each CPU sends per second.
	DefaultICMPTooBigRate = 1000
	// DefaultGUEPort is node.gue_port when absent.
	DefaultGUEPort = 6080
	// MaxICMPTooBigRate bounds node.icmp_too_big_rate.
	MaxICMPTooBigRate = 1 << 24
	// MaxFragmentPool bounds node.fragment_pool (LB nodes).
	MaxFragmentPool = 64
	// DefaultFragmentTableEntries is node.fragment_table_entries when
	// absent: datagrams whose first fragment's decision is kept.
	DefaultFragmentTableEntries = 65536
	// MinFragmentTableEntries and MaxFragmentTableEntries bound it.
	MinFragmentTableEntries = 1024
	MaxFragmentTableEntries = 1 << 24
	// DefaultTraceRate is node.trace_rate when absent: packet tracer
	// records each CPU emits per second.
	DefaultTraceRate = 10
	// MaxTraceRate bounds node.trace_rate.
	MaxTraceRate = 1 << 20

	// DefaultTCPTimeout is the idle timeout of an established TCP flow.
	DefaultTCPTimeout = 15 * time.Minute
	// DefaultTCPSynTimeout is the idle timeout of a TCP flow that has only
	// been seen opening (SYN).
	DefaultTCPSynTimeout = 60 * time.Second
	// DefaultTCPFinTimeout is the idle timeout of a TCP flow that has been
	// seen closing (FIN or RST).
	DefaultTCPFinTimeout = 2 * time.Minute
	// DefaultUDPTimeout is the idle timeout of a UDP flow.
	DefaultUDPTimeout = 5 * time.Minute
	// MinTimeout and MaxTimeout bound every idle timeout.
	MinTimeout = time.Second
	MaxTimeout = 2 * time.Hour

	// DefaultWeight is a backend's weight when the file gives none.
	DefaultWeight = 1
	// MaxWeight bounds a backend's weight.
	MaxWeight = 65535

	// MaxNameLen bounds node, pool and service names.
	MaxNameLen = 64

	// MaxFileSize bounds the size of a configuration file; Parse rejects
	// anything larger before decoding it.
	MaxFileSize = 16 << 20
)

// Config is one validated configuration file in typed form. Values returned by
// Parse and Load have their defaults filled in and have passed Validate; a
// Config built by hand should be checked with Validate before use.
type Config struct {
	Node Node
	// HealthChecks are the named health checks in file order; names are
	// unique.
	HealthChecks []HealthCheck
	// Pools are in file order; names are unique.
	Pools []Pool
	// Services are in file order; names and (VIP, port, protocol) are unique.
	Services []Service
	// BGP configures the embedded BGP speaker (docs/BGP.md); nil when the
	// file has no bgp section (no route is announced).
	BGP *BGP
	// Kubernetes configures the Kubernetes source; nil when the file has
	// no kubernetes section.
	Kubernetes *Kubernetes
}

// Node holds the settings of the machine running xlb.
type Node struct {
	// Name names this xlb instance (the bpffs pin directory, the packet
	// tracer's replies). It matches [A-Za-z0-9_.-]{1,64} and is neither "."
	// nor "..". Parse defaults it to the host name.
	Name string
	// Interface is the network interface the XDP program is attached to.
	Interface string
	// APISocket is the API's unix socket; "" means the default,
	// /run/xlb/<name>.sock (xlbd's --api-socket overrides it).
	APISocket string
	// MetricsAddr is the metrics listener's HOST:PORT; "off" disables it;
	// "" means the default 127.0.0.1:9469, skipped with a warning when
	// another instance holds it (xlbd's --metrics-addr overrides it).
	MetricsAddr string
	// StatusPage serves the live status page at / of the metrics listener
	// (xlbd's --status-page also turns it on). Read at start.
	StatusPage bool
	// Address is the IPv4 source address of encapsulated packets sent to
	// IPv4 backends; it is the zero Addr when no IPv4 backend is used.
	Address netip.Addr
	// Address6 is the IPv6 source address of encapsulated packets sent to
	// IPv6 backends; it is the zero Addr when no IPv6 backend is used.
	Address6 netip.Addr
	// GatewayMAC is the next hop used when the kernel FIB has no answer
	// (docs/DESIGN.md, Next hop); nil when not configured.
	GatewayMAC net.HardwareAddr
	// XDPMode selects how the program is attached.
	XDPMode XDPMode
	// ConntrackEntries is the connection tracking capacity of each CPU.
	ConntrackEntries uint32
	// MaxServices is how many services the data plane holds; read at
	// start. Default DefaultMaxServices.
	MaxServices uint32
	// MaxBackends is how many (service, backend) pairs it holds: each
	// service counts each backend of its pools once. Read at start.
	// Default DefaultMaxBackends.
	MaxBackends uint32
	// FloodSynRate is how many new SYN flows per second each CPU tracks;
	// beyond it new SYN flows are forwarded by Maglev alone, untracked, so a
	// SYN flood cannot evict established connections.
	// 0: no limit.
	FloodSynRate uint32
	// FloodNewFlowRate is the same for the other new flows (TCP whose
	// first packet is not a SYN, UDP): beyond it they are forwarded
	// untracked and not looked for in other CPUs' slices, so an ACK or UDP
	// flood of random tuples cannot evict established connections either.
	// 0: FloodSynRate.
	FloodNewFlowRate uint32
	// Defence are the defence modes switched on by the connection
	// table's fill.
	Defence Defence
	// ICMPEchoRate is how many ICMP/ICMPv6 echo requests to a VIP address
	// each CPU answers per second; over it they are dropped.
	// 0: never answered. Default DefaultICMPEchoRate.
	ICMPEchoRate uint32
	// ICMPTooBigRate is how many ICMP fragmentation-needed / ICMPv6
	// packet-too-big errors each CPU sends per second to clients whose
	// packets (IPv4 with DF, IPv6) do not fit the backend's egress MTU once
	// encapsulated; over it those packets are dropped. 0: never sent.
	// Default DefaultICMPTooBigRate.
	ICMPTooBigRate uint32
	// TraceRate is how many packet tracer records each CPU
	// emits per second; marked packets beyond it are forwarded without a
	// record. 0: tracer off. Default DefaultTraceRate.
	TraceRate uint32
	// Timeouts are the connection tracking idle timeouts.
	Timeouts Timeouts
	// FragmentPool lists the addresses of every node of the LB pool,
	// this node's node.address or node.address6 among them, identically
	// on all nodes (order does not matter: it is sorted). Fragments of
	// services with Fragments set are redirected to the node their
	// (source, destination, protocol) hashes to (docs/ARCHITECTURE.md, IP
	// fragments). Empty: no
	// redirect, fragments are handled where they arrive (one node).
	FragmentPool []netip.Addr
	// FragmentTableEntries bounds the fragment table.
	FragmentTableEntries uint32
	// Sync is connection sync with the other nodes; nil: off.
	Sync *Sync
	// GUEPort is the destination UDP port of GUE packets (method gue),
	// 1..65535. Default DefaultGUEPort.
	GUEPort uint16
}

// Timeouts are the idle timeouts of connection tracking entries
// (docs/DESIGN.md, Connection tracking),
// by protocol and TCP state, each between MinTimeout and MaxTimeout.
type Timeouts struct {
	TCP    time.Duration
	TCPSyn time.Duration
	TCPFin time.Duration
	UDP    time.Duration
}

// Defence holds the defence modes' settings (docs/CONFIG.md, node.defence).
// Each mode goes on when the fill of the fullest CPU's slice of the
// connection table reaches its threshold, a fraction, and off when the
// fill has stayed below the threshold less Hysteresis for 5 sweeps (one a
// second) in a row; threshold 0: never on.
// The thresholds that are set rise in the order SecureTCP, DropEntry,
// DropPacket.
type Defence struct {
	// SecureTCP: shorter timeouts for half-open and closing entries
	// (SecureTCPSyn, SecureTCPFin).
	SecureTCP float64
	// DropEntry: the sweep frees established entries idle DropEntryIdle
	// and unestablished ones idle a moment, and a full bucket gives up an
	// unestablished entry before an established one.
	DropEntry float64
	// DropPacket: a share of new flows, rising with the fill from the
	// threshold to a full table, is forwarded untracked.
	DropPacket float64
	// Hysteresis is how far below its threshold a mode goes off.
	Hysteresis float64
	// SecureTCPSyn and SecureTCPFin are the timeouts of SYN and CLOSING
	// entries while SecureTCP is on (longer than the normal ones: the
	// normal ones); 0: the normal ones.
	SecureTCPSyn, SecureTCPFin time.Duration
	// DropEntryIdle: see DropEntry; 0: the normal timeouts.
	DropEntryIdle time.Duration
}

// Pool is a named set of backends and included pools, as written in the file.
type Pool struct {
	Name string
	// Backends are the pool's own backends in file order; no address
	// appears twice.
	Backends []Backend
	// Include names other pools whose backends belong to this pool too,
	// in file order.
	Include []string
	// HealthCheck names the health check of the pool's backends; "" for
	// none. It applies to the pool's own backends and to those of included
	// pools that set none of their own (see Desired).
	HealthCheck string
}

// Backend is one service endpoint.
type Backend struct {
	// Addr is the backend's unicast IPv4 or IPv6 address, without zone.
	Addr netip.Addr
	// Weight is the backend's share of new flows relative to the other
	// backends of its pool, 0..MaxWeight. Weight 0 takes no new flows.
	Weight uint32
	// Encap overrides the service's forwarding method for this backend
	// (the file's method, or its older name encap); EncapUnset means "use
	// the service's".
	Encap Encap
	// Port is the backend's port for method nat (the VIP's port is
	// rewritten to it); 0 keeps the VIP's port. Other methods cannot
	// change the port.
	Port uint16
	// Drain means the backend takes no new flows but keeps the flows it is
	// tracked for.
	Drain bool
	// HealthCheck names the health check deciding whether the backend is
	// healthy. In a Config it is the backend's own override ("": its
	// pool's). In a Desired it is the check in effect after inheritance
	// ("": the backend is not checked and counts as healthy).
	HealthCheck string
}

// Service is one VIP, port and protocol, as written in the file.
type Service struct {
	Name string
	// VIP is a unicast IPv4 or IPv6 address without zone.
	VIP netip.Addr
	// Port is the destination port; 0 serves every port of VIP and
	// protocol (an "all ports" VIP).
	Port  uint16
	Proto Proto
	// Pools name the pools serving the service, in order of preference
	// (docs/DESIGN.md, Ordered pools).
	Pools []string
	// Scheduler chooses the backend of a new flow (sched.go).
	Scheduler Scheduler
	// SourceNetmask and SourceNetmask6 are the prefix lengths a client's
	// IPv4 / IPv6 address is cut to before the source-hashing schedulers
	// (maglev-source, sh) hash it; 0 (absent): the whole address (see
	// Prefix).
	SourceNetmask, SourceNetmask6 uint8
	// Persistence keeps a client on one backend across connections; nil
	// when the service has none.
	Persistence *Persistence
	// TableSize is the Maglev table size M, a prime <= MaxTableSize.
	TableSize uint32
	// Encap is the forwarding method towards backends (the file's
	// method, or its older name encap; never EncapUnset).
	Encap Encap
	// MinHealthy is the share of a pool's backends, 0..1, that must be
	// usable for the pool to be chosen; 0 means "at least
	// one". See DesiredService.ActivePoolWith.
	MinHealthy float64
	// WithdrawWhenDown asks BGP to withdraw the VIP while no pool of the
	// service has a usable backend (unless another service on the same
	// address still wants it announced).
	WithdrawWhenDown bool
	// Fragments: IP fragments to the service reach the backend the
	// unfragmented flow reaches; false: they are dropped and
	// counted (drop_fragment).
	Fragments bool
}

// Proto is an IP protocol number.
type Proto uint8

// The protocols a service may use, with their IANA numbers.
const (
	ProtoTCP Proto = 6
	ProtoUDP Proto = 17
)

// String returns the protocol's name as written in the file ("tcp", "udp").
func (p Proto) String() string { return enumString(protoNames, p) }

// Encap is a forwarding method towards backends (the file's method; the
// name is from when every method was a tunnel). The numbering is stable.
type Encap uint8

const (
	// EncapUnset is a backend's "no override: use the service's".
	EncapUnset Encap = iota
	// EncapGRE is GRE (RFC 2784), the paper's choice.
	EncapGRE
	// EncapIPIP is IP-in-IP in whichever flavour the address families
	// need: IPIP, IP6IP6, 4-in-6 or 6-in-4.
	EncapIPIP
	// EncapGUE is IP in UDP (GUE version 1, as the kernel's fou/gue
	// receives it) to node.gue_port, the UDP source port from the flow hash.
	EncapGUE
	// EncapDR is direct routing: the frame unchanged at L3, sent to the
	// backend's MAC on a directly connected segment.
	EncapDR
	// EncapNAT is destination NAT to the backend's address (and port);
	// the backend's replies come back through the node, which rewrites
	// their source to the VIP.
	EncapNAT
)

// String returns the method's name as written in the file ("gre",
// "ipip", "gue", "dr", "nat"), or "unset".
func (e Encap) String() string {
	if e == EncapUnset {
		return "unset"
	}
	return enumString(encapNames, e)
}

// XDPMode is how the XDP program is attached to the interface.
type XDPMode uint8

const (
	// XDPModeAuto uses native (driver) mode when the device delivers what
	// native XDP transmits, else generic.
	XDPModeAuto XDPMode = iota
	// XDPModeNative requires driver support.
	XDPModeNative
	// XDPModeGeneric is the slower skb mode, available everywhere.
	XDPModeGeneric
)

// String returns the mode's name as written in the file.
func (m XDPMode) String() string { return enumString(xdpModeNames, m) }

// enum is the underlying type of every enumeration here.
type enum interface{ ~uint8 }

// enumName pairs a file spelling with its typed value.
type enumName[T enum] struct {
	name string
	val  T
}

var (
	protoNames   = []enumName[Proto]{{"tcp", ProtoTCP}, {"udp", ProtoUDP}}
	encapNames   = []enumName[Encap]{{"gre", EncapGRE}, {"ipip", EncapIPIP}, {"gue", EncapGUE}, {"dr", EncapDR}, {"nat", EncapNAT}}
	xdpModeNames = []enumName[XDPMode]{{"auto", XDPModeAuto}, {"native", XDPModeNative}, {"generic", XDPModeGeneric}}
)

func enumString[T enum](names []enumName[T], v T) string {
	for _, n := range names {
		if n.val == v {
			return n.name
		}
	}
	return "invalid(" + strconv.Itoa(int(v)) + ")"
}

func enumValid[T enum](names []enumName[T], v T) bool {
	for _, n := range names {
		if n.val == v {
			return true
		}
	}
	return false
}

func enumList[T enum](names []enumName[T]) string {
	s := ""
	for i, n := range names {
		if i > 0 {
			s += ", "
		}
		s += n.name
	}
	return s
}
