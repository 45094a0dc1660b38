// Package state is the data plane's content as the control plane plans it:
// node settings, services (VIPs) with their Maglev tables, and reals
// (backends of services) with their next hops. It has no kernel or I/O
// dependency: the planner (internal/plan) makes states, the datapath
// (internal/datapath) writes them into the forwarder's maps.
//
// A State is a value that is never changed once it is handed on: a new
// state is made with Clone and changed before it is handed on. Clone is
// cheap whatever the size: the reals live in a persistent table of
// fixed-size chunks shared between clones and copied on the first write
// (Reals), services are shared by pointer and the service map is copied.
// Each planned state carries a Generation; a Diff names what differs
// between two states by their generations and keys, never by pointer.
package state

import (
	"cmp"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"
)

// Encap is the forwarding method toward a backend (the name is from when
// every method was a tunnel).
type Encap uint8

// Forwarding methods.
const (
	EncapDefault Encap = iota // on a real: the service's
	EncapGRE
	EncapIPIP
	EncapGUE // IP in UDP to Node.GUEPort
	EncapDR  // direct routing: the frame to the backend's MAC
	EncapNAT // destination NAT; replies rewritten on their way back
)

// VIPKey identifies a VIP. Port 0 serves every port of Proto.
type VIPKey struct {
	Addr  netip.Addr
	Port  uint16
	Proto uint8 // 6 TCP, 17 UDP
}

// Compare orders keys by address, port, protocol.
func (k VIPKey) Compare(o VIPKey) int {
	if c := k.Addr.Compare(o.Addr); c != 0 {
		return c
	}
	if c := cmp.Compare(k.Port, o.Port); c != 0 {
		return c
	}
	return cmp.Compare(k.Proto, o.Proto)
}

func (k VIPKey) String() string {
	return fmt.Sprintf("%s/%d", netip.AddrPortFrom(k.Addr, k.Port), k.Proto)
}

// Service is one VIP's forwarding state. Read only once in a State.
type Service struct {
	SvcID uint32 // stable per VIP, >= 1
	Encap Encap
	// Fragments: the service takes IP fragments; without it fragments to
	// the VIP are dropped.
	Fragments bool
	// Table is the Maglev lookup table: len(Table) = M, each entry a real
	// id (0 = no backend: packets to that slot are dropped).
	Table []uint32
	// Sched is the scheduler of new flows (sched.go); zero: Maglev.
	Sched Sched
}

// Equal reports whether s and o hold the same values (tables shared by
// an unchanged service are recognised without reading them).
func (s *Service) Equal(o *Service) bool {
	if s == o {
		return true
	}
	if s == nil || o == nil || s.SvcID != o.SvcID || s.Encap != o.Encap || s.Fragments != o.Fragments ||
		!s.Sched.Equal(&o.Sched) {
		return false
	}
	return SameTable(s.Table, o.Table)
}

// SameTable reports whether a and b hold the same entries; tables the
// planner did not rebuild share their backing array, which is checked first.
func SameTable(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 || &a[0] == &b[0] {
		return true
	}
	return slices.Equal(a, b)
}

// Real is one backend of one service.
type Real struct {
	Addr   netip.Addr
	SvcID  uint32
	Active bool  // may keep its tracked flows
	Encap  Encap // EncapDefault: the service's
	// Port is the backend's port for EncapNAT (0: the VIP's).
	Port    uint16
	NextHop NextHop
}

// NextHop is a backend's resolved next hop; the zero value means none
// (the forwarder then asks the kernel's FIB for each packet).
type NextHop struct {
	DMAC, SMAC [6]byte
	Ifindex    uint32
	MTU        uint32
	// Local: the backend's address is one of this node's (the other
	// fields are then zero): packets go up the local stack.
	Local bool
}

// Timeouts are the conntrack idle timeouts.
type Timeouts struct {
	TCPSyn, TCP, TCPFin, UDP time.Duration
}

// Defence is the defence modes' settings: the fill of the connection
// table (of its fullest CPU's slice) at which each goes on (0: never), how
// far below it goes off again, and the timeouts the modes use (0: the
// normal one). xlbd's sweeper switches the modes (datapath/defence.go);
// they are not in the node map.
type Defence struct {
	SecureTCP, DropEntry, DropPacket float64
	Hysteresis                       float64
	SynTimeout, FinTimeout           time.Duration // secure_tcp's
	EntryIdle                        time.Duration // drop_entry's, for established entries
}

// Node is the per-node settings.
type Node struct {
	Addr4, Addr6 netip.Addr       // outer sources (invalid = none)
	GatewayMAC   net.HardwareAddr // fallback next hop (nil = none)
	Timeouts     Timeouts
	Defence      Defence
	// FloodSynRate: new SYN flows per second each CPU tracks (0: no limit).
	FloodSynRate uint32
	// FloodNewFlowRate: the other new flows (TCP without SYN, UDP) per
	// second each CPU tracks (0: no limit).
	FloodNewFlowRate uint32
	// ICMPEchoRate: echo requests to a VIP address each CPU answers per
	// second (0: never answered; over the rate: dropped).
	ICMPEchoRate uint32
	// ICMPTooBigRate: ICMP frag-needed / packet-too-big each CPU sends per
	// second for client packets too big once encapsulated (0: none sent).
	ICMPTooBigRate uint32
	// Fragments is the LB pool fragments are redirected over.
	Fragments FragPool
	// TraceRate: packet tracer records each CPU emits per second (0: off).
	TraceRate uint32
	// GUEPort is the destination UDP port of EncapGUE.
	GUEPort uint16
	// NAT: some real uses EncapNAT, so the forwarder looks up replies.
	NAT bool
}

