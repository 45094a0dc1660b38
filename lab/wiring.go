package lab

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

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
		// Multipath routes hash each packet's own headers (policy 3, fields
		// 0x37: addresses, protocol, ports), as a real router does: flows,
		// not hosts, spread over nodes, and a flow stays on its node. Policy
		// 1 would reuse the hash the client's socket left on the skb, which
		// TCP redraws on every retransmission timeout: a flow would hop
		// nodes whenever a segment is lost.
		"net.ipv4.fib_multipath_hash_policy=3",
		"net.ipv4.fib_multipath_hash_fields=0x37",
		"net.ipv6.fib_multipath_hash_policy=3",
		"net.ipv6.fib_multipath_hash_fields=0x37",
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
