package lab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
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

func (l *Lab) build(ctx context.Context) error {
	if l.Dir == "" {
		d, err := os.MkdirTemp("", l.Prefix)
		if err != nil {
			return fmt.Errorf("lab dir: %w", err)
		}
		l.Dir, l.ownDir = d, true
	}
	mk := func(short string) (*NS, error) {
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
	host := func(role Role, short, iface string, a4, a6 netip.Addr) (*Host, error) {
		ns, err := mk(short)
		if err != nil {
			return nil, err
		}
		h := &Host{NS: ns, Role: role, Short: short, Iface: iface, Addr4: a4, Addr6: a6}
		// Before any interface exists, so that new ones inherit it: no
		// duplicate address detection, whose delay would hold IPv6 back.
		return h, setSysctls(ns, "net.ipv6.conf.default.accept_dad=0", "net.ipv6.conf.all.accept_dad=0")
	}

	var err error
	if l.passProg, err = loadPassProgram(); err != nil {
		return err
	}
	defer func() { l.passProg.Close(); l.passProg = nil }()
	sw, err := mk("switch")
	if err != nil {
		return err
	}
	l.Switch = sw
	// The switch is layer 2 only: no IPv6 link-local chatter on its ports.
	if err := setSysctls(sw, "net.ipv6.conf.default.disable_ipv6=1", "net.ipv6.conf.all.disable_ipv6=1"); err != nil {
		return err
	}
	if l.Client, err = host(RoleClient, "client", "eth0", ClientAddr4, ClientAddr6); err != nil {
		return err
	}
	if l.Router, err = host(RoleRouter, "router", "eth1", RouterLANAddr4, RouterLANAddr6); err != nil {
		return err
	}
	for i := range l.cfg.Nodes {
		h, err := host(RoleNode, fmt.Sprintf("n%d", i+1), "eth0", NodeAddr4(i), NodeAddr6(i))
		if err != nil {
			return err
		}
		if l.cfg.SecondIface {
			h.Second = &Port{Iface: "eth1", Addr4: NodeSecondAddr4(i), Addr6: NodeSecondAddr6(i)}
		}
		l.Nodes = append(l.Nodes, h)
	}
	for i := range l.cfg.Backends {
		h, err := host(RoleBackend, fmt.Sprintf("b%d", i+1), "eth0", BackendAddr4(i), BackendAddr6(i))
		if err != nil {
			return err
		}
		l.Backends = append(l.Backends, h)
	}

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

// readyTimeout bounds the wait for links and addresses after building.
const readyTimeout = 5 * time.Second

// waitReady waits until every veth is operationally up (the kernel has
// processed its carrier and given it a qdisc) and every IPv6 address,
// link-local ones included, is usable (not tentative).
func (l *Lab) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pending, err := l.notReady()
		if err != nil || pending == "" {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("lab %s not ready after %v: %s", l.Prefix, timeout, pending)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// notReady describes the first link or address that is not ready, or "".
func (l *Lab) notReady() (string, error) {
	nss := []*NS{l.Switch}
	for _, h := range l.Hosts() {
		nss = append(nss, h.NS)
	}
	for _, ns := range nss {
		links, err := ns.nl.LinkList()
		if err != nil {
			return "", fmt.Errorf("list links in %s: %w", ns.Name, err)
		}
		for _, lk := range links {
			if lk.Type() != "veth" {
				continue
			}
			a := lk.Attrs()
			if a.OperState != netlink.OperUp {
				return fmt.Sprintf("%s in %s is %v", a.Name, ns.Name, a.OperState), nil
			}
			if ns == l.Switch {
				continue
			}
			addrs, err := ns.nl.AddrList(lk, netlink.FAMILY_V6)
			if err != nil {
				return "", fmt.Errorf("list addresses in %s: %w", ns.Name, err)
			}
			linkLocal := false
			for _, ad := range addrs {
				if ad.Flags&unix.IFA_F_TENTATIVE != 0 {
					return fmt.Sprintf("%v on %s in %s is tentative", ad.IP, a.Name, ns.Name), nil
				}
				linkLocal = linkLocal || ad.IP.IsLinkLocalUnicast()
			}
			if !linkLocal {
				return fmt.Sprintf("%s in %s has no IPv6 link-local address yet", a.Name, ns.Name), nil
			}
		}
	}
	return "", nil
}

func setSysctls(ns *NS, kvs ...string) error {
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("bad sysctl %q", kv)
		}
		if err := ns.Sysctl(k, v); err != nil {
			return err
		}
	}
	return nil
}

const (
	bridgeName     = "br0"
	clientIndex    = 10  // ifindex of the client's eth0
	firstPortIndex = 100 // ifindex of the switch ports: 101, 102, ...
)

func (l *Lab) buildSwitch() error {
	off := false
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: bridgeName, MTU: l.cfg.LANMTU}, MulticastSnooping: &off}
	if err := l.Switch.nl.LinkAdd(br); err != nil {
		return fmt.Errorf("add bridge in %s: %w", l.Switch.Name, err)
	}
	if err := l.Switch.nl.LinkSetUp(br); err != nil {
		return fmt.Errorf("bridge up in %s: %w", l.Switch.Name, err)
	}
	return setUp(l.Switch, "lo")
}

