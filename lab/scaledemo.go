package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/xlbproject/xlb/internal/maglev"
)

// ScaleDemoOptions shape RunScaleDemo.
type ScaleDemoOptions struct {
	Connections int // long-lived TCP connections (default 200)
	BinDir      string
	Prefix      string
	// Sync runs the nodes with connection sync (node.sync), and adds the
	// simultaneous change (RunSimultaneous) with and without it.
	Sync bool
}

// RunScaleDemo is the multi-node demo (docs/DESIGN.md, Lab; Scale-out by
// ECMP): three xlb
// nodes announce the VIPs over BGP to BIRD on the router, which spreads
// flows over them by ECMP; four backends are health-checked. With long-lived
// connections running it drains a node, kills a backend, kills a node
// (link down, daemon killed), then restores everything, printing after each
// step the router's next hops and what happened to the connections.
func RunScaleDemo(ctx context.Context, w io.Writer, opts ScaleDemoOptions) (err error) {
	if opts.Connections == 0 {
		opts.Connections = 200
	}
	fmt.Fprintln(w, "building the lab: client -> router (BIRD, ECMP) -> LAN -> 3 xlb nodes, 4 backends ...")
	l, err := New(ctx, Config{Prefix: opts.Prefix, Nodes: 3, Backends: 4, Routing: RouteNone, BinDir: opts.BinDir})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintf(w, "\ntearing down lab %s ...\n", l.Prefix)
		if derr := l.Destroy(); derr != nil {
			err = errors.Join(err, fmt.Errorf("teardown: %w", derr))
		}
	}()
	PrintTopology(w, l)
	d := &scaleDemo{w: w, l: l, opts: opts, vip: netip.PrefixFrom(l.VIP4(), 32)}
	if err := d.start(ctx); err != nil {
		return err
	}

	old := TCPTimeout
	TCPTimeout = 10 * time.Second // rerouting after a node failure takes the hold time
	defer func() { TCPTimeout = old }()
	sess, err := StartTCPSessions(ctx, l.Client.NS, netip.AddrPortFrom(l.VIP4(), DefaultPorts.TCP), opts.Connections, 100*time.Millisecond)
	if err != nil {
		return err
	}
	defer sess.Stop()
	d.sess = sess
	fmt.Fprintf(w, "%d long-lived TCP connections, one message each 100 ms; first backends: %v\n", opts.Connections, sortedCounts(sess.res.Sessions))
	if err := d.breakAndRestore(ctx); err != nil {
		return err
	}
	if err := d.account(sess.Stop()); err != nil {
		return err
	}
	fmt.Fprintln(w, "scale demo OK: every broken connection is accounted for")
	if opts.Sync {
		return simultaneousSteps(ctx, w, opts)
	}
	return nil
}

// scaleDemo is a running scale demo: its lab, what runs in it and the
// connections it watches.
type scaleDemo struct {
	w       io.Writer
	l       *Lab
	opts    ScaleDemoOptions
	vip     netip.Prefix // the IPv4 VIP, whose route the router learns
	servers []*Servers
	daemons []*Daemon
	configs []string // each node's xlbd config
	sess    *TCPSessions
	seen    int // the connection breaks reported so far
}

// start brings up the backends' servers and decapsulation, BIRD on the
// router and xlbd on every node, and waits until the router routes the
// VIP over all three nodes.
func (d *scaleDemo) start(ctx context.Context) error {
	l := d.l
	var err error
	if d.servers, err = l.StartServers(Ports{}); err != nil {
		return err
	}
	if err := l.AttachDecap(ctx); err != nil {
		return err
	}
	if _, err := l.StartBIRD(ctx, BIRDOptions{}); err != nil {
		return err
	}
	if d.daemons, d.configs, err = startSyncNodes(ctx, l, d.opts.Sync); err != nil { // syncdemo.go
		return err
	}
	if err := d.waitEveryNode(ctx); err != nil {
		return err
	}
	fmt.Fprintf(d.w, "\nBIRD learned %s from every node; the router's kernel route: %v\n", d.vip, route(l, d.vip))
	return nil
}

