// Package api serves xlbd's control API (docs/OPERATIONS.md): gRPC, defined in
// api/xlb/v1/xlb.proto, on a unix socket (mode 0600) and optionally on TCP
// with mutual TLS. The server translates between the wire messages and the
// plain Go types of this file; the daemon implements Backend, so every
// mutation runs through its single reconcile loop. Dial is the client side
// (xlbctl).
package api

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Backend is what the API server needs from the daemon. Its methods are
// called concurrently, one goroutine per RPC; an implementation serialises
// mutations itself (xlbd sends them to its reconcile loop). Errors are
// mapped to gRPC codes by the server: a config.ErrorList (or *config.Error)
// becomes INVALID_ARGUMENT with a ConfigErrors detail (field, line); errors
// wrapping ErrNotFound, ErrInvalidArgument, ErrFailedPrecondition,
// ErrUnavailable and ErrUnimplemented take the matching code; ctx errors
// CANCELLED / DEADLINE_EXCEEDED; anything else INTERNAL. The message is the
// error's text, so it should say what to do.
type Backend interface {
	// Status describes the node.
	Status(ctx context.Context) (StatusInfo, error)

	// Services returns every service of the running config, in config
	// order, each with every backend of every pool (a backend in two pools
	// of one service appears once, with the first pool's name) and the
	// counters read from the data plane.
	Services(ctx context.Context) ([]ServiceInfo, error)

	// GlobalCounters returns the data plane's global counters in enum
	// xlb_stat order (datapath.StatNames), summed over CPUs.
	GlobalCounters(ctx context.Context) ([]Counter, error)

	// ApplyConfig parses and validates yaml (config.Parse, with o.Source
	// naming the file in messages), checks it can be applied to the running
	// node, and computes the Diff against the running config (DiffDesired).
	// With o.DryRun it stops there. Otherwise it commits the config
	// atomically (docs/DESIGN.md, Atomic commit) and makes it the running config: it is
	// written to xlbd's config file (temporary file + rename), so that a
	// SIGHUP or a restart loads the same content. Any error leaves the
	// running state and the file untouched: the config's problems as a
	// config.ErrorList; a setting that needs a restart or a capacity
	// limit wrapped in ErrFailedPrecondition.
	ApplyConfig(ctx context.Context, yaml []byte, o ApplyOptions) (ApplyResult, error)

	// SetBackend sets (Weight, Drain) or clears (Reset) a runtime override
	// of backend u.Address in service u.Service, or in every service that
	// has it when u.Service is "". Exactly one of Weight, Drain and Reset
	// is set (the server checks). Overrides live on top of the config,
	// kept with the pins: they survive SIGHUP reloads, ApplyConfig and
	// restarts of xlbd, and end with a Reset, an ApplyConfig with
	// ResetOverrides or the backend leaving the config. The change is committed before
	// SetBackend returns. It returns the (service, backend) pairs affected;
	// an error wrapping ErrNotFound when there are none.
	SetBackend(ctx context.Context, u BackendUpdate) ([]BackendRef, error)

	// ConntrackDump scans the connection table and returns at most f.Limit
	// (> 0, set by the server) entries matching f, with the totals of the
	// scan. Entries of a real id that is no longer assigned have a zero
	// Backend and an empty Service.
	ConntrackDump(ctx context.Context, f ConntrackFilter) (ConntrackDump, error)

	// Explain runs one packet for p through the live program
	// (datapath.RunPacket) and reports the result. Frame is enough: the
	// server fills Headers from it (DescribeFrame) when they are empty.
	Explain(ctx context.Context, p ExplainPacket) (Explanation, error)

	// NodeDrain starts a node drain (BGP graceful shutdown, then withdraw)
	// and returns once it has begun; changed is false when the node was
	// already drained. Without BGP: an error wrapping
	// ErrFailedPrecondition.
	NodeDrain(ctx context.Context) (changed bool, err error)

	// NodeUndrain ends a node drain; changed is false when the node was not
	// drained.
	NodeUndrain(ctx context.Context) (changed bool, err error)
}

// Errors a Backend wraps to choose the gRPC code of a failure.
var (
	ErrNotFound           = errors.New("not found")
	ErrInvalidArgument    = errors.New("invalid argument")
	ErrFailedPrecondition = errors.New("failed precondition")
	ErrUnavailable        = errors.New("unavailable")
	ErrUnimplemented      = errors.New("not implemented")
)

