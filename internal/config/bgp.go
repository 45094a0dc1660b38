package config

import (
	"net/netip"
	"strconv"
	"time"

	"gopkg.in/yaml.v3"
)

// The bgp section (docs/BGP.md): the embedded speaker's identity, its timers
// and the routers it announces the VIPs to.

// Defaults and limits of the bgp section.
const (
	// DefaultBGPPort is the TCP port of BGP (RFC 4271), listened on and
	// connected to.
	DefaultBGPPort = 179
	// NoListen is BGP.ListenPort when the speaker does not listen (it only
	// connects out); the file writes it as 0 or -1.
	NoListen = -1
	// DefaultHoldTime is a session's hold time (RFC 4271 suggests 90s).
	DefaultHoldTime = 90 * time.Second
	// MinHoldTime is the shortest non-zero hold time (RFC 4271 4.2); 0
	// turns keepalives off.
	MinHoldTime = 3 * time.Second
	// MaxHoldTime is the largest hold time the OPEN message can carry.
	MaxHoldTime = 65535 * time.Second
	// DefaultGracefulRestartTime is the restart time advertised in the
	// graceful restart capability (RFC 4724): how long routers keep the
	// routes of a restarting xlbd.
	DefaultGracefulRestartTime = 120 * time.Second
	// MaxGracefulRestartTime is the largest restart time the capability
	// can carry (12 bits of seconds).
	MaxGracefulRestartTime = 4095 * time.Second
	// DefaultShutdownWait is how long a node drain announces the VIPs with
	// the GRACEFUL_SHUTDOWN community (RFC 8326) before withdrawing them.
	DefaultShutdownWait = 5 * time.Second
	// MaxShutdownWait bounds shutdown_wait.
	MaxShutdownWait = time.Hour
	// MaxPasswordLen is the longest TCP MD5 key Linux accepts
	// (TCP_MD5SIG_MAXKEYLEN).
	MaxPasswordLen = 80
	// ASTrans is AS_TRANS (RFC 6793), which no speaker may use as its AS.
	ASTrans = 23456
)

// BGP configures the embedded BGP speaker, or with Mode BGPExternal the
// kernel routes another daemon announces (only Mode, RouteTable and
// DummyInterface are set then).
type BGP struct {
	Mode BGPMode
	// RouteTable is the kernel routing table of the VIP routes (external
	// mode); 0 when DummyInterface is used.
	RouteTable uint32
	// DummyInterface is the dummy interface that holds the VIPs as /32 and
	// /128 addresses (external mode); "" when RouteTable is used.
	DummyInterface string
	// ASN is the local AS number, 1..4294967295 except AS_TRANS.
	ASN uint32
	// RouterID is the BGP identifier, a non-zero IPv4 address; Parse
	// defaults it to node.address.
	RouterID netip.Addr
	// ListenPort is the port the speaker accepts sessions on, or NoListen.
	ListenPort int32
	// GracefulRestartTime is the advertised restart time, whole seconds,
	// 0..MaxGracefulRestartTime; 0 turns graceful restart off.
	GracefulRestartTime time.Duration
	// ShutdownWait is how long a node drain announces the VIPs with the
	// GRACEFUL_SHUTDOWN community before withdrawing them.
	ShutdownWait time.Duration
	// NextHop4 and NextHop6 are the next hops announced for IPv4 and IPv6
	// VIPs; unset means the session's own local address ("next hop self"),
	// which needs a session of the VIP's family. An IPv6 VIP over IPv4
	// sessions needs NextHop6 (and vice versa).
	NextHop4, NextHop6 netip.Addr
	// Peers are the routers, in file order; no address appears twice.
	Peers []BGPPeer
}

// Carries reports whether the sessions can announce VIPs of a's family.
func (b *BGP) Carries(a netip.Addr) bool {
	if b.Mode == BGPExternal {
		return true // the host's daemon's business
	}
	for _, p := range b.Peers {
		if p.Addr.Is4() == a.Is4() {
			return true
		}
	}
	if a.Is4() {
		return b.NextHop4.IsValid() && len(b.Peers) > 0
	}
	return b.NextHop6.IsValid() && len(b.Peers) > 0
}

