package lab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"sync"

	"github.com/cilium/ebpf"
)

// The lab's addressing plan.
var (
	ClientNet4 = netip.MustParsePrefix("10.99.0.0/24")
	ClientNet6 = netip.MustParsePrefix("fd00:99::/64")
	LANNet4    = netip.MustParsePrefix("10.100.0.0/24")
	LANNet6    = netip.MustParsePrefix("fd00:100::/64")

	// ClientAddr4 and ClientAddr6 are the client's addresses.
	ClientAddr4 = netip.MustParseAddr("10.99.0.2")
	ClientAddr6 = netip.MustParseAddr("fd00:99::2")
	// RouterClientAddr4 and RouterClientAddr6 are the router's addresses
	// toward the client (its eth0), the client's default gateway.
	RouterClientAddr4 = netip.MustParseAddr("10.99.0.1")
	RouterClientAddr6 = netip.MustParseAddr("fd00:99::1")
	// RouterLANAddr4 and RouterLANAddr6 are the router's addresses in the
	// LAN (its eth1), the default gateway of nodes and backends.
	RouterLANAddr4 = netip.MustParseAddr("10.100.0.1")
	RouterLANAddr6 = netip.MustParseAddr("fd00:100::1")

	// DefaultVIPs are the VIPs of a lab whose Config names none.
	DefaultVIPs = []netip.Addr{netip.MustParseAddr("10.200.0.1"), netip.MustParseAddr("fd00:200::1")}
)

// Defaults and limits of Config.
const (
	DefaultNodes    = 1
	DefaultBackends = 3
	DefaultLANMTU   = 1600
	ClientMTU       = 1500
	// PlainMTU as Config.LANMTU makes the plain network of an untuned
	// site: 1500 bytes everywhere, so a full-size client packet no longer
	// fits once xlb encapsulates it (docs/ARCHITECTURE.md, "MTU").
	PlainMTU    = ClientMTU
	MaxNodes    = 89  // node i is .11+i
	MaxBackends = 150 // backend i is .101+i
)

// Role is what a lab host does.
type Role string

const (
	RoleClient  Role = "client"
	RoleRouter  Role = "router"
	RoleNode    Role = "node"
	RoleBackend Role = "backend"
)

// VIPRouting says where the router sends VIP traffic when the lab is built.
type VIPRouting int

const (
	// RouteViaNodes routes each VIP to the xlb nodes: one static route, a
	// multipath (ECMP) route when there are several nodes.
	RouteViaNodes VIPRouting = iota
	// RouteToBackend routes each VIP straight to the first backend, which
	// has the VIPs on its loopback: the topology works without xlb.
	RouteToBackend
	// RouteNone adds no VIP route (a BGP daemon in the router, or the
	// caller through SetVIPRoutes, provides them).
	RouteNone
)

// Config describes a lab. The zero value is the single-node lab: 1 client,
// the router, 1 xlb node, 3 backends, DefaultVIPs routed via the node.
type Config struct {
	// Prefix names every namespace (<Prefix><role>). Empty picks a fresh
	// random one matching PrefixPattern.
	Prefix   string
	Nodes    int // default DefaultNodes
	Backends int // default DefaultBackends
	// VIPs are configured on every backend's loopback and routed by the
	// router (see Routing). Default DefaultVIPs.
	VIPs []netip.Addr
	// LANMTU is the MTU between the router, nodes and backends: default
	// DefaultLANMTU (room for the encapsulation of a client's 1500-byte
	// packet), PlainMTU for a plain 1500-byte network.
	LANMTU  int
	Routing VIPRouting
	// BinDir holds xlbd and xlb-decap. Default: FindBinDir at first use.
	BinDir string
	// Dir receives generated configs and process logs. Default: a new
	// temporary directory, removed by Destroy.
	Dir string
	// SecondIface gives every node a second LAN interface, eth1, with the
	// addresses NodeSecondAddr4/6 (a host running two xlb instances, one
	// per interface). No VIP route uses it unless set (SetVIPRoutesVia).
	SecondIface bool
}

