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

// asn is an AS number: 1..4294967295, not AS_TRANS.
type asn[T any] struct{ plain[T, uint32] }

func asnOf[T any](at func(*T) *uint32) value[T] { return asn[T]{plain[T, uint32]{at: at}} }

func (v asn[T]) decode(d *decoder, n *ynode, path string, obj *T) {
	u, _ := d.uint(n, path, 1<<32-1)
	*v.at(obj) = uint32(u)
}
func (v asn[T]) encode(obj *T) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatUint(uint64(*v.at(obj)), 10)}
}
func (v asn[T]) isZero(obj *T) bool { return *v.at(obj) == 0 }
func (v asn[T]) check(obj *T, at loc, c *collector) {
	switch *v.at(obj) {
	case 0:
		c.errf(at.path(), ErrInvalid, "0 is not an AS number: use 1..4294967295")
	case ASTrans:
		c.errf(at.path(), ErrInvalid, "23456 is AS_TRANS (RFC 6793), reserved for 2-byte AS speakers: use your own AS number")
	}
}
func (v asn[T]) about() about { return about{typ: "AS number", bounds: "1..4294967295, not 23456"} }

// listenPort is bgp.listen_port: a port, or NoListen (written 0 or -1).
type listenPort struct{}

func (listenPort) decode(d *decoder, n *ynode, path string, b *BGP) {
	if i, ok := d.int(n, path, -1, 65535); ok {
		b.ListenPort = int32(i)
		if i == 0 {
			b.ListenPort = NoListen
		}
	}
}
func (listenPort) encode(b *BGP) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(int(b.ListenPort))}
}
func (listenPort) isZero(b *BGP) bool { return b.ListenPort == 0 }
func (listenPort) reset(b *BGP)       { b.ListenPort = DefaultBGPPort }
func (listenPort) clear(b *BGP)       { b.ListenPort = 0 }
func (listenPort) check(b *BGP, at loc, c *collector) {
	if p := b.ListenPort; p != NoListen && (p < 1 || p > 65535) {
		c.errf(at.path(), ErrInvalid, "%d is not a port: use 1..65535, or %d not to listen", p, NoListen)
	}
}
func (listenPort) about() about {
	return about{typ: "integer", def: strconv.Itoa(DefaultBGPPort), bounds: "-1..65535"}
}

func validateBGP(b *BGP, node *Node, c *collector) {
	if b == nil {
		return
	}
	if b.Mode == BGPExternal {
		validateBGPExternal(b, node, c)
		return
	}
	switch a := b.RouterID; {
	case !a.IsValid():
		c.errf(join(kBGP, kRouterID), ErrRequired, "required: an IPv4 address unique to this node (defaults to node.address when that is set)")
	case !a.Is4():
		c.errf(join(kBGP, kRouterID), ErrInvalid, "%s is not an IPv4 address (a BGP identifier is 4 bytes, even on IPv6 sessions)", a)
	case a.IsUnspecified():
		c.errf(join(kBGP, kRouterID), ErrInvalid, "0.0.0.0 is not a valid BGP identifier")
	}
	if len(b.Peers) == 0 {
		c.errf(join(kBGP, kPeers), ErrRequired, "required: at least one router to announce the VIPs to")
	}
	if a := b.NextHop4; a.IsValid() && !a.Is4() {
		c.errf(join(kBGP, kNextHop4), ErrInvalid, "%s is not an IPv4 address", a)
	}
	if a := b.NextHop6; a.IsValid() && (!a.Is6() || a.Is4In6()) {
		c.errf(join(kBGP, kNextHop6), ErrInvalid, "%s is not an IPv6 address", a)
	}
	first := map[netip.Addr]int{}
	for i := range b.Peers {
		validatePeer(&b.Peers[i], peerPath(i), c)
		a := b.Peers[i].Addr
		if !a.IsValid() {
			continue
		}
		if j, dup := first[a]; dup {
			c.errf(join(peerPath(i), kAddress), ErrDuplicate, "peer %s is listed twice (first at %s)", a, c.where(peerPath(j)))
		} else {
			first[a] = i
		}
	}
}

func validatePeer(p *BGPPeer, path string, c *collector) {
	switch ap, a := join(path, kAddress), p.Addr; {
	case !a.IsValid():
		// Required: reported by peerKeys' check.
	case a.Is4In6():
		c.errf(ap, ErrInvalid, "%s is an IPv4-mapped IPv6 address: write it as %s", a, a.Unmap())
	case a.IsUnspecified() || a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		c.errf(ap, ErrInvalid, "%s is not a unicast address", a)
	case a.Zone() != "" && !a.IsLinkLocalUnicast():
		c.errf(ap, ErrInvalid, "%s has a zone; only a link-local address may have one", a)
	case a.Zone() == "" && a.Is6() && a.IsLinkLocalUnicast():
		c.errf(ap, ErrInvalid, "%s is link-local: add the interface as a zone, such as %s%%eth0", a, a)
	}
	holdOK := false
	switch h := p.HoldTime; {
	case h%time.Second != 0 || h < 0 || h > MaxHoldTime:
		// Out of bounds: reported by peerKeys' check.
	case h > 0 && h < MinHoldTime:
		c.errf(join(path, kHoldTime), ErrInvalid, "%s is too short: use 0 (no keepalives) or at least 3s (RFC 4271 4.2)", formatDuration(h))
	default:
		holdOK = true
	}
	switch k := p.Keepalive; {
	case !holdOK:
	case p.HoldTime == 0 && k != 0:
		c.errf(join(path, kKeepalive), ErrInvalid, "must be 0 when hold_time is 0 (RFC 4271: no KEEPALIVEs then)")
	case p.HoldTime > 0 && k == 0:
		c.errf(join(path, kKeepalive), ErrInvalid, "0s with hold_time %s would let the session expire: use at most a third of the hold time",
			formatDuration(p.HoldTime))
	case k > p.HoldTime:
		c.errf(join(path, kKeepalive), ErrInvalid, "%s is longer than hold_time %s: use at most a third of the hold time",
			formatDuration(k), formatDuration(p.HoldTime))
	}
	if n := len(p.Password); n > MaxPasswordLen {
		c.errf(join(path, kPassword), ErrInvalid, "is %d bytes long; TCP MD5 keys are at most %d", n, MaxPasswordLen)
	}
	if p.Port == 0 {
		c.errf(join(path, kPort), ErrInvalid, "0 is not a port: leave it out for %d", DefaultBGPPort)
	}
}
