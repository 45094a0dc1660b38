package lab

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"text/tabwriter"
	"time"
)

// MethodsDemoOptions shape RunMethodsDemo. Zero values give the standard
// demo.
type MethodsDemoOptions struct {
	Requests int   // HTTP requests per method (default 300)
	Weights  []int // backend weights (default 1, 1, 2)
	BinDir   string
	Prefix   string
	Keep     bool
}

// methodPorts are the demo's services: one per forwarding method, on the
// IPv4 VIP, each on its own port (and its backends' servers on it).
var methodPorts = []struct {
	method string
	ports  Ports
}{
	{"gre", Ports{HTTP: 8001, UDP: 9001, TCP: 7001}},
	{"ipip", Ports{HTTP: 8002, UDP: 9002, TCP: 7002}},
	{"gue", Ports{HTTP: 8003, UDP: 9003, TCP: 7003}},
	{"dr", Ports{HTTP: 8004, UDP: 9004, TCP: 7004}},
	{"nat", Ports{HTTP: 8005, UDP: 9005, TCP: 7005}},
}

// RunMethodsDemo builds the single-node lab on a plain 1500-MTU segment
// with one IPv4 service per forwarding method (the backends route the
// client through the node, for NAT), sends HTTP requests to each and
// writes, per method, the requests, the backends' shares and where the
// replies went: the node's received packets against the client's sent
// ones (about one: replies went direct; about two: through the node).
func RunMethodsDemo(ctx context.Context, w io.Writer, opts MethodsDemoOptions) (err error) {
	if opts.Requests == 0 {
		opts.Requests = 300
	}
	if opts.Weights == nil {
		opts.Weights = []int{1, 1, 2}
	}
	fmt.Fprintf(w, "building the lab (1500-byte MTU): client -> router -> LAN -> 1 xlb node, %d backends ...\n", len(opts.Weights))
	l, err := New(ctx, Config{Prefix: opts.Prefix, Backends: len(opts.Weights), BinDir: opts.BinDir, LANMTU: PlainMTU})
	if err != nil {
		return err
	}
	defer func() { err = l.endDemo(w, opts.Keep, err) }()
	if err := l.methodsSetup(ctx); err != nil {
		return err
	}
	cfg, err := methodsConfig(l, opts.Weights)
	if err != nil {
		return err
	}
	d, err := l.StartXLBD(ctx, 0, cfg)
	if err != nil {
		return err
	}
	var failures []string
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\nmethod\tVIP:port\trequests\tfailed\tshares (weights %v)\tclient sent\tnode received\treplies\t\n", opts.Weights)
	for _, m := range methodPorts {
		target := netip.AddrPortFrom(l.VIP4(), m.ports.HTTP)
		if err := l.WaitForwarding(ctx, target, 30*time.Second, d); err != nil {
			return fmt.Errorf("%s: %w", m.method, err)
		}
		line, fail, err := l.methodRun(ctx, m.method, target, opts)
		if err != nil {
			return err
		}
		fmt.Fprint(tw, line)
		failures = append(failures, fail...)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(failures) > 0 {
		return fmt.Errorf("demo failed:\n  %s", strings.Join(failures, "\n  "))
	}
	fmt.Fprintf(w, "\ndemo OK: every method served every backend; NAT's replies came back through the node, the others' went straight to the client\n")
	return nil
}

// methodsSetup starts the servers of every method's port, xlb-decap
// (GRE, IPIP and GUE) and the backends' NAT return path: packets from
// their own LAN address (NAT's replies) route the client via the node
// (table 100), while the other methods' replies, from the VIP on lo, go
// to the router as before.
func (l *Lab) methodsSetup(ctx context.Context) error {
	for _, m := range methodPorts {
		if _, err := l.StartServers(m.ports); err != nil {
			return err
		}
	}
	if err := l.AttachDecap(ctx); err != nil {
		return err
	}
	n := l.Nodes[0]
	for _, b := range l.Backends {
		for _, cmd := range [][]string{
			{"ip", "route", "replace", l.Client.Addr4.String() + "/32", "via", n.Addr4.String(), "table", "100"},
			{"ip", "rule", "add", "from", b.Addr4.String(), "table", "100"},
		} {
			if out, err := b.Run(ctx, cmd...); err != nil {
				return fmt.Errorf("%s: %s: %v: %s", b.Short, strings.Join(cmd, " "), err, out)
			}
		}
	}
	return nil
}

// methodsConfig writes xlbd's config, one IPv4 service per method, and
// returns its path.
func methodsConfig(l *Lab, weights []int) (string, error) {
	var svcs []Service
	for _, m := range methodPorts {
		svcs = append(svcs, Service{Name: m.method, VIP: l.VIP4(), Port: m.ports.HTTP, Protocol: "tcp", Pools: []string{Pool4}, Encap: m.method})
	}
	return l.WriteXLBDConfig(0, XLBDOptions{Weights: weights, Services: svcs})
}

// methodRun sends opts.Requests to target and returns its table line and
// what failed.
func (l *Lab) methodRun(ctx context.Context, method string, target netip.AddrPort, opts MethodsDemoOptions) (string, []string, error) {
	c0, err := l.Client.IfaceStats("eth0")
	if err != nil {
		return "", nil, err
	}
	n0, err := l.NodeStats(0)
	if err != nil {
		return "", nil, err
	}
	res := HTTPLoad(ctx, l.Client.NS, target, opts.Requests, 16)
	c1, err := l.Client.IfaceStats("eth0")
	if err != nil {
		return "", nil, err
	}
	n1, err := l.NodeStats(0)
	if err != nil {
		return "", nil, err
	}
	sent, recv := c1.TxPackets-c0.TxPackets, n1.RxPackets-n0.RxPackets
	via := "direct"
	if float64(recv) > 1.5*float64(sent) {
		via = "through the node"
	}
	var shares []string
	var fail []string
	for j, h := range l.Backends {
		shares = append(shares, fmt.Sprintf("%s %.0f%%", h.Short, 100*float64(res.Counts[h.Short])/float64(max(1, res.OK()))))
		if opts.Weights[j] > 0 && res.Counts[h.Short] == 0 {
			fail = append(fail, fmt.Sprintf("%s: backend %s got none", method, h.Short))
		}
	}
	if res.Errors > 0 {
		fail = append(fail, fmt.Sprintf("%s: %d of %d requests failed", method, res.Errors, res.Requests))
	}
	if want := "direct"; method == "nat" {
		if via != "through the node" {
			fail = append(fail, "nat: replies did not come back through the node")
		}
	} else if via != want {
		fail = append(fail, fmt.Sprintf("%s: replies passed the node", method))
	}
	line := fmt.Sprintf("%s\t%v\t%d\t%d\t%s\t%d\t%d\t%s\t\n", method, target, res.Requests, res.Errors,
		strings.Join(shares, ", "), sent, recv, via)
	return line, fail, nil
}