// StatusInfo describes a node.
type StatusInfo struct {
	Node      string // node.name
	Interface string
	XDPMode   string // as attached: native | generic
	ProgramID uint32
	PinDir    string
	Version   string
	StartedAt time.Time
	SelfCheck SelfCheck
	BGP       []BGPSession // in config order; nil without BGP
	// External is set with bgp.mode external: the kept VIP routes.
	External  *ExternalRoutes
	Drained   bool
	Config    ConfigInfo
	Conntrack ConntrackOccupancy
	Overrides int // runtime backend overrides in effect
	// MetricsAddr is where metrics are served ("" for nowhere, and then
	// MetricsNote says why).
	MetricsAddr, MetricsNote string
	TX                       TXCheck
	Prober                   ProberStatus
	Cluster                  *ClusterInfo // nil without node.sync (cluster.go)
}

// TXCheck is the self-check's transmit check: does the interface deliver
// what the forwarder sends?
type TXCheck struct {
	OK     bool
	Detail string // the problem when !OK; when OK, what could not be checked
}

// ProberStatus is the blackbox prober's last round.
type ProberStatus struct {
	Enabled bool
	OK      bool // false: no VIP answered for several rounds (VIPs withdrawn)
	Probes  []Probe
}

// Probe is the last probe of one VIP.
type Probe struct {
	VIP       string // address:port/protocol
	Up        bool
	Latency   time.Duration
	Error     string
	CheckedAt time.Time
}

// SelfCheck is the forwarder's last self-check.
type SelfCheck struct {
	OK            bool
	LastError     string // of the latest failure; "" if none yet
	CheckedAt     time.Time
	LastFailureAt time.Time
}

// ExternalRoutes are the VIP routes of bgp.mode external (bgp.Kernel).
type ExternalRoutes struct {
	Where    string
	Prefixes []netip.Prefix
	Err      error
}

// BGPSession is one BGP peer (see bgp.PeerStatus).
type BGPSession struct {
	Peer                 netip.Addr
	ASN                  uint32
	State                string // idle, connect, active, opensent, openconfirm, established, stopped
	Uptime               time.Duration
	Advertised, Received uint64
	GracefulRestart      bool
}

// ConfigInfo describes the running config.
type ConfigInfo struct {
	// Source is the config file's path, or "api" (ApplyConfig), optionally
	// followed by the client's name for it: "api (web.yaml)".
	Source      string
	CommittedAt time.Time
	Generation  uint64 // successful commits since xlbd started
	Services    int
	Backends    int // (service, backend) pairs
}

// ConntrackOccupancy is the connection table's size and use.
type ConntrackOccupancy struct {
	Capacity uint64  // entries, all CPUs
	InUse    *uint64 // nil when not counted
	// Templates are the persistence templates in use; nil when not counted.
	Templates *uint64
	// Fill is the fill of the fullest CPU's slice, 0..1; nil when not
	// measured.
	Fill *float64
	// Defence tells, by name (secure_tcp, drop_entry, drop_packet), which
	// defence modes are on; nil when not known.
	Defence map[string]bool
}

// Proto is an IP protocol number.
type Proto uint8

// Protocols.
const (
	ProtoTCP Proto = 6
	ProtoUDP Proto = 17
)

func (p Proto) String() string {
	switch p {
	case ProtoTCP:
		return "tcp"
	case ProtoUDP:
		return "udp"
	}
	return fmt.Sprintf("proto-%d", uint8(p))
}

// Counters are packet, byte and new-flow totals.
type Counters struct {
	Packets, Bytes, NewFlows uint64
}

// Counter is one named global counter.
type Counter struct {
	Name  string // e.g. "drop_no_backend"
	Value uint64
}

// ServiceInfo is one service of the running config.
type ServiceInfo struct {
	Name       string
	ID         uint32 // data plane service id
	VIP        netip.Addr
	Port       uint16 // 0: all ports
	Proto      Proto
	Scheduler  string
	TableSize  uint32
	Encap      string   // gre | ipip
	ActivePool string   // "" when no pool has a usable backend
	Pools      []string // in order of preference
	Counters   Counters
	Backends   []BackendInfo
	Probe      *Probe // the prober's last probe of the VIP; nil: prober off, or not probed yet
	// Persistence is the service's; nil without.
	Persistence *Persistence
}

// Persistence is a service's persistence: the client's address under
// Netmask (IPv4) or Netmask6 (IPv6) keeps its backend for Timeout after
// its last use; Group names the services sharing templates.
type Persistence struct {
	Timeout           time.Duration
	Netmask, Netmask6 uint8
	Group             string
}

// BackendInfo is one backend of one service. Weight and Drain are the values
// in effect (the override's when there is one).
type BackendInfo struct {
	Address  netip.Addr
	Service  string // filled in by the server when empty
	Pool     string
	Weight   uint32
	Drain    bool
	Override *Override // nil when none applies
	Health   Health
	// InDataPlane: the backend is a real of the service in the data plane
	// (its tracked flows continue).
	InDataPlane bool
	// TableEntries is how many Maglev table entries point to it.
	TableEntries uint32
	RealID       uint32
	Encap        string // the forwarding method: the backend's own, or the service's
	Local        bool   // the backend is this node (forward: Local)
	Counters     Counters
	TrackedFlows *uint64 // nil when not counted
	// ActiveConns and InactConns are its connections on this node
	// (datapath.Conns: IPVS ActiveConn, InActConn).
	ActiveConns, InactConns int64
}

