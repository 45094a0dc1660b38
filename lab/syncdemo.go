package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"
)

// webCheck adds the http health check "web" (500 ms, fall 1) to both pools
// of a generated config, so a backend whose servers stop leaves the tables
// within a second.
func webCheck(cfg string) string {
	check := "health_checks:\n  web: {type: http, port: 80, path: /, expect_status: 200, interval: 500ms, timeout: 300ms, rise: 1, fall: 1}\npools:\n"
	cfg = strings.Replace(cfg, "pools:\n", check, 1)
	for _, p := range []string{Pool4, Pool6} {
		cfg = strings.Replace(cfg, "  "+p+":\n", "  "+p+":\n    health_check: web\n", 1)
	}
	return cfg
}

// SimultaneousOptions shape RunSimultaneous.
type SimultaneousOptions struct {
	Sync        bool // node.sync on every node
	Connections int  // long-lived TCP connections (default 200)
	UDPFlows    int  // long-lived UDP flows (default 200)
	BinDir      string
	Prefix      string
}

// SimultaneousResult counts the connections to surviving backends that
// broke in each step (the killed backend's own are apart).
type SimultaneousResult struct {
	Sessions      int
	Kill, Restore int // broken on surviving backends: kill b2 + n1, restore both
	Join          int // broken when a fresh node joins and the weights change together
	OnB2          int // broken on b2 (the backend died)
	Examples      []Break
	// UDP: the UDP flows step by step (kill, restore, join): in each, the
	// flows on a surviving backend as it began, and those of them answered
	// by another backend during it. UDPNodes: how the router spread the
	// flows over the nodes ("n1=67 n2=70 n3=63").
	UDP      []UDPStep
	UDPNodes string
}

// UDPMoved sums the UDP flows moved over the steps.
func (res SimultaneousResult) UDPMoved() (n int) {
	for _, s := range res.UDP {
		n += s.Moved
	}
	return n
}

// UDPStep returns the UDP step named name (zero if none ran).
func (res SimultaneousResult) UDPStep(name string) UDPStep {
	for _, s := range res.UDP {
		if s.Name == name {
			return s
		}
	}
	return UDPStep{}
}

// RunSimultaneous is the change Maglev alone cannot survive: on the
// 3-node BIRD/ECMP lab, with long-lived connections and UDP flows
// running, backend b2 and node n1 are killed at the same moment (the
// routers move n1's flows to nodes that never saw them, whose tables no
// longer have b2), then both come back at the same moment (n1 restarts:
// with sync it asks its peers for their tables before it announces), then
// n1 joins afresh (its pins removed) while b1's weight changes. With sync
// no connection to a surviving backend breaks.
func RunSimultaneous(ctx context.Context, w io.Writer, o SimultaneousOptions) (res SimultaneousResult, err error) {
	if o.Connections == 0 {
		o.Connections = 200
	}
	if o.UDPFlows == 0 {
		o.UDPFlows = 200
	}
	l, err := New(ctx, Config{Prefix: o.Prefix, Nodes: 3, Backends: 4, Routing: RouteNone, BinDir: o.BinDir})
	if err != nil {
		return res, err
	}
	defer func() {
		if derr := l.Destroy(); derr != nil {
			err = errors.Join(err, fmt.Errorf("teardown: %w", derr))
		}
	}()
	s := &simLab{l: l, sync: o.Sync, conns: o.Connections, udp: o.UDPFlows, vip: netip.PrefixFrom(l.VIP4(), 32)}
	if err := s.start(ctx); err != nil {
		return res, err
	}
	old := TCPTimeout
	TCPTimeout = 10 * time.Second // rerouting after a node failure takes the hold time
	defer func() { TCPTimeout = old }()
	sess, err := StartTCPSessions(ctx, l.Client.NS, netip.AddrPortFrom(l.VIP4(), DefaultPorts.TCP), o.Connections, 100*time.Millisecond)
	if err != nil {
		return res, err
	}
	defer sess.Stop()
	udpTarget := netip.AddrPortFrom(l.VIP4(), DefaultPorts.UDP)
	udp, err := StartUDPStepFlows(ctx, l.Client.NS, udpTarget, o.UDPFlows, 100*time.Millisecond)
	if err != nil {
		return res, err
	}
	defer udp.Stop()
	if res.UDPNodes, err = l.routerSpread(ctx, udp.Locals(), udpTarget, "udp"); err != nil {
		return res, err
	}
	fmt.Fprintf(w, "sync %v: %d UDP flows, by node (the router's hash): %s; by backend: %s\n", o.Sync, o.UDPFlows, res.UDPNodes, udp.Backends())
	time.Sleep(time.Second)
	var marks [2]int // breaks recorded when the kill and the restore steps ended
	for k, step := range []func(context.Context, io.Writer) error{s.kill, s.restore, s.join} {
		udp.Mark(simStepNames[k])
		if err := step(ctx, w); err != nil {
			return res, err
		}
		time.Sleep(4 * time.Second)
		if k < 2 {
			marks[k] = len(sess.Breaks())
		}
	}
	r := sess.Stop()
	res.UDP = udp.Stop()
	res.tally(r, marks)
	res.print(w, o.Sync)
	return res, nil
}