// PrefixPattern matches the namespace names of labs with generated prefixes.
var PrefixPattern = regexp.MustCompile(`^xl[0-9a-f]{4}-`)

// NewPrefix returns a random lab prefix, "xl" + 4 hex digits + "-".
func NewPrefix() string {
	var b [2]byte
	rand.Read(b[:])
	return "xl" + hex.EncodeToString(b[:]) + "-"
}

// Host is a namespace of the lab with its role and addresses.
type Host struct {
	*NS
	Role Role
	// Short is the name within the lab: "client", "router", "n1", "b1".
	Short string
	// Iface is the interface holding Addr4/Addr6: eth0, the router's eth1.
	Iface string
	// Addr4 and Addr6 are the host's addresses: on the LAN for the router,
	// nodes and backends; on the client net for the client.
	Addr4, Addr6 netip.Addr
	// Second is a node's second LAN interface (Config.SecondIface), nil
	// without one.
	Second *Port
}

// Port is a further LAN interface of a host with its addresses.
type Port struct {
	Iface        string
	Addr4, Addr6 netip.Addr
}

// Addr returns the host's address of the family of a.
func (h *Host) Addr(like netip.Addr) netip.Addr {
	if like.Is4() {
		return h.Addr4
	}
	return h.Addr6
}

// Lab is a built topology. Its methods are safe for concurrent use.
type Lab struct {
	Prefix   string
	VIPs     []netip.Addr
	Dir      string
	Client   *Host
	Router   *Host
	Switch   *NS
	Nodes    []*Host
	Backends []*Host

	cfg    Config
	ownDir bool
	all    []*NS // every namespace created, for Destroy
	ports  int   // switch ports made so far
	// passProg is attached to every switch port; only held while building.
	passProg *ebpf.Program
	mu       sync.Mutex
	undo     []func() error // run in reverse by Destroy
	servers  []*Servers
	gone     bool
	// xlbdConfig is the latest config each xlb instance (by node.name)
	// was started with.
	xlbdConfig map[string]string
	// routerBIRD is the router's latest BIRD (StartBIRD), for diagnostics;
	// birds the latest BIRD started in each host.
	routerBIRD *BIRD
	birds      map[*Host]*BIRD
}

// New builds the lab described by cfg. On failure everything it created is
// removed again. Needs root.
func New(ctx context.Context, cfg Config) (*Lab, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	l := &Lab{Prefix: cfg.Prefix, VIPs: cfg.VIPs, cfg: cfg, Dir: cfg.Dir}
	if err := l.build(ctx); err != nil {
		return nil, errors.Join(err, l.Destroy())
	}
	return l, nil
}

func (c Config) withDefaults() (Config, error) {
	if c.Prefix == "" {
		for {
			c.Prefix = NewPrefix()
			names, err := Leftovers(c.Prefix)
			if err != nil {
				return c, err
			}
			if len(names) == 0 {
				break
			}
		}
	}
	if c.Nodes == 0 {
		c.Nodes = DefaultNodes
	}
	if c.Backends == 0 {
		c.Backends = DefaultBackends
	}
	if c.Nodes < 0 || c.Nodes > MaxNodes {
		return c, fmt.Errorf("lab: nodes %d out of range [1, %d]", c.Nodes, MaxNodes)
	}
	if c.Backends < 0 || c.Backends > MaxBackends {
		return c, fmt.Errorf("lab: backends %d out of range [1, %d]", c.Backends, MaxBackends)
	}
	if c.VIPs == nil {
		c.VIPs = slices.Clone(DefaultVIPs)
	}
	for _, v := range c.VIPs {
		if !v.IsValid() || v.Zone() != "" || v.Is4In6() {
			return c, fmt.Errorf("lab: bad VIP %v", v)
		}
		for _, p := range []netip.Prefix{ClientNet4, ClientNet6, LANNet4, LANNet6} {
			if p.Contains(v) {
				return c, fmt.Errorf("lab: VIP %v is inside the lab network %v", v, p)
			}
		}
	}
	if c.LANMTU == 0 {
		c.LANMTU = DefaultLANMTU
	}
	if c.LANMTU < ClientMTU {
		return c, fmt.Errorf("lab: LAN MTU %d below the client MTU %d", c.LANMTU, ClientMTU)
	}
	return c, nil
}

