package lab

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
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
// (fib_multipath_hash_policy=1).
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
	var set4, set6 []string
	for _, p := range o.Accept {
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
	w("\ntemplate bgp xlbnode {\n")
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
	if o.Debug {
		w("\tdebug all;\n")
	}
	w("}\n")
	for _, i := range o.Nodes {
		n := l.Nodes[i]
		type session struct {
			name       string
			local, nbr netip.Addr
			v4, v6     bool
		}
		var ss []session
		if o.Sessions == SessionDualStack {
			if v4 || v6 {
				ss = append(ss, session{sessionName(n.Short, o.Sessions, RouterLANAddr4), RouterLANAddr4, n.Addr4, v4, v6})
			}
		} else {
			if v4 {
				ss = append(ss, session{sessionName(n.Short, o.Sessions, RouterLANAddr4), RouterLANAddr4, n.Addr4, true, false})
			}
			if v6 {
				ss = append(ss, session{sessionName(n.Short, o.Sessions, RouterLANAddr6), RouterLANAddr6, n.Addr6, false, true})
			}
		}
		for _, s := range ss {
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

// BIRD is a bird daemon running in the foreground in a lab namespace, with
// its config file and control socket in the lab directory.
type BIRD struct {
	*Proc
	Host   *Host
	Config string // config file
	Socket string // control socket, for birdc -s

	lab    *Lab
	mode   SessionMode
	router bool // the router's BIRD, not a node's stand-in speaker
}

// SessionName returns the name of a BGP protocol of b. For the router's
// BIRD: its session with node i for the family of like ("n1_v4", "n1_v6";
// "n1" in SessionDualStack). For a node's stand-in speaker (i is ignored):
// its session with the router ("uplink_v4", "uplink_v6"; "uplink").
func (b *BIRD) SessionName(i int, like netip.Addr) string {
	if b.router {
		return sessionName(b.lab.Nodes[i].Short, b.mode, like)
	}
	return sessionName("uplink", b.mode, like)
}

// maxSocketPath is the longest path of a unix socket (sun_path less NUL).
const maxSocketPath = 107

// StartBIRD writes the router's BIRD config (RouterBIRDConfig) to
// <Dir>/<router ns>-bird.conf and starts `bird -f -c CONF -s SOCK` in the
// router's namespace, logging to <Dir>/<router ns>-bird.log. It returns
// once BIRD answers on its control socket. Destroy stops it (SIGTERM:
// BIRD ends every session with a NOTIFICATION and removes its kernel
// routes). Build the lab with Routing: RouteNone, so that the only VIP
// routes are BIRD's.
func (l *Lab) StartBIRD(ctx context.Context, opts BIRDOptions) (*BIRD, error) {
	log := l.birdLogPath(l.Router)
	cfg, err := l.RouterBIRDConfig(opts, log)
	if err != nil {
		return nil, err
	}
	b, err := l.startBIRD(ctx, l.Router, cfg, nil)
	if err != nil {
		return nil, err
	}
	b.mode, b.router = opts.Sessions, true
	l.mu.Lock()
	l.routerBIRD = b
	l.mu.Unlock()
	return b, nil
}

// StartNodeBIRD starts node i's stand-in BGP speaker: a BIRD with
// NodeBIRDConfig in the node's namespace (files <Dir>/<node ns>-bird.*,
// as StartBIRD). Stop, Kill and start again to exercise the router.
func (l *Lab) StartNodeBIRD(ctx context.Context, i int, opts NodeBIRDOptions) (*BIRD, error) {
	if i < 0 || i >= len(l.Nodes) {
		return nil, fmt.Errorf("bird: node index %d out of range", i)
	}
	n := l.Nodes[i]
	cfg, err := l.NodeBIRDConfig(i, opts, l.birdLogPath(n))
	if err != nil {
		return nil, err
	}
	var extra []string
	if opts.Recover {
		extra = append(extra, "-R")
	}
	b, err := l.startBIRD(ctx, n, cfg, extra)
	if err != nil {
		return nil, err
	}
	b.mode = opts.Sessions
	return b, nil
}

// birdLogPath is where BIRD in h logs: the file Lab.Start sends its output
// to, absolute (BIRD would resolve it against its working directory).
func (l *Lab) birdLogPath(h *Host) string {
	p := filepath.Join(l.Dir, h.Name+"-bird.log")
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

func (l *Lab) startBIRD(ctx context.Context, h *Host, cfg []byte, extra []string) (*BIRD, error) {
	l.mu.Lock()
	prev := l.birds[h]
	l.mu.Unlock()
	if prev != nil && !prev.Exited() {
		// It would take over the control socket (and fail on port 179).
		return nil, fmt.Errorf("bird: a BIRD already runs in %s (pid %d): stop it first", h.Name, prev.PID())
	}
	bin, err := exec.LookPath(BIRDBinary)
	if err != nil {
		return nil, fmt.Errorf("bird: %w (install BIRD 2: apt-get install bird2)", err)
	}
	if _, err := exec.LookPath(BIRDCBinary); err != nil {
		return nil, fmt.Errorf("bird: %w (install BIRD 2: apt-get install bird2)", err)
	}
	dir, err := filepath.Abs(l.Dir)
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, h.Name+"-bird.conf")
	sock := filepath.Join(dir, h.Name+"-bird.ctl")
	if len(sock) > maxSocketPath {
		return nil, fmt.Errorf("bird: control socket path %s is longer than %d bytes: use a shorter lab Dir", sock, maxSocketPath)
	}
	if err := os.WriteFile(conf, cfg, 0o600); err != nil { // may hold passwords
		return nil, fmt.Errorf("write bird config: %w", err)
	}
	// BIRD logs to the same file as Lab.Start's capture of its stderr
	// (both append): startup errors come before its log is open. Its
	// stdout and stderr stay quiet afterwards, so it survives the exit of
	// a process that started it and did not destroy the lab (xlb-lab up).
	args := append([]string{bin, "-f", "-c", conf, "-s", sock}, extra...)
	p, err := l.Start(context.WithoutCancel(ctx), h.NS, args...)
	if err != nil {
		return nil, err
	}
	b := &BIRD{Proc: p, Host: h, Config: conf, Socket: sock, lab: l}
	l.mu.Lock()
	if l.birds == nil {
		l.birds = map[*Host]*BIRD{}
	}
	l.birds[h] = b
	l.mu.Unlock()
	if err := b.waitUp(ctx, 10*time.Second); err != nil {
		p.Stop(5 * time.Second)
		return nil, err
	}
	return b, nil
}

// waitUp waits until BIRD answers `show status`.
func (b *BIRD) waitUp(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if b.Exited() {
			return fmt.Errorf("bird in %s exited (%v) at start; output:\n%s", b.Host.Name, b.Wait(), lastLines(b.Output(), 20))
		}
		out, err := b.Birdc(ctx, "show", "status")
		if err == nil && strings.Contains(out, "Daemon is up and running") {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("bird in %s not up within %v (%v); output:\n%s", b.Host.Name, timeout, last, lastLines(b.Output(), 20))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Stop sends SIGTERM and waits up to 5 s. BIRD ends its sessions with a
// NOTIFICATION (Cease), so its peers drop its routes at once, even with
// graceful restart.
func (b *BIRD) Stop() error {
	if err := b.Proc.Stop(5 * time.Second); err != nil {
		return fmt.Errorf("bird in %s: %w; output:\n%s", b.Host.Name, err, lastLines(b.Output(), 20))
	}
	return nil
}

// Kill sends SIGKILL and waits for the exit: the kernel closes BIRD's TCP
// sessions without any NOTIFICATION, as when a speaker crashes or is
// restarted. A graceful restart helper keeps its routes as stale.
func (b *BIRD) Kill() error {
	if b.Exited() {
		return nil
	}
	if err := b.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-b.Done()
	return nil
}

// Birdc runs `birdc -s SOCK args...` and returns its output. A failure's
// error includes the output.
func (b *BIRD) Birdc(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, BIRDCBinary, append([]string{"-s", b.Socket}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("birdc %s (%s): %w: %s", strings.Join(args, " "), b.Host.Name, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

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
	var (
		nhs   []NextHop
		table string
		net   netip.Prefix
		cur   *NextHop // the route being read, before its first via
		first int      // index in nhs of the current route's first next hop
	)
	flush := func() {
		if cur != nil {
			nhs = append(nhs, *cur) // a route without "via" (blackhole, ...)
			cur = nil
		}
	}
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.TrimSpace(line) == "" || strings.HasPrefix(line, "BIRD "):
		case strings.HasPrefix(line, "Table "):
			flush()
			table = strings.TrimSuffix(strings.TrimPrefix(line, "Table "), ":")
		case strings.HasPrefix(line, "\t"):
			l := strings.TrimSpace(line)
			if rest, ok := strings.CutPrefix(l, "via "); ok {
				var nh NextHop
				if cur != nil {
					nh, first = *cur, len(nhs)
					cur = nil
				} else if first < len(nhs) {
					nh = nhs[first] // another path of a multipath route
				} else {
					continue
				}
				f := strings.Fields(rest)
				if a, err := netip.ParseAddr(f[0]); err == nil {
					nh.Addr = a
				}
				if len(f) >= 3 && f[1] == "on" {
					nh.Iface = f[2]
				}
				nhs = append(nhs, nh)
				continue
			}
			k, v, ok := strings.Cut(l, ": ")
			if !ok {
				continue
			}
			set := func(f func(*NextHop)) {
				if cur != nil {
					f(cur)
				}
				for i := first; i < len(nhs); i++ {
					f(&nhs[i])
				}
			}
			switch k {
			case "BGP.origin":
				set(func(n *NextHop) { n.Origin = v })
			case "BGP.as_path":
				set(func(n *NextHop) { n.ASPath = v })
			case "BGP.next_hop":
				set(func(n *NextHop) { n.BGPNextHop = v })
			}
		default: // a route: "NET  unicast [proto time ...] * (pref) ..." or its continuation
			flush()
			f := strings.Fields(line)
			if !strings.HasPrefix(line, " ") && len(f) > 0 {
				if p, err := netip.ParsePrefix(f[0]); err == nil {
					net = p
				}
			}
			nh := NextHop{Net: net, Table: table}
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
			cur, first = &nh, len(nhs)
		}
	}
	flush()
	return nhs
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