// Listens reports whether the speaker accepts incoming sessions.
func (b *BGP) Listens() bool { return b.ListenPort > 0 }

// BGPPeer is one router the speaker peers with.
type BGPPeer struct {
	// Addr is the router's address, IPv4 or IPv6 (a zone only with a
	// link-local address).
	Addr netip.Addr
	// ASN is the router's AS number; equal to BGP.ASN for iBGP.
	ASN uint32
	// HoldTime is proposed in OPEN: 0 or MinHoldTime..MaxHoldTime, whole
	// seconds.
	HoldTime time.Duration
	// Keepalive is the time between KEEPALIVEs, whole seconds, 1s..HoldTime
	// (0 when HoldTime is 0). Parse defaults it to a third of HoldTime.
	Keepalive time.Duration
	// Password is the TCP MD5 signature key (RFC 2385); "" for none.
	Password string
	// Port is the router's BGP port.
	Port uint16
}

func (b *BGP) clone() *BGP {
	c := *b
	c.Peers = append([]BGPPeer(nil), b.Peers...)
	return &c
}

func (d *decoder) bgp(n *ynode, node Node) *BGP {
	const path = "bgp"
	b := &BGP{
		ListenPort:          DefaultBGPPort,
		GracefulRestartTime: DefaultGracefulRestartTime,
		ShutdownWait:        DefaultShutdownWait,
	}
	f := d.fields(n, path, append([]string{"mode"}, append(speakerKeys, externalKeys...)...)...)
	if f == nil {
		return b
	}
	if d.bgpMode(f, path) == BGPExternal {
		*b = BGP{Mode: BGPExternal}
		d.bgpExternal(f, path, b, node)
		return b
	}
	b.ASN = d.asn(f, n, path, "the local AS number")
	if v := f.get("router_id"); v != nil {
		b.RouterID, _ = d.addr(v, join(path, "router_id"))
	} else if node.Address.Is4() {
		b.RouterID = node.Address
	}
	if v := f.get("listen_port"); v != nil {
		if i, ok := d.int(v, join(path, "listen_port"), -1, 65535); ok {
			b.ListenPort = int32(i)
			if i == 0 {
				b.ListenPort = NoListen
			}
		}
	}
	if v := f.get("graceful_restart_time"); v != nil {
		b.GracefulRestartTime, _ = d.duration(v, join(path, "graceful_restart_time"))
	}
	if v := f.get("shutdown_wait"); v != nil {
		b.ShutdownWait, _ = d.duration(v, join(path, "shutdown_wait"))
	}
	if v := f.get("next_hop4"); v != nil {
		b.NextHop4, _ = d.addr(v, join(path, "next_hop4"))
	}
	if v := f.get("next_hop6"); v != nil {
		b.NextHop6, _ = d.addr(v, join(path, "next_hop6"))
	}
	if v := f.get("peers"); v != nil {
		for i, item := range d.seq(v, join(path, "peers")) {
			b.Peers = append(b.Peers, d.peer(item, peerPath(i)))
		}
	}
	return b
}

// asn decodes the required field asn of the mapping n at path (f holds its
// fields); what says what it is when it is missing. 0 when missing or bad.
func (d *decoder) asn(f fieldSet, n *ynode, path, what string) uint32 {
	v := f.get("asn")
	if v == nil {
		d.c.at(pos(n), join(path, "asn"), ErrRequired, "required: %s", what)
		return 0
	}
	u, _ := d.uint(v, join(path, "asn"), 1<<32-1)
	return uint32(u)
}