// waitEveryNode waits until the router's route for the VIP goes over the
// three nodes.
func (d *scaleDemo) waitEveryNode(ctx context.Context) error {
	_, err := d.l.WaitRoute(ctx, d.vip, d.l.NodeNextHops(d.vip.Addr(), 0, 1, 2), 30*time.Second)
	return err
}

// step lets a step settle, then prints it: its title, what is expected,
// the router's next hops and the connections broken since the last step
// (the first three of them).
func (d *scaleDemo) step(title, what string) {
	time.Sleep(3 * time.Second)
	br := d.sess.Breaks()
	fmt.Fprintf(d.w, "\n== %s\n   %s\n   router next hops for %s: %v\n   connections broken in this step: %d\n", title, what, d.vip, route(d.l, d.vip), len(br)-d.seen)
	for _, b := range br[d.seen:min(len(br), d.seen+3)] {
		fmt.Fprintf(d.w, "     %s\n", b)
	}
	d.seen = len(br)
}

// breakAndRestore drains node n1, kills backend b2, kills node n3, then
// restores the nodes and the backend, one step at a time.
func (d *scaleDemo) breakAndRestore(ctx context.Context) error {
	l := d.l
	xlbctl, err := l.Binary("xlbctl")
	if err != nil {
		return err
	}
	if out, err := l.Nodes[0].Run(ctx, xlbctl, "--socket", l.APISocket(0), "node", "drain"); err != nil {
		return fmt.Errorf("xlbctl node drain: %w: %s", err, out)
	}
	d.step("drain node n1 (xlbctl node drain)", "n1 announces with GRACEFUL_SHUTDOWN, then withdraws: its flows move to n2/n3, which pick the same backends (Maglev)")

	d.servers[1].Close()
	d.step("kill backend b2 (its servers stop)", "the health check fails: b2 leaves every table; its own connections are lost (that is the backend dying), the others continue")

	if err := l.SetLinkUp(l.Nodes[2], false); err != nil {
		return err
	}
	d.daemons[2].Kill()
	d.step("kill node n3 (link down, xlbd killed)", "after the hold time BIRD drops n3; the router rehashes its flows to the remaining node(s): they keep their backends, "+
		"except a flow n2 never saw whose Maglev slot moved when b2 left")

	if out, err := l.Nodes[0].Run(ctx, xlbctl, "--socket", l.APISocket(0), "node", "undrain"); err != nil {
		return fmt.Errorf("xlbctl node undrain: %w: %s", err, out)
	}
	if err := l.SetLinkUp(l.Nodes[2], true); err != nil {
		return err
	}
	if d.daemons[2], err = l.StartXLBD(ctx, 2, d.configs[2]); err != nil {
		return err
	}
	if err := d.waitEveryNode(ctx); err != nil {
		return err
	}
	d.step("restore the nodes: undrain n1, n3 back", "3-way ECMP again: flows that move to n1 or n3 are new to them, and they pick the backends the other nodes picked (same table), and track them")

	if s, err := StartServers(l.Backends[1], l.VIPs, Ports{}); err == nil {
		l.mu.Lock()
		l.servers = append(l.servers, s)
		l.mu.Unlock()
	}
	restoreNote := "(Nodes first: a node that meets a flow for the first time while b2 comes back picks by the new table, so restoring " +
		"both at once can break flows placed while b2 was away; connection sync, node.sync, keeps them: see the last step.)"
	if d.opts.Sync {
		restoreNote = "(With connection sync every node holds the others' decisions, so the order does not matter: see the last step.)"
	}
	d.step("restore backend b2", "b2 passes its check and takes new flows; the tracked flows keep their backends on every node. "+restoreNote)
	return nil
}

// brokenConns are the connections broken during the demo, by cause.
type brokenConns struct {
	onB2   int     // to the backend that was killed
	follow int     // reconnects after a break, answered elsewhere or refused
	slot   []Break // placed by the table with b2 in a slot that moved when b2 left
	other  []Break // none of these: a fault
}

