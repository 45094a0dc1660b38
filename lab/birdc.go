package lab

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Protocol is a BIRD protocol as `birdc show protocols all` shows it.
type Protocol struct {
	Name  string
	Proto string // "BGP", "Kernel", "Device", "Static"
	Table string
	State string // "up", "start", "down", ...
	Since string
	// Info is the rest of the summary line: for BGP the session state
	// ("Established", "Active", "Connect", ...) and the last error, if any.
	Info string
	// GracefulRestart reports, for BGP, "Neighbor graceful restart
	// active": the peer's session went down without a NOTIFICATION and
	// the router keeps its routes (as stale) until the peer is back and
	// has sent End-of-RIB, or its restart time runs out.
	GracefulRestart bool
	// LastError is BGP's "Last error", e.g. "Socket: Connection closed",
	// "Hold timer expired", "Received: Administrative shutdown".
	LastError string
}

// Established reports whether p is a BGP session in state Established.
func (p Protocol) Established() bool {
	return p.Proto == "BGP" && strings.HasPrefix(p.Info, "Established")
}

// Protocols returns BIRD's protocols and their states.
func (b *BIRD) Protocols(ctx context.Context) ([]Protocol, error) {
	out, err := b.Birdc(ctx, "show", "protocols", "all")
	if err != nil {
		return nil, err
	}
	return parseProtocols(out), nil
}

// parseProtocols parses `show protocols` or `show protocols all`: a
// summary line per protocol, then (all) indented details.
func parseProtocols(out string) []Protocol {
	var ps []Protocol
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t") {
			if len(ps) == 0 {
				continue
			}
			p := &ps[len(ps)-1]
			l := strings.TrimSpace(line)
			switch {
			case l == "Neighbor graceful restart active":
				p.GracefulRestart = true
			case strings.HasPrefix(l, "Last error:"):
				p.LastError = strings.TrimSpace(strings.TrimPrefix(l, "Last error:"))
			}
			continue
		}
		f := strings.Fields(line)
		if len(f) < 5 || (f[0] == "Name" && f[1] == "Proto") || strings.HasPrefix(line, "BIRD ") {
			continue
		}
		p := Protocol{Name: f[0], Proto: f[1], Table: f[2], State: f[3], Since: f[4]}
		if len(f) > 5 {
			p.Info = strings.Join(f[5:], " ")
		}
		ps = append(ps, p)
	}
	return ps
}

// WaitEstablished waits until every named BGP protocol (every BGP protocol
// if none is named) is Established.
func (b *BIRD) WaitEstablished(ctx context.Context, timeout time.Duration, names ...string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		ps, err := b.Protocols(ctx)
		pending := []string{}
		if err == nil {
			seen := map[string]bool{}
			for _, p := range ps {
				if p.Proto != "BGP" || (len(names) > 0 && !slices.Contains(names, p.Name)) {
					continue
				}
				seen[p.Name] = true
				if !p.Established() {
					pending = append(pending, fmt.Sprintf("%s (%s %s)", p.Name, p.State, p.Info))
				}
			}
			for _, n := range names {
				if !seen[n] {
					pending = append(pending, n+" (no such BGP protocol)")
				}
			}
			if len(pending) == 0 {
				return nil
			}
		}
		if b.Exited() {
			return fmt.Errorf("bird in %s exited (%v); output:\n%s", b.Host.Name, b.Wait(), lastLines(b.Output(), 20))
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("bird in %s: sessions not established within %v: %w", b.Host.Name, timeout, err)
			}
			return fmt.Errorf("bird in %s: sessions not established within %v: %s", b.Host.Name, timeout, strings.Join(pending, ", "))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// NextHop is one next hop of a route in BIRD's table: for BGP, one path
// from one node.
type NextHop struct {
	Net      netip.Prefix
	Table    string // "master4", "master6"
	Protocol string // the BIRD protocol it came from: "n1_v4"
	// Addr and Iface are the immediate next hop ("via ADDR on IFACE").
	Addr  netip.Addr
	Iface string
	// Primary marks the best route ("*"); with merge paths on, the
	// kernel gets every route equal to it.
	Primary bool
	// Stale marks a route that long-lived graceful restart (RFC 9494)
	// keeps for a peer that is gone: "(100s)". BIRD does not mark routes
	// kept by plain graceful restart; see Protocol.GracefulRestart.
	Stale bool
	// Origin ("IGP", "EGP", "Incomplete"), ASPath ("65001") and BGPNextHop
	// (the NEXT_HOP attribute, possibly with a link-local address) are
	// BGP attributes.
	Origin, ASPath, BGPNextHop string
}

// Routes returns the next hops BIRD holds for prefix exactly (`birdc show
// route for PREFIX all`); none when it has no route for it.
func (b *BIRD) Routes(ctx context.Context, prefix netip.Prefix) ([]NextHop, error) {
	prefix = prefix.Masked()
	out, err := b.Birdc(ctx, "show", "route", "for", prefix.String(), "all")
	if strings.Contains(out, "Network not found") {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var nhs []NextHop
	for _, nh := range parseRoutes(out) {
		if nh.Net == prefix {
			nhs = append(nhs, nh)
		}
	}
	return nhs, nil
}

// parseRoutes parses the output of `show route ... all`:
//
//	Table master4:
//	10.200.0.1/32        unicast [n1_v4 12:00:01] * (100) [AS65001i]
//		via 10.100.0.11 on eth1
//		Type: BGP univ
//		BGP.origin: IGP
//		BGP.as_path: 65001
//		BGP.next_hop: 10.100.0.11
//	                     unicast [n2_v4 12:00:01] (100 s) [AS65001i]
//		via 10.100.0.12 on eth1
//		...
func parseRoutes(out string) []NextHop {
	var r routeReader
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.TrimSpace(line) == "" || strings.HasPrefix(line, "BIRD "):
		case strings.HasPrefix(line, "Table "):
			r.flush()
			r.table = strings.TrimSuffix(strings.TrimPrefix(line, "Table "), ":")
		case strings.HasPrefix(line, "\t"):
			l := strings.TrimSpace(line)
			if rest, ok := strings.CutPrefix(l, "via "); ok {
				r.via(rest)
			} else if k, v, ok := strings.Cut(l, ": "); ok {
				r.attr(k, v)
			}
		default: // a route: "NET  unicast [proto time ...] * (pref) ..." or its continuation
			r.flush()
			r.route(line)
		}
	}
	r.flush()
	return r.nhs
}