// NodeAddr4 and the like give the lab's address plan for host i (from 0).
func NodeAddr4(i int) netip.Addr    { return lanAddr(LANNet4, 11+i) }
func NodeAddr6(i int) netip.Addr    { return lanAddr(LANNet6, 0x11+i) }
func BackendAddr4(i int) netip.Addr { return lanAddr(LANNet4, 101+i) }

// NodeSecondAddr4 and NodeSecondAddr6 are the addresses of node i's second
// interface (Config.SecondIface): .200+i, ::200+i.
func NodeSecondAddr4(i int) netip.Addr { return lanAddr(LANNet4, 200+i) }
func NodeSecondAddr6(i int) netip.Addr { return lanAddr(LANNet6, 0x200+i) }
func BackendAddr6(i int) netip.Addr    { return lanAddr(LANNet6, 0x101+i) }

// lanAddr returns the address at offset n in p. IPv6 offsets are written as
// hex so that the plan reads the same in both families: .11 and ::11.
func lanAddr(p netip.Prefix, n int) netip.Addr {
	b := p.Addr().AsSlice()
	b[len(b)-2] += byte(n >> 8)
	b[len(b)-1] += byte(n)
	a, _ := netip.AddrFromSlice(b)
	return a
}

// build creates the lab's namespaces, wires them and routes the VIPs as
// the config says, then waits until every link and address is ready.
func (l *Lab) build(ctx context.Context) error {
	if l.Dir == "" {
		d, err := os.MkdirTemp("", l.Prefix)
		if err != nil {
			return fmt.Errorf("lab dir: %w", err)
		}
		l.Dir, l.ownDir = d, true
	}
	var err error
	if l.passProg, err = loadPassProgram(); err != nil {
		return err
	}
	defer func() { l.passProg.Close(); l.passProg = nil }()
	if err := l.makeHosts(ctx); err != nil {
		return err
	}
	if err := l.wire(); err != nil {
		return err
	}
	switch l.cfg.Routing {
	case RouteViaNodes:
		err = l.SetVIPRoutes(l.VIPPrefixes(), l.Nodes...)
	case RouteToBackend:
		err = l.SetVIPRoutes(l.VIPPrefixes(), l.Backends[0])
	}
	if err != nil {
		return err
	}
	return l.waitReady(ctx, readyTimeout)
}

// newNS creates the lab's namespace short.
func (l *Lab) newNS(ctx context.Context, short string) (*NS, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ns, err := createNS(l.Prefix + short)
	if err != nil {
		return nil, err
	}
	l.all = append(l.all, ns)
	return ns, nil
}

// newHost creates the namespace of a host and describes it.
func (l *Lab) newHost(ctx context.Context, role Role, short, iface string, a4, a6 netip.Addr) (*Host, error) {
	ns, err := l.newNS(ctx, short)
	if err != nil {
		return nil, err
	}
	h := &Host{NS: ns, Role: role, Short: short, Iface: iface, Addr4: a4, Addr6: a6}
	// Before any interface exists, so that new ones inherit it: no
	// duplicate address detection, whose delay would hold IPv6 back.
	return h, setSysctls(ns, "net.ipv6.conf.default.accept_dad=0", "net.ipv6.conf.all.accept_dad=0")
}