// classify sorts the breaks of res by cause.
func (d *scaleDemo) classify(res TCPResult) (brokenConns, error) {
	var bc brokenConns
	moved, err := slotMoved(d.l, 1)
	if err != nil {
		return bc, err
	}
	for _, b := range res.Breaks {
		switch {
		case b.Kind == BreakBackend || b.Kind == BreakDial:
			bc.follow++ // a reconnect after a break, answered elsewhere or refused
		case b.Backend == "b2":
			bc.onB2++ // a connection to the backend that was killed
		case b.Local.IsValid() && moved(b.Local, b.Backend):
			// Placed by the table with b2: before b2 left, or in the
			// moment before a node's health check noticed.
			bc.slot = append(bc.slot, b)
		default:
			bc.other = append(bc.other, b)
		}
	}
	return bc, nil
}

// account prints the connections broken in all, by cause, and fails when
// one broke for no reason the design accounts for, or (with sync) on a
// surviving backend.
func (d *scaleDemo) account(res TCPResult) error {
	w := d.w
	bc, err := d.classify(res)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nIn all: %d connections, %d messages answered. Connections broken:\n", len(res.Sessions), res.Messages())
	fmt.Fprintf(w, "   on the killed backend b2:   %d\n", bc.onB2)
	fmt.Fprintf(w, "   on a surviving backend:     %d, each a flow the table with b2 placed (before b2 left, or before a node's check\n", len(bc.slot))
	fmt.Fprintf(w, "                               noticed) in a slot that went to another backend when b2 left, and that then moved to a\n")
	if d.opts.Sync {
		fmt.Fprintf(w, "                               node that had not seen it (with connection sync on, that node had its peers' decision)\n")
	} else {
		fmt.Fprintf(w, "                               node that had not seen it (that node picks by the new table; connection sync,\n")
		fmt.Fprintf(w, "                               node.sync, keeps it)\n")
	}
	for _, b := range bc.slot {
		fmt.Fprintf(w, "     %s\n", b)
	}
	fmt.Fprintf(w, "   other:                      %d\n", len(bc.other))
	fmt.Fprintf(w, "   (and %d reconnects answered by another backend or refused)\n", bc.follow)
	if len(bc.other) > 0 {
		for _, b := range bc.other {
			fmt.Fprintf(w, "     %s\n", b)
		}
		for i, dm := range d.daemons {
			for _, line := range strings.Split(dm.Output(), "\n") {
				if strings.Contains(line, "health changed") {
					fmt.Fprintf(w, "   %s: %s\n", d.l.Nodes[i].Short, line)
				}
			}
		}
		return fmt.Errorf("%d connections to live backends broke for no reason the design accounts for", len(bc.other))
	}
	if d.opts.Sync && len(bc.slot) > 0 {
		return fmt.Errorf("%d connections to surviving backends broke with connection sync on", len(bc.slot))
	}
	return nil
}

