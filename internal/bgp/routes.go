package bgp

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/osrg/gobgp/v4/pkg/apiutil"
	bgppkt "github.com/osrg/gobgp/v4/pkg/packet/bgp"
)

// gracefulShutdownCommunity is the well-known GRACEFUL_SHUTDOWN community,
// 65535:0 (RFC 8326 4): receivers that honour it set LOCAL_PREF to 0, so
// traffic moves to other paths before the route is withdrawn.
const gracefulShutdownCommunity uint32 = 0xFFFF0000

// drainMode is where the node stands in a graceful shutdown.
type drainMode int

const (
	inService drainMode = iota // announced normally
	draining                   // announced with GRACEFUL_SHUTDOWN, waiting
	drained                    // withdrawn
)

func (m drainMode) String() string {
	switch m {
	case inService:
		return "in-service"
	case draining:
		return "draining"
	case drained:
		return "drained"
	}
	return fmt.Sprintf("drainMode(%d)", int(m))
}

// rib is a set of announced prefixes; the value says whether the prefix
// carries the GRACEFUL_SHUTDOWN community.
type rib map[netip.Prefix]bool

// target is what should be in GoBGP's RIB: every desired prefix, marked with
// the community while draining; nothing once drained.
func target(desired map[netip.Prefix]struct{}, mode drainMode) rib {
	t := make(rib, len(desired))
	if mode == drained {
		return t
	}
	for p := range desired {
		t[p] = mode == draining
	}
	return t
}

// change is one RIB update: announce (or re-announce with other attributes)
// or withdraw one prefix.
type change struct {
	Prefix   netip.Prefix
	Withdraw bool
	GShut    bool
}

// diff returns the updates that turn cur into want, sorted by prefix so logs
// and tests are stable: announcements of new or changed prefixes, then
// withdrawals of the ones want lacks.
func diff(cur, want rib) []change {
	var out []change
	for p, gshut := range want {
		if old, ok := cur[p]; !ok || old != gshut {
			out = append(out, change{Prefix: p, GShut: gshut})
		}
	}
	for p := range cur {
		if _, ok := want[p]; !ok {
			out = append(out, change{Prefix: p, Withdraw: true})
		}
	}
	slices.SortFunc(out, func(a, b change) int {
		if a.Withdraw != b.Withdraw {
			if a.Withdraw {
				return 1
			}
			return -1
		}
		return a.Prefix.Addr().Compare(b.Prefix.Addr())
	})
	return out
}

// normalize checks that every prefix is a host route (/32 or /128) that some
// peer session can carry, and returns them as a set (IPv4-mapped IPv6
// addresses become IPv4). It returns an error wrapping ErrNotHostPrefix or
// ErrNoSession for the first one that is not.
func (c Config) normalize(prefixes []netip.Prefix) (map[netip.Prefix]struct{}, error) {
	var carry4, carry6 bool
	for _, p := range c.Peers {
		v4, v6 := c.families(p)
		carry4, carry6 = carry4 || v4, carry6 || v6
	}
	set := make(map[netip.Prefix]struct{}, len(prefixes))
	for _, p := range prefixes {
		if !p.IsValid() || !p.IsSingleIP() {
			return nil, fmt.Errorf("announce %v: %w", p, ErrNotHostPrefix)
		}
		a := p.Addr().Unmap().WithZone("")
		if a.IsUnspecified() {
			return nil, fmt.Errorf("announce %v: %w", p, ErrNotHostPrefix)
		}
		if a.Is4() && !carry4 {
			return nil, fmt.Errorf("announce %v: %w: no IPv4 peer; set a next hop for IPv4 (NextHop4)", p, ErrNoSession)
		}
		if a.Is6() && !carry6 {
			return nil, fmt.Errorf("announce %v: %w: no IPv6 peer; set a next hop for IPv6 (NextHop6)", p, ErrNoSession)
		}
		set[netip.PrefixFrom(a, a.BitLen())] = struct{}{}
	}
	return set, nil
}

// path builds the GoBGP path for one change: origin IGP, the configured next
// hop or the unspecified address (which GoBGP replaces with each session's
// local address: "next hop self"), and GRACEFUL_SHUTDOWN when draining.
// IPv6 prefixes go in MP_REACH_NLRI (RFC 4760); GoBGP picks the encoding
// from the family.
func (c Config) path(ch change) (*apiutil.Path, error) {
	nlri, err := bgppkt.NewIPAddrPrefix(ch.Prefix)
	if err != nil {
		return nil, fmt.Errorf("prefix %v: %w", ch.Prefix, err)
	}
	attrs := []bgppkt.PathAttributeInterface{bgppkt.NewPathAttributeOrigin(bgppkt.BGP_ORIGIN_ATTR_TYPE_IGP)}
	family := bgppkt.RF_IPv4_UC
	if ch.Prefix.Addr().Is4() {
		nh := netip.IPv4Unspecified()
		if c.NextHop4.IsValid() {
			nh = c.NextHop4.Unmap()
		}
		a, err := bgppkt.NewPathAttributeNextHop(nh)
		if err != nil {
			return nil, fmt.Errorf("next hop %v: %w", nh, err)
		}
		attrs = append(attrs, a)
	} else {
		family = bgppkt.RF_IPv6_UC
		nh := netip.IPv6Unspecified()
		if c.NextHop6.IsValid() {
			nh = c.NextHop6
		}
		a, err := bgppkt.NewPathAttributeMpReachNLRI(family, []bgppkt.PathNLRI{{NLRI: nlri}}, nh)
		if err != nil {
			return nil, fmt.Errorf("next hop %v: %w", nh, err)
		}
		attrs = append(attrs, a)
	}
	if ch.GShut && !ch.Withdraw {
		attrs = append(attrs, bgppkt.NewPathAttributeCommunities([]uint32{gracefulShutdownCommunity}))
	}
	return &apiutil.Path{
		Family:     family,
		Nlri:       nlri,
		Attrs:      attrs,
		Withdrawal: ch.Withdraw,
		Age:        time.Now().Unix(),
	}, nil
}