// Override is a runtime change of a backend on top of the config.
type Override struct {
	Weight *uint32
	Drain  *bool
	Since  time.Time
}

// Health is a backend's health as the monitor sees it (health.Status).
type Health struct {
	Check     string // "" = unchecked, counts as healthy
	Healthy   bool
	Known     bool
	Since     time.Time
	LastError string
	LastProbe time.Time
}

// ApplyOptions qualify ApplyConfig.
type ApplyOptions struct {
	Source         string // names the file in error messages; "" = "api"
	DryRun         bool
	ResetOverrides bool
}

// ApplyResult is what ApplyConfig did.
type ApplyResult struct {
	Diff       Diff
	Committed  bool   // false for a dry run
	Generation uint64 // the running config's generation afterwards
}

// BackendRef names one backend of one service.
type BackendRef struct {
	Service string
	Address netip.Addr
}

// BackendUpdate is a SetBackend request.
type BackendUpdate struct {
	Address netip.Addr
	Service string  // "" = every service that has Address
	Weight  *uint32 // set the weight (0..65535)
	Drain   *bool   // drain (true) or undrain (false)
	Reset   bool    // clear every override
}

// CTState is a connection tracking state (enum xlb_ct_state).
type CTState uint8

// Connection tracking states; 0 as a filter means any.
const (
	CTSyn         CTState = 1 // TCP, only SYNs seen
	CTEstablished CTState = 2 // TCP past the SYN, or UDP
	CTClosing     CTState = 3 // TCP, FIN or RST seen
)

func (s CTState) String() string {
	switch s {
	case 0:
		return "any"
	case CTSyn:
		return "syn"
	case CTEstablished:
		return "established"
	case CTClosing:
		return "closing"
	}
	return fmt.Sprintf("state-%d", uint8(s))
}

// ConntrackFilter selects connection table entries; zero fields match all.
type ConntrackFilter struct {
	Service        string
	Backend        netip.Addr
	State          CTState
	Limit          int
	IncludeExpired bool
	// Templates: the live persistence templates instead of the connection
	// table (ConntrackEntry.Bucket is the slot, State 0, Age the time the
	// template lives on).
	Templates bool
}

// ConntrackDump is the result of a scan.
type ConntrackDump struct {
	Entries  []ConntrackEntry
	InUse    uint64 // entries in use seen by the scan
	Matched  uint64 // of those, matching the filter (may exceed len(Entries))
	Capacity uint64
}

// ConntrackEntry is one way of one bucket of one CPU's slice of the table.
// The 5-tuple is not stored: the table is keyed by the flow hash.
type ConntrackEntry struct {
	CPU     uint32
	Bucket  uint32
	Way     uint8
	Tag     uint32 // flow hash >> 37 (maglev.CTTag)
	RealID  uint32
	Backend netip.Addr // zero when the real id is no longer assigned
	Service string
	State   CTState
	Age     time.Duration // since last seen; of a template, the time it lives on
	Expired bool          // idle past its state's timeout
}

// ExplainPacket is the packet Explain crafts.
type ExplainPacket struct {
	Src, Dst netip.AddrPort
	Proto    Proto
	TCPFlags uint8 // FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10, URG 0x20
}

// CTResult is what the connection table did for an explained packet.
type CTResult uint8

// Connection table results.
const (
	CTUnknown CTResult = iota
	CTHit
	CTRemoteHit
	CTMiss
	CTReselect
	CTNotLookedUp
)

func (r CTResult) String() string {
	switch r {
	case CTHit:
		return "hit"
	case CTRemoteHit:
		return "remote-hit"
	case CTMiss:
		return "miss"
	case CTReselect:
		return "reselect"
	case CTNotLookedUp:
		return "not-looked-up"
	}
	return "unknown"
}

// Explanation is what the program did with an explained packet.
type Explanation struct {
	Action    uint32 // enum xdp_action (datapath.XDPTX, ...)
	Service   string // "" when no VIP matched
	Backend   netip.Addr
	RealID    uint32
	Encap     string
	Conntrack CTResult
	Headers   []string // "" -> filled from Frame
	Frame     []byte   // the output frame
	Reason    string   // why, in words
}

// XDPActionName names an XDP verdict ("XDP_TX").
func XDPActionName(a uint32) string {
	switch a {
	case 0:
		return "XDP_ABORTED"
	case 1:
		return "XDP_DROP"
	case 2:
		return "XDP_PASS"
	case 3:
		return "XDP_TX"
	case 4:
		return "XDP_REDIRECT"
	}
	return fmt.Sprintf("XDP_%d", a)
}
