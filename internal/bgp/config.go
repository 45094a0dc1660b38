package bgp

import (
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Config is what the speaker needs: the local identity, graceful restart and
// shutdown timing, optional next hops and the routers to peer with. The config
// package maps the `bgp:` YAML section onto it; New validates it (Validate).
type Config struct {
	// ASN is the local autonomous system number (4-octet ASNs allowed).
	ASN uint32
	// RouterID is the BGP identifier, an IPv4 address.
	RouterID netip.Addr
	// ListenPort is the TCP port to accept sessions on (all addresses, v4
	// and v6); <= 0 does not listen and the speaker only dials its peers.
	ListenPort int32
	// GracefulRestartTime is the Restart Time advertised in the graceful
	// restart capability (RFC 4724): how long peers keep our routes, marked
	// stale, after the session drops without a NOTIFICATION. Whole seconds,
	// at most 4095 s; 0 does not advertise the capability at all (a restart
	// then withdraws everything at the peers).
	GracefulRestartTime time.Duration
	// ShutdownWait is how long GracefulShutdown keeps the routes announced
	// with the GRACEFUL_SHUTDOWN community before withdrawing them.
	ShutdownWait time.Duration
	// NextHop4 is the next hop of IPv4 prefixes. Unset: the local address of
	// each session, which needs an IPv4 session; IPv4 prefixes are then not
	// offered to IPv6 peers.
	NextHop4 netip.Addr
	// NextHop6 is the next hop of IPv6 prefixes. Unset: the local address of
	// each session, which needs an IPv6 session; IPv6 prefixes are then not
	// offered to IPv4 peers. Set it to announce IPv6 VIPs over IPv4 sessions
	// (MP-BGP, RFC 4760).
	NextHop6 netip.Addr
	// Restarting marks this start as the return of a speaker whose routes
	// the peers still hold, stale, while the pinned data plane kept
	// forwarding (xlbd restarted). The OPEN then carries the Restart State
	// (R) bit and, per family, the Forwarding State (F) bit; the speaker
	// waits for the peers' End-of-RIB (at most the selection deferral time)
	// and sends its whole table then End-of-RIB, at which point the peers
	// drop the stale routes that were not announced again. Call SetAnnounced
	// before Start so that table is complete. Ignored without graceful
	// restart. Leave it false on a cold start: without the F bit a peer
	// still holding stale routes from us drops them at once (correct when
	// forwarding was not preserved).
	Restarting bool
	// Peers are the routers to announce to; at least one.
	Peers []Peer
}

// Peer is one BGP neighbour.
type Peer struct {
	// Addr is the neighbour's address (no link-local addresses).
	Addr netip.Addr
	// ASN is the neighbour's AS: equal to Config.ASN for iBGP.
	ASN uint32
	// Port is the neighbour's TCP port; 0 means 179.
	Port uint16
	// HoldTime is the hold time proposed in the OPEN (whole seconds, 0 or
	// >= 3 s; 0 means 90 s). The session uses the smaller of both sides'.
	HoldTime time.Duration
	// Keepalive is the keepalive interval (whole seconds, below HoldTime;
	// 0 means HoldTime/3).
	Keepalive time.Duration
	// Password enables TCP MD5 signatures (RFC 2385) when not empty.
	Password string
}

// Errors returned by this package, for errors.Is.
var (
	// ErrInvalidConfig wraps every Config validation error.
	ErrInvalidConfig = errors.New("invalid bgp config")
	// ErrNotHostPrefix: SetAnnounced takes /32 and /128 prefixes only.
	ErrNotHostPrefix = errors.New("not a /32 or /128 prefix")
	// ErrNoSession: a prefix's family is carried by no configured peer.
	ErrNoSession = errors.New("no peer session carries this address family")
	// ErrStarted: Start was called twice.
	ErrStarted = errors.New("bgp speaker already started")
	// ErrStopped: the speaker was stopped; make a new one.
	ErrStopped = errors.New("bgp speaker stopped")
	// ErrDrainAborted: Undrain ended a GracefulShutdown during its wait.
	ErrDrainAborted = errors.New("graceful shutdown aborted by undrain")
)

// Protocol limits and the defaults the speaker applies.
const (
	defaultHoldTime    = 90 * time.Second
	minHoldTime        = 3 * time.Second // RFC 4271 4.2: 0 or at least 3 s
	maxHoldTime        = 65535 * time.Second
	maxRestartTime     = 4095 * time.Second // 12-bit field, RFC 4724 3
	maxMD5KeyLen       = 80                 // TCP_MD5SIG_MAXKEYLEN
	connectRetry       = 5 * time.Second    // GoBGP's default is 120 s
	maxRestartDeferral = 10 * time.Second
)

// Validate checks c and returns an error wrapping ErrInvalidConfig that names
// the field, or nil.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	if c.ASN == 0 {
		return bad("ASN: must not be 0")
	}
	if !c.RouterID.Unmap().Is4() || c.RouterID.IsUnspecified() {
		return bad("RouterID %v: must be an IPv4 address other than 0.0.0.0", c.RouterID)
	}
	if c.ListenPort > 65535 {
		return bad("ListenPort %d: above 65535", c.ListenPort)
	}
	if err := wholeSeconds(c.GracefulRestartTime, 0, maxRestartTime); err != nil {
		return bad("GracefulRestartTime: %v", err)
	}
	if c.ShutdownWait < 0 {
		return bad("ShutdownWait %v: negative", c.ShutdownWait)
	}
	if c.NextHop4.IsValid() && (!c.NextHop4.Unmap().Is4() || c.NextHop4.IsUnspecified()) {
		return bad("NextHop4 %v: must be an IPv4 address other than 0.0.0.0", c.NextHop4)
	}
	if c.NextHop6.IsValid() && (!c.NextHop6.Is6() || c.NextHop6.Is4In6() || c.NextHop6.IsUnspecified() || c.NextHop6.IsLinkLocalUnicast()) {
		return bad("NextHop6 %v: must be a global IPv6 address", c.NextHop6)
	}
	if len(c.Peers) == 0 {
		return bad("Peers: at least one peer is needed")
	}
	seen := make(map[netip.Addr]int, len(c.Peers))
	for i, p := range c.Peers {
		a := p.Addr.Unmap()
		switch {
		case !a.IsValid() || a.IsUnspecified():
			return bad("Peers[%d].Addr %v: not a peer address", i, p.Addr)
		case a.IsLinkLocalUnicast() || a.Zone() != "":
			return bad("Peers[%d].Addr %v: link-local peers are not supported; use a global address", i, p.Addr)
		}
		if j, dup := seen[a]; dup {
			return bad("Peers[%d].Addr %v: same address as Peers[%d]", i, p.Addr, j)
		}
		seen[a] = i
		if p.ASN == 0 {
			return bad("Peers[%d].ASN: must not be 0", i)
		}
		if p.HoldTime != 0 {
			if err := wholeSeconds(p.HoldTime, minHoldTime, maxHoldTime); err != nil {
				return bad("Peers[%d].HoldTime: %v (0 means 90s)", i, err)
			}
		}
		if err := wholeSeconds(p.Keepalive, 0, maxHoldTime); err != nil {
			return bad("Peers[%d].Keepalive: %v", i, err)
		}
		if hold := p.holdTime(); p.Keepalive >= hold {
			return bad("Peers[%d].Keepalive %v: must be below the hold time %v", i, p.Keepalive, hold)
		}
		if len(p.Password) > maxMD5KeyLen {
			return bad("Peers[%d].Password: longer than %d bytes (TCP MD5 key limit)", i, maxMD5KeyLen)
		}
	}
	return nil
}