// makeHosts creates the namespaces of the switch and of every host.
func (l *Lab) makeHosts(ctx context.Context) error {
	sw, err := l.newNS(ctx, "switch")
	if err != nil {
		return err
	}
	l.Switch = sw
	// The switch is layer 2 only: no IPv6 link-local chatter on its ports.
	if err := setSysctls(sw, "net.ipv6.conf.default.disable_ipv6=1", "net.ipv6.conf.all.disable_ipv6=1"); err != nil {
		return err
	}
	if l.Client, err = l.newHost(ctx, RoleClient, "client", "eth0", ClientAddr4, ClientAddr6); err != nil {
		return err
	}
	if l.Router, err = l.newHost(ctx, RoleRouter, "router", "eth1", RouterLANAddr4, RouterLANAddr6); err != nil {
		return err
	}
	for i := range l.cfg.Nodes {
		h, err := l.newHost(ctx, RoleNode, fmt.Sprintf("n%d", i+1), "eth0", NodeAddr4(i), NodeAddr6(i))
		if err != nil {
			return err
		}
		if l.cfg.SecondIface {
			h.Second = &Port{Iface: "eth1", Addr4: NodeSecondAddr4(i), Addr6: NodeSecondAddr6(i)}
		}
		l.Nodes = append(l.Nodes, h)
	}
	for i := range l.cfg.Backends {
		h, err := l.newHost(ctx, RoleBackend, fmt.Sprintf("b%d", i+1), "eth0", BackendAddr4(i), BackendAddr6(i))
		if err != nil {
			return err
		}
		l.Backends = append(l.Backends, h)
	}
	return nil
}

// wire builds the switch and plugs every host in: the client to the
// router, the others into the LAN.
func (l *Lab) wire() error {
	if err := l.buildSwitch(); err != nil {
		return err
	}
	if err := l.buildClient(); err != nil {
		return err
	}
	if err := l.buildRouter(); err != nil {
		return err
	}
	for _, h := range l.Nodes {
		if err := l.buildLANHost(h); err != nil {
			return err
		}
		if err := l.buildSecondPort(h); err != nil {
			return err
		}
	}
	for _, h := range l.Backends {
		if err := l.buildLANHost(h); err != nil {
			return err
		}
		if err := l.buildBackend(h); err != nil {
			return err
		}
	}
	return nil
}

// VIPPrefixes returns the VIPs as host prefixes (/32, /128).
func (l *Lab) VIPPrefixes() []netip.Prefix {
	var ps []netip.Prefix
	for _, v := range l.VIPs {
		ps = append(ps, netip.PrefixFrom(v, v.BitLen()))
	}
	return ps
}

// VIP4 and VIP6 return the first IPv4 / IPv6 VIP, or the zero Addr.
func (l *Lab) VIP4() netip.Addr { return l.firstVIP(true) }
func (l *Lab) VIP6() netip.Addr { return l.firstVIP(false) }

func (l *Lab) firstVIP(v4 bool) netip.Addr {
	for _, v := range l.VIPs {
		if v.Is4() == v4 {
			return v
		}
	}
	return netip.Addr{}
}

// Hosts returns every host: client, router, nodes, backends.
func (l *Lab) Hosts() []*Host {
	hs := []*Host{l.Client, l.Router}
	hs = append(hs, l.Nodes...)
	return append(hs, l.Backends...)
}

// Host returns the host with the short name ("n1", "b2", "client"), or nil.
func (l *Lab) Host(short string) *Host {
	for _, h := range l.Hosts() {
		if h != nil && h.Short == short {
			return h
		}
	}
	return nil
}

// onDestroy registers f to run (last registered first) when the lab is
// destroyed. It reports false, without registering, if the lab is gone.
func (l *Lab) onDestroy(f func() error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gone {
		return false
	}
	l.undo = append(l.undo, f)
	return true
}

// Destroy stops everything the lab started (daemons first, then decap,
// servers and other processes), kills any process still inside its
// namespaces, deletes the namespaces and, if New made it, the lab's
// directory. It is idempotent; the error joins every step that failed.
func (l *Lab) Destroy() error {
	l.mu.Lock()
	if l.gone {
		l.mu.Unlock()
		return nil
	}
	l.gone = true
	undo := l.undo
	l.undo = nil
	l.mu.Unlock()

	var errs []error
	for i := len(undo) - 1; i >= 0; i-- {
		errs = append(errs, undo[i]())
	}
	for _, ns := range l.all {
		ns.close()
	}
	if _, err := Cleanup(l.Prefix); err != nil {
		errs = append(errs, err)
	}
	if l.ownDir && l.Dir != "" {
		errs = append(errs, os.RemoveAll(l.Dir))
	}
	return errors.Join(errs...)
}