// Equal reports whether n and o are the same settings.
func (n *Node) Equal(o *Node) bool {
	return n.Addr4 == o.Addr4 && n.Addr6 == o.Addr6 && slices.Equal(n.GatewayMAC, o.GatewayMAC) &&
		n.Timeouts == o.Timeouts && n.Defence == o.Defence && n.FloodSynRate == o.FloodSynRate &&
		n.FloodNewFlowRate == o.FloodNewFlowRate && n.ICMPEchoRate == o.ICMPEchoRate &&
		n.ICMPTooBigRate == o.ICMPTooBigRate &&
		n.TraceRate == o.TraceRate && n.Fragments.Equal(&o.Fragments) &&
		n.GUEPort == o.GUEPort && n.NAT == o.NAT
}

// FragPool is the pool of LB nodes fragments are spread over by their
// 3-tuple: the same list, in the same (sorted) order, on every node.
// Empty: fragment support is off (no redirect, no GRE decapsulation);
// fragments of fragment-enabled services are then handled where they
// arrive.
type FragPool struct {
	Peers []FragPeer // sorted by address
	Self  int        // this node's index in Peers
	// Timeout is how long a first fragment's decision is used (zero: the
	// datapath's default).
	Timeout time.Duration
}

// Equal reports whether p and o are the same pool.
func (p *FragPool) Equal(o *FragPool) bool {
	return p.Self == o.Self && p.Timeout == o.Timeout && slices.Equal(p.Peers, o.Peers)
}

// FragPeer is one LB node of the fragment pool; NextHop as for reals.
type FragPeer struct {
	Addr    netip.Addr
	NextHop NextHop
}

// State is the complete content the control plane wants in the maps.
//
// A State handed to the datapath or returned by the planner is not
// changed again: Clone it and change the clone.
type State struct {
	// Generation identifies a planned state (NewGeneration); 0 for states
	// made by hand, which are then always compared in full.
	Generation uint64
	Node       Node
	Services   map[VIPKey]*Service
	Reals      Reals // id (1 .. max-1) -> real
}

// Empty returns a state with nothing in it.
func Empty() *State { return &State{Services: map[VIPKey]*Service{}} }

// Clone returns a state with s's content that can be changed without
// changing s (generation 0 until the caller gives it one).
func (s *State) Clone() *State {
	c := &State{Node: s.Node, Reals: s.Reals.Clone()}
	c.Node.GatewayMAC = slices.Clone(s.Node.GatewayMAC)
	c.Node.Fragments.Peers = slices.Clone(s.Node.Fragments.Peers)
	c.Services = maps.Clone(s.Services) // copies the map's memory, no rehashing
	if c.Services == nil {
		c.Services = map[VIPKey]*Service{}
	}
	return c
}

var generations atomic.Uint64

// NewGeneration returns a generation no other state of this process has.
func NewGeneration() uint64 { return generations.Add(1) }

// Diff names what differs between two states: every real whose id and
// every service whose key is not listed is the same in both. A listed one
// may be added, changed or removed. From and To are the generations of
// the two states (0: a state made by hand).
type Diff struct {
	From, To uint64
	Node     bool
	Services []VIPKey
	Reals    []uint32
}

// Empty reports whether the two states are the same.
func (d *Diff) Empty() bool { return !d.Node && len(d.Services) == 0 && len(d.Reals) == 0 }

// Compare returns the diff from a to b. Shared services and shared chunks
// of the real table are recognised without reading them, so comparing a
// state with one planned from it costs about what changed.
func Compare(a, b *State) Diff {
	d := Diff{From: a.Generation, To: b.Generation, Node: !a.Node.Equal(&b.Node)}
	for k, s := range b.Services {
		if !s.Equal(a.Services[k]) {
			d.Services = append(d.Services, k)
		}
	}
	for k := range a.Services {
		if _, ok := b.Services[k]; !ok {
			d.Services = append(d.Services, k)
		}
	}
	slices.SortFunc(d.Services, VIPKey.Compare)
	d.Reals = a.Reals.differing(&b.Reals)
	return d
}

// CompareAt is Compare for a b that differs from a in its node and reals
// and at most in the services keys names (each service of b under another
// key is a's, the same *Service): only those services are looked at, so a
// plan that changed few services is compared in time for those few.
func CompareAt(a, b *State, keys []VIPKey) Diff {
	d := Diff{From: a.Generation, To: b.Generation, Node: !a.Node.Equal(&b.Node)}
	for _, k := range keys {
		if s, ok := b.Services[k]; ok && s.Equal(a.Services[k]) {
			continue
		}
		if _, ok := a.Services[k]; !ok {
			if _, ok := b.Services[k]; !ok {
				continue
			}
		}
		d.Services = append(d.Services, k)
	}
	slices.SortFunc(d.Services, VIPKey.Compare)
	d.Services = slices.Compact(d.Services)
	d.Reals = a.Reals.differing(&b.Reals)
	return d
}