func (d *decoder) peer(n *ynode, path string) BGPPeer {
	p := BGPPeer{Port: DefaultBGPPort, HoldTime: DefaultHoldTime}
	f := d.fields(n, path, "address", "asn", "hold_time", "keepalive", "password", "port")
	if f == nil {
		return p
	}
	if v := f.get("address"); v != nil {
		p.Addr, _ = d.addr(v, join(path, "address"))
	}
	p.ASN = d.asn(f, n, path, "the router's AS number (the local one for iBGP)")
	if v := f.get("hold_time"); v != nil {
		p.HoldTime, _ = d.duration(v, join(path, "hold_time"))
	}
	if v := f.get("keepalive"); v != nil {
		p.Keepalive, _ = d.duration(v, join(path, "keepalive"))
	} else {
		// RFC 4271 10: a third of the hold time, in whole seconds.
		p.Keepalive = (p.HoldTime / 3).Truncate(time.Second)
	}
	if v := f.get("password"); v != nil {
		p.Password, _ = d.str(v, join(path, "password"))
	}
	if v := f.get("port"); v != nil {
		if u, ok := d.uint(v, join(path, "port"), 65535); ok {
			p.Port = uint16(u)
		}
	}
	return p
}

func validateBGP(b *BGP, c *collector) {
	if b == nil {
		return
	}
	if b.Mode == BGPExternal {
		validateBGPExternal(b, c)
		return
	}
	validateASN(b.ASN, "bgp.asn", c)
	switch a := b.RouterID; {
	case !a.IsValid():
		c.errf("bgp.router_id", ErrRequired, "required: an IPv4 address unique to this node (defaults to node.address when that is set)")
	case !a.Is4():
		c.errf("bgp.router_id", ErrInvalid, "%s is not an IPv4 address (a BGP identifier is 4 bytes, even on IPv6 sessions)", a)
	case a.IsUnspecified():
		c.errf("bgp.router_id", ErrInvalid, "0.0.0.0 is not a valid BGP identifier")
	}
	if p := b.ListenPort; p != NoListen && (p < 1 || p > 65535) {
		c.errf("bgp.listen_port", ErrInvalid, "%d is not a port: use 1..65535, or %d not to listen", p, NoListen)
	}
	if t := b.GracefulRestartTime; t < 0 || t > MaxGracefulRestartTime || t%time.Second != 0 {
		c.errf("bgp.graceful_restart_time", ErrInvalid, "%s is not a whole number of seconds in 0s..%s (0: no graceful restart)",
			formatDuration(t), formatDuration(MaxGracefulRestartTime))
	}
	if t := b.ShutdownWait; t < 0 || t > MaxShutdownWait {
		c.errf("bgp.shutdown_wait", ErrInvalid, "%s is out of range 0s..%s", formatDuration(t), formatDuration(MaxShutdownWait))
	}
	if len(b.Peers) == 0 {
		c.errf("bgp.peers", ErrRequired, "required: at least one router to announce the VIPs to")
	}
	if a := b.NextHop4; a.IsValid() && !a.Is4() {
		c.errf("bgp.next_hop4", ErrInvalid, "%s is not an IPv4 address", a)
	}
	if a := b.NextHop6; a.IsValid() && (!a.Is6() || a.Is4In6()) {
		c.errf("bgp.next_hop6", ErrInvalid, "%s is not an IPv6 address", a)
	}
	first := map[netip.Addr]int{}
	for i := range b.Peers {
		validatePeer(&b.Peers[i], peerPath(i), c)
		a := b.Peers[i].Addr
		if !a.IsValid() {
			continue
		}
		if j, dup := first[a]; dup {
			c.errf(join(peerPath(i), "address"), ErrDuplicate, "peer %s is listed twice (first at %s)", a, c.where(peerPath(j)))
		} else {
			first[a] = i
		}
	}
}

func validateASN(asn uint32, path string, c *collector) {
	switch asn {
	case 0:
		c.errf(path, ErrInvalid, "0 is not an AS number: use 1..4294967295")
	case ASTrans:
		c.errf(path, ErrInvalid, "23456 is AS_TRANS (RFC 6793), reserved for 2-byte AS speakers: use your own AS number")
	}
}