// routeReader is parseRoutes' state: the next hops read, and where it is.
type routeReader struct {
	nhs   []NextHop
	table string
	net   netip.Prefix
	cur   *NextHop // the route being read, before its first via
	first int      // index in nhs of the current route's first next hop
}

// flush ends a route that had no "via" (blackhole, ...): it is a next hop
// of its own.
func (r *routeReader) flush() {
	if r.cur != nil {
		r.nhs = append(r.nhs, *r.cur)
		r.cur = nil
	}
}

// route starts reading the route of line: its net (the last one's on a
// continuation line), protocol, and whether it is primary or stale.
func (r *routeReader) route(line string) {
	f := strings.Fields(line)
	if !strings.HasPrefix(line, " ") && len(f) > 0 {
		if p, err := netip.ParsePrefix(f[0]); err == nil {
			r.net = p
		}
	}
	nh := NextHop{Net: r.net, Table: r.table}
	if i := strings.IndexByte(line, '['); i >= 0 {
		bracket := line[i+1:]
		if j := strings.IndexByte(bracket, ']'); j >= 0 {
			if bf := strings.Fields(bracket[:j]); len(bf) > 0 {
				nh.Protocol = bf[0]
			}
			tail := bracket[j+1:]
			nh.Primary = strings.HasPrefix(strings.TrimSpace(tail), "*")
			// " (100)", " (100s)", " (100-s/20)": preference, suppressed, stale, metric.
			if k := strings.IndexByte(tail, '('); k >= 0 {
				pref, _, _ := strings.Cut(tail[k+1:], ")")
				pref, _, _ = strings.Cut(pref, "/")
				nh.Stale = strings.HasSuffix(pref, "s")
			}
		}
	}
	r.cur, r.first = &nh, len(r.nhs)
}

// via adds a next hop "ADDR on IFACE" to the current route: its first, or
// another path of a multipath route.
func (r *routeReader) via(rest string) {
	var nh NextHop
	switch {
	case r.cur != nil:
		nh, r.first = *r.cur, len(r.nhs)
		r.cur = nil
	case r.first < len(r.nhs):
		nh = r.nhs[r.first] // another path of a multipath route
	default:
		return
	}
	f := strings.Fields(rest)
	if a, err := netip.ParseAddr(f[0]); err == nil {
		nh.Addr = a
	}
	if len(f) >= 3 && f[1] == "on" {
		nh.Iface = f[2]
	}
	r.nhs = append(r.nhs, nh)
}

// attr sets the BGP attribute k of the current route's next hops to v.
func (r *routeReader) attr(k, v string) {
	var set func(*NextHop)
	switch k {
	case "BGP.origin":
		set = func(n *NextHop) { n.Origin = v }
	case "BGP.as_path":
		set = func(n *NextHop) { n.ASPath = v }
	case "BGP.next_hop":
		set = func(n *NextHop) { n.BGPNextHop = v }
	default:
		return
	}
	if r.cur != nil {
		set(r.cur)
	}
	for i := r.first; i < len(r.nhs); i++ {
		set(&r.nhs[i])
	}
}

// NextHopAddrs returns the distinct immediate next hops of nhs, sorted.
func NextHopAddrs(nhs []NextHop) []netip.Addr {
	var as []netip.Addr
	for _, nh := range nhs {
		if nh.Addr.IsValid() && !slices.Contains(as, nh.Addr) {
			as = append(as, nh.Addr)
		}
	}
	slices.SortFunc(as, netip.Addr.Compare)
	return as
}

// describe summarises BIRD's sessions and its routes for prefixes, for
// error messages.
func (b *BIRD) describe(ctx context.Context, prefixes ...netip.Prefix) string {
	var s bytes.Buffer
	if ps, err := b.Protocols(ctx); err != nil {
		fmt.Fprintf(&s, "bird in %s: %v", b.Host.Name, err)
	} else {
		var bgp []string
		for _, p := range ps {
			if p.Proto == "BGP" {
				bgp = append(bgp, fmt.Sprintf("%s %s %s", p.Name, p.State, p.Info))
			}
		}
		fmt.Fprintf(&s, "bird in %s: sessions: %s", b.Host.Name, strings.Join(bgp, "; "))
	}
	for _, p := range prefixes {
		nhs, err := b.Routes(ctx, p)
		var parts []string
		for _, nh := range nhs {
			x := nh.Protocol + " via " + nh.Addr.String()
			if nh.Stale {
				x += " (stale)"
			}
			parts = append(parts, x)
		}
		if err != nil {
			parts = append(parts, err.Error())
		}
		fmt.Fprintf(&s, "; BIRD's routes for %v: [%s]", p, strings.Join(parts, ", "))
	}
	return s.String()
}