// plugIntoLAN creates the veth pair between the host (dev) and a port of the
// bridge named after the host, with the LAN MTU, an XDP_PASS program and GRO
// off on the switch side, and transmit checksum offload off on both ends.
func (l *Lab) plugIntoLAN(h *Host, dev string) error {
	port := h.Short
	if h.Second != nil && dev == h.Second.Iface {
		port += "b"
	}
	br, err := l.Switch.nl.LinkByName(bridgeName)
	if err != nil {
		return fmt.Errorf("bridge in %s: %w", l.Switch.Name, err)
	}
	// A switch port's ifindex never equals its peer's (2, the first after
	// lo in a fresh namespace): with equal indexes the kernel rate-limits
	// the carrier-up event (linkwatch) to one a second, so the link would
	// stay without a qdisc and IPv6 addresses tentative for up to 1 s.
	l.ports++
	v := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: port, MTU: l.cfg.LANMTU, Index: firstPortIndex + l.ports},
		PeerName:      dev,
		PeerNamespace: netlink.NsFd(int(h.fd)),
	}
	if err := l.Switch.nl.LinkAdd(v); err != nil {
		return fmt.Errorf("add veth %s/%s-%s/%s: %w", l.Switch.Name, port, h.Name, dev, err)
	}
	link, err := l.Switch.nl.LinkByName(port)
	if err != nil {
		return fmt.Errorf("veth %s in %s: %w", port, l.Switch.Name, err)
	}
	if err := l.Switch.nl.LinkSetMaster(link, br); err != nil {
		return fmt.Errorf("attach %s to %s in %s: %w", port, bridgeName, l.Switch.Name, err)
	}
	// The package-level call makes its netlink socket in the calling thread's
	// namespace, hence Do. Attached this way (not as a bpf_link) the program
	// stays until the port is destroyed.
	if err := l.Switch.Do(func() error {
		return netlink.LinkSetXdpFdWithFlags(link, l.passProg.FD(), nl.XDP_FLAGS_DRV_MODE)
	}); err != nil {
		return fmt.Errorf("attach XDP_PASS program to %s in %s: %w", port, l.Switch.Name, err)
	}
	if err := l.Switch.SetFeature(port, FeatureGRO, false); err != nil {
		return err
	}
	if err := l.Switch.SetFeature(port, FeatureTxCsum, false); err != nil {
		return err
	}
	if err := h.SetFeature(dev, FeatureTxCsum, false); err != nil {
		return err
	}
	if err := l.Switch.nl.LinkSetUp(link); err != nil {
		return fmt.Errorf("%s up in %s: %w", port, l.Switch.Name, err)
	}
	return nil
}

// loadPassProgram loads the XDP program of the switch ports: return
// XDP_PASS. A veth hands frames that its peer sends with XDP_TX to the
// stack only when it has an XDP program: with GRO alone (the other way to
// give a veth NAPI) the frames are queued but the NAPI poll is not kicked
// (veth_xdp_flush checks the peer's xdp_prog), so they wait for the next
// unrelated packet. GRO stays off: it would merge encapsulated TCP segments
// into one large packet on their way through the switch, which a real
// switch never does.
func loadPassProgram() (*ebpf.Program, error) {
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:    "lab_port_pass",
		Type:    ebpf.XDP,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, 2), // XDP_PASS
			asm.Return(),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("load the switch ports' XDP_PASS program: %w", err)
	}
	return p, nil
}

func (l *Lab) buildClient() error {
	c, r := l.Client, l.Router
	v := &netlink.Veth{
		// Index: see plugIntoLAN.
		LinkAttrs:     netlink.LinkAttrs{Name: "eth0", MTU: ClientMTU, Index: clientIndex},
		PeerName:      "eth0",
		PeerNamespace: netlink.NsFd(int(r.fd)),
	}
	if err := c.nl.LinkAdd(v); err != nil {
		return fmt.Errorf("add veth %s/eth0-%s/eth0: %w", c.Name, r.Name, err)
	}
	for _, ns := range []*NS{c.NS, r.NS} {
		if err := ns.SetFeature("eth0", FeatureTxCsum, false); err != nil {
			return err
		}
	}
	if err := configure(c.NS, "eth0",
		[]netip.Prefix{netip.PrefixFrom(ClientAddr4, ClientNet4.Bits()), netip.PrefixFrom(ClientAddr6, ClientNet6.Bits())},
		RouterClientAddr4, RouterClientAddr6); err != nil {
		return err
	}
	return nil
}