// The steps of RunSimultaneous, as UDPStep names.
var simStepNames = []string{"kill", "restore", "join"}

// print writes the counts of one run.
func (res SimultaneousResult) print(w io.Writer, sync bool) {
	fmt.Fprintf(w, "sync %v: broken on surviving backends: %d when b2 and n1 died, %d when they came back, %d when n1 joined afresh with a weight change; on b2 itself: %d\n",
		sync, res.Kill, res.Restore, res.Join, res.OnB2)
	for _, st := range res.UDP {
		fmt.Fprintf(w, "sync %v: UDP step %s: %d of %d flows on surviving backends answered by another backend (%d not answered in the step) %v; "+
			"of the %d flows b2 had answered, %d answered by another backend\n",
			sync, st.Name, st.Moved, st.Flows, st.Silent, st.Examples, st.GoneFlows, st.GoneMoved)
	}
}

// tally sorts the breaks of r into the steps (marks: breaks recorded at
// the end of the kill and restore steps).
func (res *SimultaneousResult) tally(r TCPResult, marks [2]int) {
	res.Sessions = len(r.Sessions)
	for i, b := range r.Breaks {
		switch {
		case b.Kind == BreakBackend || b.Kind == BreakDial:
			// a reconnect after a break, answered elsewhere or refused
		case b.Backend == "b2":
			res.OnB2++
		case i < marks[0]:
			res.Kill++
			res.Examples = append(res.Examples, b)
		case i < marks[1]:
			res.Restore++
			res.Examples = append(res.Examples, b)
		default:
			res.Join++
			res.Examples = append(res.Examples, b)
		}
	}
}

// simLab is RunSimultaneous's lab and daemons.
type simLab struct {
	l       *Lab
	sync    bool
	conns   int
	udp     int
	vip     netip.Prefix
	servers []*Servers
	daemons []*Daemon
	configs []string
}

// start starts the backends' servers and decapsulators, BIRD and the
// three xlbd, and waits for the 3-way ECMP route.
func (s *simLab) start(ctx context.Context) error {
	var err error
	if s.servers, err = s.l.StartServers(Ports{}); err != nil {
		return err
	}
	if err := s.l.AttachDecap(ctx); err != nil {
		return err
	}
	if _, err := s.l.StartBIRD(ctx, BIRDOptions{}); err != nil {
		return err
	}
	if s.daemons, s.configs, err = startSyncNodes(ctx, s.l, s.sync); err != nil {
		return err
	}
	return s.route(ctx, 0, 1, 2)
}

// route waits until the router's route for the VIP goes via nodes.
func (s *simLab) route(ctx context.Context, nodes ...int) error {
	_, err := s.l.WaitRoute(ctx, s.vip, s.l.NodeNextHops(s.vip.Addr(), nodes...), 30*time.Second)
	return err
}