// simultaneousSteps runs RunSimultaneous on fresh labs with and without
// connection sync and prints the two side by side; with sync no
// connection to a surviving backend may break.
func simultaneousSteps(ctx context.Context, w io.Writer, opts ScaleDemoOptions) error {
	fmt.Fprintf(w, "\n== kill backend b2 and node n1 at the same moment, bring both back at the same moment, then n1 joins afresh as a weight changes (new labs, with and without sync)\n")
	var got [2]SimultaneousResult
	for i, sync := range []bool{true, false} {
		r, err := RunSimultaneous(ctx, w, SimultaneousOptions{Sync: sync, Connections: opts.Connections, BinDir: opts.BinDir})
		if err != nil {
			return err
		}
		got[i] = r
	}
	fmt.Fprintf(w, "   connections to surviving backends broken (of %d):   with sync   without sync\n", got[0].Sessions)
	fmt.Fprintf(w, "     b2 and n1 killed together:                     %6d      %6d\n", got[0].Kill, got[1].Kill)
	fmt.Fprintf(w, "     b2 and n1 back together:                       %6d      %6d\n", got[0].Restore, got[1].Restore)
	fmt.Fprintf(w, "     n1 joins afresh as b1's weight changes:        %6d      %6d\n", got[0].Join, got[1].Join)
	fmt.Fprintf(w, "   UDP flows on surviving backends answered by another backend (by node: %s with sync, %s without):\n",
		got[0].UDPNodes, got[1].UDPNodes)
	for k, name := range simStepNames {
		a, b := got[0].UDPStep(name), got[1].UDPStep(name)
		fmt.Fprintf(w, "     %-46s %3d of %3d  %3d of %3d\n", simStepTitles[k]+":", a.Moved, a.Flows, b.Moved, b.Flows)
	}
	a, b := got[0].UDPStep("restore"), got[1].UDPStep("restore")
	fmt.Fprintf(w, "   UDP flows b2 answered before it died (counted apart, as its connections are), answered by\n")
	fmt.Fprintf(w, "   another backend again when b2 came back:          %3d of %3d  %3d of %3d\n", a.GoneMoved, a.GoneFlows, b.GoneMoved, b.GoneFlows)
	for _, b := range got[0].Examples {
		fmt.Fprintf(w, "     with sync: %s\n", b)
	}
	if n := got[0].Kill + got[0].Restore + got[0].Join; n > 0 {
		return fmt.Errorf("%d connections to surviving backends broke with connection sync on", n)
	}
	if n := got[0].UDPMoved(); n > 0 {
		return fmt.Errorf("%d UDP flows on surviving backends moved with connection sync on", n)
	}
	if n := got[0].UDPStep("restore").GoneMoved + got[0].UDPStep("join").GoneMoved; n > 0 {
		return fmt.Errorf("%d times a UDP flow b2 had answered switched backend again after it moved, with connection sync on", n)
	}
	fmt.Fprintln(w, "simultaneous change OK: with sync no connection to a surviving backend broke and no UDP flow on one moved")
	return nil
}

// simStepTitles: simStepNames as simultaneousSteps prints them.
var simStepTitles = []string{"b2 and n1 killed together", "b2 and n1 back together", "n1 joins afresh as b1's weight changes"}

// slotMoved returns whether the flow from client address c to the IPv4 TCP
// echo service had its Maglev slot on backend name (not the one gone) with
// every backend and on another one without backend gone: the tables every node computes for
// the lab's pool (equal weights, default table size), with and without it.
func slotMoved(l *Lab, gone int) (func(c netip.AddrPort, name string) bool, error) {
	const m = 65537 // config.DefaultTableSize: the lab's services set none
	var all, rest []maglev.Backend
	short := map[string]string{}
	for j, h := range l.Backends {
		b := maglev.Backend{Name: h.Addr4.String(), Weight: 1}
		short[b.Name] = h.Short
		all = append(all, b)
		if j != gone {
			rest = append(rest, b)
		}
	}
	before, err := maglev.Build(all, m)
	if err != nil {
		return nil, err
	}
	after, err := maglev.Build(rest, m)
	if err != nil {
		return nil, err
	}
	goneName := l.Backends[gone].Short
	return func(c netip.AddrPort, name string) bool {
		if name == goneName {
			return false // its flows broke with it, not by a slot move
		}
		h := maglev.FlowHash(maglev.Tuple{Src: c.Addr(), Dst: l.VIP4(), SrcPort: c.Port(), DstPort: DefaultPorts.TCP, Proto: 6})
		return short[before.Backends[before.Lookup(h)].Name] == name && short[after.Backends[after.Lookup(h)].Name] != name
	}, nil
}

func route(l *Lab, p netip.Prefix) []netip.Addr {
	r, err := l.KernelRoute(p)
	if err != nil {
		return nil
	}
	return r
}

func sortedCounts(ss []TCPSession) string {
	m := map[string]int{}
	for _, s := range ss {
		m[s.Backend]++
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}