func (l *Lab) buildRouter() error {
	r := l.Router
	if err := setSysctls(r.NS,
		"net.ipv4.ip_forward=1",
		"net.ipv6.conf.all.forwarding=1",
		"net.ipv4.conf.all.rp_filter=0",
		"net.ipv4.conf.default.rp_filter=0",
		"net.ipv4.conf.eth0.rp_filter=0",
		// L4 hash for multipath routes: flows, not hosts, spread over nodes.
		"net.ipv4.fib_multipath_hash_policy=1",
		"net.ipv6.fib_multipath_hash_policy=1",
	); err != nil {
		return err
	}
	if err := configure(r.NS, "eth0",
		[]netip.Prefix{netip.PrefixFrom(RouterClientAddr4, ClientNet4.Bits()), netip.PrefixFrom(RouterClientAddr6, ClientNet6.Bits())},
		netip.Addr{}, netip.Addr{}); err != nil {
		return err
	}
	if err := l.plugIntoLAN(r, "eth1"); err != nil {
		return err
	}
	if err := r.Sysctl("net.ipv4.conf.eth1.rp_filter", "0"); err != nil {
		return err
	}
	return configure(r.NS, "eth1",
		[]netip.Prefix{netip.PrefixFrom(RouterLANAddr4, LANNet4.Bits()), netip.PrefixFrom(RouterLANAddr6, LANNet6.Bits())},
		netip.Addr{}, netip.Addr{})
}

func (l *Lab) buildLANHost(h *Host) error {
	if err := l.plugIntoLAN(h, h.Iface); err != nil {
		return err
	}
	if err := setSysctls(h.NS,
		"net.ipv4.conf.all.rp_filter=0",
		"net.ipv4.conf.default.rp_filter=0",
		"net.ipv4.conf."+h.Iface+".rp_filter=0",
	); err != nil {
		return err
	}
	return configure(h.NS, h.Iface,
		[]netip.Prefix{netip.PrefixFrom(h.Addr4, LANNet4.Bits()), netip.PrefixFrom(h.Addr6, LANNet6.Bits())},
		RouterLANAddr4, RouterLANAddr6)
}

// buildSecondPort plugs a node's second interface into the LAN. Both
// interfaces are on the LAN subnet, so each answers ARP only for its own
// addresses (else the router could send one's traffic to the other).
func (l *Lab) buildSecondPort(h *Host) error {
	p := h.Second
	if p == nil {
		return nil
	}
	if err := l.plugIntoLAN(h, p.Iface); err != nil {
		return err
	}
	if err := setSysctls(h.NS,
		"net.ipv4.conf.all.arp_ignore=1", "net.ipv4.conf.all.arp_announce=2",
		"net.ipv4.conf."+p.Iface+".rp_filter=0",
	); err != nil {
		return err
	}
	return configure(h.NS, p.Iface,
		[]netip.Prefix{netip.PrefixFrom(p.Addr4, LANNet4.Bits()), netip.PrefixFrom(p.Addr6, LANNet6.Bits())},
		netip.Addr{}, netip.Addr{})
}