func validatePeer(p *BGPPeer, path string, c *collector) {
	switch ap, a := join(path, "address"), p.Addr; {
	case !a.IsValid():
		c.errf(ap, ErrRequired, "required")
	case a.Is4In6():
		c.errf(ap, ErrInvalid, "%s is an IPv4-mapped IPv6 address: write it as %s", a, a.Unmap())
	case a.IsUnspecified() || a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		c.errf(ap, ErrInvalid, "%s is not a unicast address", a)
	case a.Zone() != "" && !a.IsLinkLocalUnicast():
		c.errf(ap, ErrInvalid, "%s has a zone; only a link-local address may have one", a)
	case a.Zone() == "" && a.Is6() && a.IsLinkLocalUnicast():
		c.errf(ap, ErrInvalid, "%s is link-local: add the interface as a zone, such as %s%%eth0", a, a)
	}
	validateASN(p.ASN, join(path, "asn"), c)
	holdOK := false
	switch h := p.HoldTime; {
	case h%time.Second != 0 || h < 0 || h > MaxHoldTime:
		c.errf(join(path, "hold_time"), ErrInvalid, "%s is not a whole number of seconds in 0s..%s", formatDuration(h), formatDuration(MaxHoldTime))
	case h > 0 && h < MinHoldTime:
		c.errf(join(path, "hold_time"), ErrInvalid, "%s is too short: use 0 (no keepalives) or at least 3s (RFC 4271 4.2)", formatDuration(h))
	default:
		holdOK = true
	}
	switch k := p.Keepalive; {
	case k%time.Second != 0 || k < 0:
		c.errf(join(path, "keepalive"), ErrInvalid, "%s is not a whole number of seconds", formatDuration(k))
	case !holdOK:
	case p.HoldTime == 0 && k != 0:
		c.errf(join(path, "keepalive"), ErrInvalid, "must be 0 when hold_time is 0 (RFC 4271: no KEEPALIVEs then)")
	case p.HoldTime > 0 && k == 0:
		c.errf(join(path, "keepalive"), ErrInvalid, "0s with hold_time %s would let the session expire: use at most a third of the hold time",
			formatDuration(p.HoldTime))
	case k > p.HoldTime:
		c.errf(join(path, "keepalive"), ErrInvalid, "%s is longer than hold_time %s: use at most a third of the hold time",
			formatDuration(k), formatDuration(p.HoldTime))
	}
	if n := len(p.Password); n > MaxPasswordLen {
		c.errf(join(path, "password"), ErrInvalid, "is %d bytes long; TCP MD5 keys are at most %d", n, MaxPasswordLen)
	}
	if p.Port == 0 {
		c.errf(join(path, "port"), ErrInvalid, "0 is not a port: leave it out for %d", DefaultBGPPort)
	}
}

// bgpNode builds the YAML of b for Marshal.
func bgpNode(b *BGP) *yaml.Node {
	if b.Mode == BGPExternal {
		return bgpExternalNode(b)
	}
	peers := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for _, p := range b.Peers {
		pn := mapping(
			"address", str(p.Addr.String()),
			"asn", integer(uint64(p.ASN)),
			"hold_time", str(formatDuration(p.HoldTime)),
			"keepalive", str(formatDuration(p.Keepalive)),
			"password", str(p.Password),
			"port", integer(uint64(p.Port)),
		)
		pn.Style = yaml.FlowStyle
		peers.Content = append(peers.Content, pn)
	}
	n := mapping(
		"asn", integer(uint64(b.ASN)),
		"router_id", str(b.RouterID.String()),
		"listen_port", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(int(b.ListenPort))},
		"graceful_restart_time", str(formatDuration(b.GracefulRestartTime)),
		"shutdown_wait", str(formatDuration(b.ShutdownWait)),
	)
	if b.NextHop4.IsValid() {
		n.Content = append(n.Content, str("next_hop4"), str(b.NextHop4.String()))
	}
	if b.NextHop6.IsValid() {
		n.Content = append(n.Content, str("next_hop6"), str(b.NextHop6.String()))
	}
	if len(b.Peers) > 0 {
		n.Content = append(n.Content, str("peers"), peers)
	}
	return n
}
