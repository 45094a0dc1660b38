package lab

import (
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// BGP in the lab (docs/BGP.md).
//
// The router runs BIRD 2 (StartBIRD): one eBGP session per xlb node and
// address family, ECMP into the router's kernel FIB. Node i is peered as
//
//	IPv4 session  router 10.100.0.1 AS 65000  <->  node NodeAddr4(i) AS 65001, ipv4 unicast only
//	IPv6 session  router fd00:100::1 AS 65000 <->  node NodeAddr6(i) AS 65001, ipv6 unicast only
//
// (SessionPerFamily, the default; SessionDualStack carries both families
// over the IPv4 session instead). A node announces each VIP as a host route
// (/32, /128) with itself as next hop (its LAN address of the VIP's family)
// and origin IGP; the router accepts only the lab's VIP prefixes and
// announces nothing. Routes from all nodes that are equal by BGP's rules
// (same local preference, AS path length, origin, MED) are merged into one
// multipath kernel route, over which the kernel hashes flows by 5-tuple
// (fib_multipath_hash_policy=3 over addresses, protocol and ports).
//
// Until xlbd speaks BGP, StartNodeBIRD runs a stand-in speaker: a second
// BIRD in a node's namespace announcing the VIPs the way xlbd will.

// The lab's BGP defaults.
const (
	RouterASN = 65000
	NodeASN   = 65001
	BGPPort   = 179

	DefaultHoldTime      = 3 * time.Second
	DefaultKeepaliveTime = time.Second
	// DefaultRestartTime is the graceful restart time a lab BIRD
	// advertises (BIRD's own default): how long its peer keeps its routes
	// after the session ends without a NOTIFICATION.
	DefaultRestartTime = 120 * time.Second
	// DefaultKernelScanTime is the BIRD kernel protocol's scan period
	// (route changes reach the kernel at once; the scan only resyncs).
	DefaultKernelScanTime = 2 * time.Second
)

// BIRD binaries, looked up on PATH.
const (
	BIRDBinary  = "bird"
	BIRDCBinary = "birdc"
)

// SessionMode says how a node's two address families are carried.
type SessionMode int

const (
	// SessionPerFamily: per node, an IPv4 session (router and node IPv4
	// LAN addresses) with the ipv4 unicast family only, and an IPv6
	// session (IPv6 LAN addresses) with ipv6 unicast only. Each route's
	// next hop is the session's own address family; nothing special is
	// needed on either side.
	SessionPerFamily SessionMode = iota
	// SessionDualStack: per node, one IPv4 session with both ipv4 unicast
	// and ipv6 unicast (RFC 4760). The IPv6 routes' next hop is the
	// node's global IPv6 LAN address, carried in MP_REACH_NLRI; the
	// speaker must set it explicitly (the session has no IPv6 address to
	// use as "self").
	SessionDualStack
)

func (m SessionMode) String() string {
	switch m {
	case SessionPerFamily:
		return "per-family"
	case SessionDualStack:
		return "dual-stack"
	}
	return fmt.Sprintf("SessionMode(%d)", int(m))
}

// BIRDOptions shape the router's BIRD (StartBIRD). The zero value peers
// with every node as described above.
type BIRDOptions struct {
	ASN     uint32 // the router's AS, default RouterASN
	NodeASN uint32 // every node's AS, default NodeASN
	// Nodes are the nodes to peer with, as indexes into Lab.Nodes.
	// Default: all of them.
	Nodes    []int
	Sessions SessionMode
	// Passive makes the router wait for the nodes to connect; by default
	// it both connects (to NodePort) and accepts connections on port 179.
	Passive bool
	// NodePort is the port the router connects to, default BGPPort.
	NodePort uint16
	// HoldTime and KeepaliveTime are the router's proposals (the session
	// uses the smaller hold time of the two sides). Default 3 s and 1 s;
	// BIRD's minimum hold time is 3 s.
	HoldTime, KeepaliveTime time.Duration
	// NoGracefulRestart turns graceful restart off: a session that ends
	// in any way removes the node's routes at once. By default the router
	// is a graceful restart helper (RFC 4724, `graceful restart on`): when
	// a node's session ends without a NOTIFICATION (its speaker crashed or
	// was restarted; not when a hold timer expires), its routes stay, as
	// stale, for the restart time the node advertised, until the node is
	// back and has sent End-of-RIB.
	NoGracefulRestart bool
	// RestartTime is the restart time the router advertises (default
	// DefaultRestartTime). It matters only when the router restarts.
	RestartTime time.Duration
	// Passwords sets a TCP MD5 password (RFC 2385) for node i's sessions.
	Passwords map[int]string
	// Accept lists the prefixes taken from the nodes: a route is imported
	// if its network is one of these or inside one of them. Default: the
	// lab's VIPs as /32 and /128.
	Accept []netip.Prefix
	// KernelScanTime is the kernel protocols' scan time, default
	// DefaultKernelScanTime.
	KernelScanTime time.Duration
	// Debug logs BGP states, events and packets (`debug all`).
	Debug bool
}

func (l *Lab) birdDefaults(o BIRDOptions) (BIRDOptions, error) {
	if o.ASN == 0 {
		o.ASN = RouterASN
	}
	if o.NodeASN == 0 {
		o.NodeASN = NodeASN
	}
	if o.Nodes == nil {
		for i := range l.Nodes {
			o.Nodes = append(o.Nodes, i)
		}
	}
	for _, i := range o.Nodes {
		if i < 0 || i >= len(l.Nodes) {
			return o, fmt.Errorf("bird: node index %d out of range (lab has %d nodes)", i, len(l.Nodes))
		}
	}
	for i, pw := range o.Passwords {
		if i < 0 || i >= len(l.Nodes) {
			return o, fmt.Errorf("bird: password for node index %d out of range", i)
		}
		if err := checkBIRDString("password", pw); err != nil {
			return o, err
		}
	}
	if o.Sessions != SessionPerFamily && o.Sessions != SessionDualStack {
		return o, fmt.Errorf("bird: unknown session mode %v", o.Sessions)
	}
	if o.NodePort == 0 {
		o.NodePort = BGPPort
	}
	if o.HoldTime == 0 {
		o.HoldTime = DefaultHoldTime
	}
	if o.KeepaliveTime == 0 {
		o.KeepaliveTime = DefaultKeepaliveTime
	}
	if o.RestartTime == 0 {
		o.RestartTime = DefaultRestartTime
	}
	if o.Accept == nil {
		o.Accept = l.VIPPrefixes()
	}
	if o.KernelScanTime == 0 {
		o.KernelScanTime = DefaultKernelScanTime
	}
	return o, checkTimers(o.HoldTime, o.KeepaliveTime)
}

func checkTimers(hold, keepalive time.Duration) error {
	if hold < 3*time.Second || hold%time.Second != 0 {
		return fmt.Errorf("bird: hold time %v: want whole seconds, at least 3 s", hold)
	}
	if keepalive < time.Second || keepalive%time.Second != 0 || keepalive > hold/3 {
		return fmt.Errorf("bird: keepalive time %v: want whole seconds, at least 1 s and at most a third of the hold time", keepalive)
	}
	return nil
}

// sessionName names a BGP protocol after its peer (short) and the family
// of like: "n1_v4", "n1_v6"; just "n1" in SessionDualStack.
func sessionName(short string, mode SessionMode, like netip.Addr) string {
	if mode == SessionDualStack {
		return short
	}
	if like.Is4() {
		return short + "_v4"
	}
	return short + "_v6"
}

// families returns which address families the VIPs of vips hold.
func families(vips []netip.Addr) (v4, v6 bool) {
	for _, v := range vips {
		if v.Is4() {
			v4 = true
		} else {
			v6 = true
		}
	}
	return
}

func secs(d time.Duration) int { return int((d + time.Second - 1) / time.Second) }

// birdString quotes s for a BIRD config; checkBIRDString has accepted s.
func birdString(s string) string { return `"` + s + `"` }

// checkBIRDString rejects what a BIRD string cannot hold: it has no
// escapes, so no double quote and no line break.
func checkBIRDString(what, s string) error {
	if strings.ContainsAny(s, "\"\n\r") {
		return fmt.Errorf("bird: %s %q: a BIRD config string cannot hold a double quote or a line break", what, s)
	}
	return nil
}

// RouterBIRDConfig returns the BIRD 2 config that StartBIRD writes, with
// log the file BIRD logs to ("" logs to stderr).
func (l *Lab) RouterBIRDConfig(opts BIRDOptions, log string) ([]byte, error) {
	o, err := l.birdDefaults(opts)
	if err != nil {
		return nil, err
	}
	if err := checkBIRDString("log file", log); err != nil {
		return nil, err
	}
	set4, set6 := acceptSets(o.Accept)
	v4, v6 := len(set4) > 0, len(set6) > 0
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# BIRD 2 config of the router of lab %s (generated by lab).\n", l.Prefix)
	w("# eBGP with the xlb nodes (%s sessions), ECMP into the kernel.\n", o.Sessions)
	writeLog(&b, log)
	w("router id %s;\n", RouterLANAddr4)
	w("timeformat protocol %q;\ntimeformat route %q;\n\n", "%T", "%T")
	w("# Only the lab's VIPs are accepted from the nodes.\n")
	if v4 {
		w("define VIPS4 = [ %s ];\n", strings.Join(set4, ", "))
	}
	if v6 {
		w("define VIPS6 = [ %s ];\n", strings.Join(set6, ", "))
	}
	if v4 {
		w("filter vips4_in { if net ~ VIPS4 then { if (65535,0) ~ bgp_community then bgp_local_pref = 0; accept; } reject; }\n")
	}
	if v6 {
		w("filter vips6_in { if net ~ VIPS6 then { if (65535,0) ~ bgp_community then bgp_local_pref = 0; accept; } reject; }\n")
	}
	w("\nprotocol device { scan time 10; }\n\n")
	w("# Equal routes from several nodes become one multipath kernel route.\n")
	for _, f := range []struct {
		on  bool
		fam string
	}{{v4, "4"}, {v6, "6"}} {
		if !f.on {
			continue
		}
		w("protocol kernel kernel%s {\n", f.fam)
		w("\tipv%s { import none; export all; };\n", f.fam)
		w("\tmerge paths on;\n")
		w("\tscan time %d;\n", secs(o.KernelScanTime))
		w("}\n")
	}
	writeNodeTemplate(w, o)
	for _, i := range o.Nodes {
		n := l.Nodes[i]
		for _, s := range routerSessions(n, o.Sessions, v4, v6) {
			w("\nprotocol bgp %s from xlbnode {\n", s.name)
			w("\tdescription %s;\n", birdString("xlb node "+n.Short))
			w("\tlocal %s as %d;\n", s.local, o.ASN)
			if o.NodePort != BGPPort {
				w("\tneighbor %s port %d as %d;\n", s.nbr, o.NodePort, o.NodeASN)
			} else {
				w("\tneighbor %s as %d;\n", s.nbr, o.NodeASN)
			}
			if pw, ok := o.Passwords[i]; ok && pw != "" {
				w("\tpassword %s;\n", birdString(pw))
			}
			if s.v4 {
				w("\tipv4 { import filter vips4_in; export none; };\n")
			}
			if s.v6 {
				w("\tipv6 { import filter vips6_in; export none; };\n")
			}
			w("}\n")
		}
	}
	return []byte(b.String()), nil
}

// acceptSets returns the router's prefix sets of accepted routes, IPv4
// and IPv6, in BIRD's syntax: a prefix shorter than a host route takes
// its more specific ones too ("+").
func acceptSets(accept []netip.Prefix) (set4, set6 []string) {
	for _, p := range accept {
		p = p.Masked()
		s := p.String()
		if p.Bits() < p.Addr().BitLen() {
			s += "+"
		}
		if p.Addr().Is4() {
			set4 = append(set4, s)
		} else {
			set6 = append(set6, s)
		}
	}
	return set4, set6
}

// sessionTimes is what the router's and the nodes' BIRD templates share:
// the local AS, the timers, graceful restart and passive mode.
type sessionTimes struct {
	ASN                                  uint32
	HoldTime, KeepaliveTime, RestartTime time.Duration
	NoGracefulRestart, Passive           bool
}

// writeSessionTimes writes a template's sessionTimes.
func writeSessionTimes(w func(string, ...any), o sessionTimes) {
	w("\tlocal as %d;\n", o.ASN)
	w("\thold time %d;\n\tkeepalive time %d;\n", secs(o.HoldTime), secs(o.KeepaliveTime))
	w("\tconnect delay time 1;\n\tconnect retry time 1;\n\terror wait time 1, 3;\n")
	if o.NoGracefulRestart {
		w("\tgraceful restart off;\n")
	} else {
		w("\tgraceful restart on;\n\tgraceful restart time %d;\n", secs(o.RestartTime))
	}
	if o.Passive {
		w("\tpassive on;\n")
	}
}

// writeNodeTemplate writes the router's template of its sessions with
// the nodes.
func writeNodeTemplate(w func(string, ...any), o BIRDOptions) {
	w("\ntemplate bgp xlbnode {\n")
	writeSessionTimes(w, sessionTimes{o.ASN, o.HoldTime, o.KeepaliveTime, o.RestartTime, o.NoGracefulRestart, o.Passive})
	if o.Debug {
		w("\tdebug all;\n")
	}
	w("}\n")
}

// routerSession is one of the router's BGP sessions with a node.
type routerSession struct {
	name       string
	local, nbr netip.Addr
	v4, v6     bool // the families it carries
}

// routerSessions returns the router's sessions with node n, for the
// families the VIPs hold (v4, v6): one per family, or one for both in
// SessionDualStack.
func routerSessions(n *Host, mode SessionMode, v4, v6 bool) []routerSession {
	var ss []routerSession
	if mode == SessionDualStack {
		if v4 || v6 {
			ss = append(ss, routerSession{sessionName(n.Short, mode, RouterLANAddr4), RouterLANAddr4, n.Addr4, v4, v6})
		}
		return ss
	}
	if v4 {
		ss = append(ss, routerSession{sessionName(n.Short, mode, RouterLANAddr4), RouterLANAddr4, n.Addr4, true, false})
	}
	if v6 {
		ss = append(ss, routerSession{sessionName(n.Short, mode, RouterLANAddr6), RouterLANAddr6, n.Addr6, false, true})
	}
	return ss
}

func writeLog(b *strings.Builder, log string) {
	if log == "" {
		b.WriteString("log stderr all;\n")
		return
	}
	fmt.Fprintf(b, "log %s all;\n", birdString(log))
}

// NodeBIRDOptions shape a node's stand-in BGP speaker (StartNodeBIRD). They
// must agree with the router's BIRDOptions.
type NodeBIRDOptions struct {
	ASN       uint32 // default NodeASN
	RouterASN uint32 // default RouterASN
	// VIPs are announced as /32 and /128. Default: the lab's VIPs.
	VIPs     []netip.Addr
	Sessions SessionMode
	Passive  bool
	// HoldTime and KeepaliveTime default to 3 s and 1 s.
	HoldTime, KeepaliveTime time.Duration
	// RestartTime is the graceful restart time the node advertises: how
	// long the router keeps the node's routes after the session ends
	// without a NOTIFICATION (Kill). Default DefaultRestartTime.
	RestartTime       time.Duration
	NoGracefulRestart bool
	// Recover starts BIRD with -R, as a restarting speaker (RFC 4724
	// restart state and forwarding state bits set): the router keeps the
	// stale routes until this BIRD has sent them again and End-of-RIB. A
	// restart without it makes the router drop the stale routes at once.
	Recover  bool
	Password string // TCP MD5
	Debug    bool
	// KernelTable or Dummy: instead of static routes, announce what xlbd
	// (bgp.mode external) keeps in that kernel routing table, or as host
	// addresses on that dummy interface.
	KernelTable uint32
	Dummy       string
}

func (l *Lab) nodeBIRDDefaults(o NodeBIRDOptions) (NodeBIRDOptions, error) {
	if o.ASN == 0 {
		o.ASN = NodeASN
	}
	if o.RouterASN == 0 {
		o.RouterASN = RouterASN
	}
	if o.VIPs == nil {
		o.VIPs = l.VIPs
	}
	if o.HoldTime == 0 {
		o.HoldTime = DefaultHoldTime
	}
	if o.KeepaliveTime == 0 {
		o.KeepaliveTime = DefaultKeepaliveTime
	}
	if o.RestartTime == 0 {
		o.RestartTime = DefaultRestartTime
	}
	if o.Sessions != SessionPerFamily && o.Sessions != SessionDualStack {
		return o, fmt.Errorf("bird: unknown session mode %v", o.Sessions)
	}
	if err := checkBIRDString("password", o.Password); err != nil {
		return o, err
	}
	if err := checkLearned(o); err != nil {
		return o, err
	}
	return o, checkTimers(o.HoldTime, o.KeepaliveTime)
}

// NodeBIRDConfig returns the config of node i's stand-in speaker: static
// blackhole routes for the VIPs (BIRD has no kernel protocol there, so
// they never reach the node's kernel), announced to the router with next
// hop self and origin IGP, as xlbd announces them.
func (l *Lab) NodeBIRDConfig(i int, opts NodeBIRDOptions, log string) ([]byte, error) {
	if i < 0 || i >= len(l.Nodes) {
		return nil, fmt.Errorf("bird: node index %d out of range", i)
	}
	o, err := l.nodeBIRDDefaults(opts)
	if err != nil {
		return nil, err
	}
	if err := checkBIRDString("log file", log); err != nil {
		return nil, err
	}
	n := l.Nodes[i]
	v4, v6 := families(o.VIPs)
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# BIRD 2 config of the stand-in BGP speaker of lab %s node %s (generated by lab).\n", l.Prefix, n.Short)
	writeLog(&b, log)
	w("router id %s;\n", n.Addr4)
	w("timeformat protocol %q;\ntimeformat route %q;\n", "%T", "%T")
	if o.Recover {
		w("graceful restart wait 10;\n")
	}
	w("\nprotocol device { scan time 10; }\n")
	source := "RTS_STATIC"
	if o.KernelTable != 0 || o.Dummy != "" {
		source = writeLearnedVIPs(w, o, v4, v6)
	} else {
		writeStaticVIPs(w, o, v4, v6)
	}
	w("\nfilter vips_out { if source != %s then reject; bgp_origin = ORIGIN_IGP; accept; }\n", source)
	w("\ntemplate bgp uplink_tmpl {\n")
	writeSessionTimes(w, sessionTimes{o.ASN, o.HoldTime, o.KeepaliveTime, o.RestartTime, o.NoGracefulRestart, o.Passive})
	if o.Password != "" {
		w("\tpassword %s;\n", birdString(o.Password))
	}
	if o.Debug {
		w("\tdebug all;\n")
	}
	w("}\n")
	ch4 := "\tipv4 { import none; export filter vips_out; next hop self; };\n"
	ch6 := "\tipv6 { import none; export filter vips_out; next hop self; };\n"
	if o.Sessions == SessionDualStack {
		w("\nprotocol bgp uplink from uplink_tmpl {\n")
		w("\tlocal %s as %d;\n\tneighbor %s as %d;\n", n.Addr4, o.ASN, RouterLANAddr4, o.RouterASN)
		if v4 {
			w("%s", ch4)
		}
		if v6 {
			// No IPv6 address on an IPv4 session to be "self": name it.
			w("\tipv6 { import none; export filter vips_out; next hop address %s; };\n", n.Addr6)
		}
		w("}\n")
	} else {
		if v4 {
			w("\nprotocol bgp uplink_v4 from uplink_tmpl {\n")
			w("\tlocal %s as %d;\n\tneighbor %s as %d;\n", n.Addr4, o.ASN, RouterLANAddr4, o.RouterASN)
			w("%s}\n", ch4)
		}
		if v6 {
			w("\nprotocol bgp uplink_v6 from uplink_tmpl {\n")
			w("\tlocal %s as %d;\n\tneighbor %s as %d;\n", n.Addr6, o.ASN, RouterLANAddr6, o.RouterASN)
			w("%s}\n", ch6)
		}
	}
	return []byte(b.String()), nil
}