// buildBackend puts the VIPs on lo and keeps eth0 from ever answering ARP
// for them (LVS direct-routing settings).
func (l *Lab) buildBackend(h *Host) error {
	if err := setSysctls(h.NS,
		"net.ipv4.conf.all.arp_ignore=1",
		"net.ipv4.conf.all.arp_announce=2",
		"net.ipv4.conf."+h.Iface+".arp_ignore=1",
		"net.ipv4.conf."+h.Iface+".arp_announce=2",
		"net.ipv4.conf.lo.rp_filter=0",
	); err != nil {
		return err
	}
	lo, err := h.nl.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("lo in %s: %w", h.Name, err)
	}
	for _, p := range l.VIPPrefixes() {
		if err := addAddr(h.NS, lo, p); err != nil {
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

// SetVIPRoutes replaces the router's routes for each prefix with one via the
// given hosts' LAN addresses (of the prefix's family): a plain route for one
// host, a multipath (ECMP) route for several. The router hashes flows over
// the next hops by 5-tuple (fib_multipath_hash_policy=1). With no host it
// removes the routes.
func (l *Lab) SetVIPRoutes(prefixes []netip.Prefix, via ...*Host) error {
	gws := func(p netip.Prefix) []netip.Addr {
		var out []netip.Addr
		for _, h := range via {
			out = append(out, h.Addr(p.Addr()))
		}
		return out
	}
	return l.setVIPRoutes(prefixes, gws)
}

// SetVIPRoutesVia is SetVIPRoutes with the next hops given by address
// (those of the family of each prefix are used): e.g. a node's second
// interface.
func (l *Lab) SetVIPRoutesVia(prefixes []netip.Prefix, via ...netip.Addr) error {
	return l.setVIPRoutes(prefixes, func(p netip.Prefix) []netip.Addr {
		var out []netip.Addr
		for _, a := range via {
			if a.Is4() == p.Addr().Is4() {
				out = append(out, a)
			}
		}
		return out
	})
}

func (l *Lab) setVIPRoutes(prefixes []netip.Prefix, gwsOf func(netip.Prefix) []netip.Addr) error {
	r := l.Router
	h, err := r.netlink()
	if err != nil {
		return err
	}
	eth1, err := h.LinkByName("eth1")
	if err != nil {
		return fmt.Errorf("eth1 in %s: %w", r.Name, err)
	}
	idx := eth1.Attrs().Index
	for _, p := range prefixes {
		p = p.Masked()
		rt := &netlink.Route{Dst: ipNet(p), LinkIndex: idx}
		via := gwsOf(p)
		if len(via) == 0 {
			if err := h.RouteDel(rt); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("delete route %v in %s: %w", p, r.Name, err)
			}
			continue
		}
		if len(via) == 1 {
			rt.Gw = via[0].AsSlice()
		} else {
			rt.LinkIndex = 0
			for _, a := range via {
				rt.MultiPath = append(rt.MultiPath, &netlink.NexthopInfo{LinkIndex: idx, Gw: a.AsSlice()})
			}
		}
		if err := h.RouteReplace(rt); err != nil {
			return fmt.Errorf("route %v via %d hosts in %s: %w", p, len(via), r.Name, err)
		}
	}
	return nil
}

// VIPRoute describes the router's route for one prefix.
type VIPRoute struct {
	Prefix   netip.Prefix
	NextHops []netip.Addr
}

// VIPRoutes reads the router's routes for the given prefixes (a prefix with
// no route is left out).
func (l *Lab) VIPRoutes(prefixes []netip.Prefix) ([]VIPRoute, error) {
	h, err := l.Router.netlink()
	if err != nil {
		return nil, err
	}
	var out []VIPRoute
	for _, p := range prefixes {
		p = p.Masked()
		family := netlink.FAMILY_V4
		if p.Addr().Is6() {
			family = netlink.FAMILY_V6
		}
		rts, err := h.RouteListFiltered(family, &netlink.Route{Dst: ipNet(p)}, netlink.RT_FILTER_DST)
		if err != nil {
			return nil, fmt.Errorf("list routes %v in %s: %w", p, l.Router.Name, err)
		}
		for _, rt := range rts {
			vr := VIPRoute{Prefix: p}
			if rt.Gw != nil {
				a, _ := netip.AddrFromSlice(rt.Gw)
				vr.NextHops = append(vr.NextHops, a.Unmap())
			}
			for _, nh := range rt.MultiPath {
				a, _ := netip.AddrFromSlice(nh.Gw)
				vr.NextHops = append(vr.NextHops, a.Unmap())
			}
			out = append(out, vr)
		}
	}
	return out, nil
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func setUp(ns *NS, dev string) error {
	link, err := ns.nl.LinkByName(dev)
	if err != nil {
		return fmt.Errorf("link %s in %s: %w", dev, ns.Name, err)
	}
	if err := ns.nl.LinkSetUp(link); err != nil {
		return fmt.Errorf("%s up in %s: %w", dev, ns.Name, err)
	}
	return nil
}

func addAddr(ns *NS, link netlink.Link, p netip.Prefix) error {
	a := &netlink.Addr{IPNet: ipNet(p)}
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	if err := ns.nl.AddrAdd(link, a); err != nil {
		return fmt.Errorf("add %v to %s in %s: %w", p, link.Attrs().Name, ns.Name, err)
	}
	return nil
}

// configure brings lo and dev up, adds the addresses to dev and, when given,
// default routes via gw4 and gw6.
func configure(ns *NS, dev string, addrs []netip.Prefix, gw4, gw6 netip.Addr) error {
	if err := setUp(ns, "lo"); err != nil {
		return err
	}
	link, err := ns.nl.LinkByName(dev)
	if err != nil {
		return fmt.Errorf("link %s in %s: %w", dev, ns.Name, err)
	}
	for _, p := range addrs {
		if err := addAddr(ns, link, p); err != nil {
			return err
		}
	}
	if err := ns.nl.LinkSetUp(link); err != nil {
		return fmt.Errorf("%s up in %s: %w", dev, ns.Name, err)
	}
	for _, gw := range []netip.Addr{gw4, gw6} {
		if !gw.IsValid() {
			continue
		}
		def := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		if gw.Is6() {
			def = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		}
		rt := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: ipNet(def), Gw: gw.AsSlice()}
		if err := ns.nl.RouteAdd(rt); err != nil {
			return fmt.Errorf("default route via %v in %s: %w", gw, ns.Name, err)
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