// wholeSeconds checks that d is a whole number of seconds within [lo, hi].
func wholeSeconds(d, lo, hi time.Duration) error {
	if d%time.Second != 0 {
		return fmt.Errorf("%v is not a whole number of seconds", d)
	}
	if d < lo || d > hi {
		return fmt.Errorf("%v out of range [%v, %v]", d, lo, hi)
	}
	return nil
}

// holdTime is the configured hold time with the default applied.
func (p Peer) holdTime() time.Duration {
	if p.HoldTime == 0 {
		return defaultHoldTime
	}
	return p.HoldTime
}

// keepalive is the configured keepalive interval with the default applied.
func (p Peer) keepalive() time.Duration {
	if p.Keepalive == 0 {
		return p.holdTime() / 3
	}
	return p.Keepalive
}

// families reports which unicast families the session with p carries: its
// own address family always, the other one when a next hop is configured
// for it (a session cannot supply a next hop of the other family).
func (c Config) families(p Peer) (v4, v6 bool) {
	a := p.Addr.Unmap()
	return a.Is4() || c.NextHop4.IsValid(), a.Is6() || c.NextHop6.IsValid()
}

// restartDeferral is GoBGP's selection deferral time in restarting mode: how
// long to wait for the peers' End-of-RIB before sending our table anyway. xlb
// imports nothing, so waiting buys nothing; it is kept short and well inside
// the restart time, so that peers still holding our stale routes get the
// fresh table before their timers run out even if another peer is down.
func (c Config) restartDeferral() time.Duration {
	d := min(c.GracefulRestartTime/4, maxRestartDeferral)
	return max(d.Truncate(time.Second), time.Second)
}