// n1Down takes n1 away as a failure does: link down, xlbd killed.
func (s *simLab) n1Down() error {
	if err := s.l.SetLinkUp(s.l.Nodes[0], false); err != nil {
		return err
	}
	s.daemons[0].Kill()
	return nil
}

// n1Up brings n1's link up and starts its xlbd.
func (s *simLab) n1Up(ctx context.Context) error {
	if err := s.l.SetLinkUp(s.l.Nodes[0], true); err != nil {
		return err
	}
	var err error
	s.daemons[0], err = s.l.StartXLBD(ctx, 0, s.configs[0])
	return err
}

// kill: backend b2's servers and node n1 go at the same moment.
func (s *simLab) kill(ctx context.Context, w io.Writer) error {
	fmt.Fprintf(w, "sync %v: %d connections and %d UDP flows through 3 nodes; killing backend b2 and node n1 at the same moment\n", s.sync, s.conns, s.udp)
	s.servers[1].Close()
	if err := s.n1Down(); err != nil {
		return err
	}
	return s.route(ctx, 1, 2)
}

// restore: b2's servers and n1 come back at the same moment.
func (s *simLab) restore(ctx context.Context, w io.Writer) error {
	fmt.Fprintf(w, "sync %v: bringing b2 and n1 back at the same moment\n", s.sync)
	if sv, err := StartServers(s.l.Backends[1], s.l.VIPs, Ports{}); err == nil {
		s.l.mu.Lock()
		s.l.servers = append(s.l.servers, sv)
		s.l.mu.Unlock()
	}
	if err := s.n1Up(ctx); err != nil {
		return err
	}
	return s.route(ctx, 0, 1, 2)
}

// join: n1 leaves, its pinned state is removed (a fresh node), then it
// joins while b1's weight goes to 3 on every node, at the same moment.
func (s *simLab) join(ctx context.Context, w io.Writer) error {
	if err := s.n1Down(); err != nil {
		return err
	}
	if err := s.route(ctx, 1, 2); err != nil {
		return err
	}
	if err := s.daemons[0].Cleanup(ctx); err != nil {
		return fmt.Errorf("xlbd --cleanup on n1: %w", err)
	}
	time.Sleep(2 * time.Second)
	fmt.Fprintf(w, "sync %v: node n1 joins afresh and b1's weight goes to 3 at the same moment\n", s.sync)
	if err := writeSyncConfigs(s.l, s.configs, s.sync, []int{3, 1, 1, 1}); err != nil {
		return err
	}
	for _, d := range s.daemons[1:] {
		if err := d.Reload(); err != nil {
			return err
		}
	}
	if err := s.n1Up(ctx); err != nil {
		return err
	}
	return s.route(ctx, 0, 1, 2)
}

// startSyncNodes starts xlbd on the three nodes with BGP, the web health
// check and, with sync, node.sync.
func startSyncNodes(ctx context.Context, l *Lab, sync bool) ([]*Daemon, []string, error) {
	configs := make([]string, len(l.Nodes))
	for i := range l.Nodes {
		configs[i] = fmt.Sprintf("%s/xlbd-%s.yaml", l.Dir, l.Nodes[i].Short)
	}
	if err := writeSyncConfigs(l, configs, sync, nil); err != nil {
		return nil, nil, err
	}
	daemons := make([]*Daemon, len(l.Nodes))
	for i := range l.Nodes {
		var err error
		if daemons[i], err = l.StartXLBD(ctx, i, configs[i]); err != nil {
			return nil, nil, err
		}
	}
	return daemons, configs, nil
}

// writeSyncConfigs writes the nodes' configs (startSyncNodes) with the
// backends' weights.
func writeSyncConfigs(l *Lab, paths []string, sync bool, weights []int) error {
	for i := range l.Nodes {
		cfg := webCheck(string(l.XLBDConfig(i, XLBDOptions{BGP: true, ShutdownWait: time.Second, Sync: sync, Weights: weights})))
		if err := os.WriteFile(paths[i], []byte(cfg), 0o644); err != nil {
			return err
		}
	}
	return nil
}
