package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"text/tabwriter"
	"time"
)

// DemoOptions shape RunDemo. Zero values give the standard demo.
type DemoOptions struct {
	Requests4 int   // HTTP requests to the IPv4 VIP (default 1000)
	Requests6 int   // HTTP requests to the IPv6 VIP (default 300)
	Weights   []int // backend weights (default 1, 1, 2)
	BinDir    string
	Prefix    string
	// Keep leaves the lab up at the end (for poking at it); `xlb-lab down`
	// removes it.
	Keep bool
}

// RunDemo builds the single-node lab (1 client, 1 xlb node, one backend per
// weight), starts the backend servers, attaches xlb-decap on the backends,
// starts xlbd on the node, makes HTTP requests to both VIPs on new TCP
// connections and writes a report to w: requests and shares per backend
// against the weights, the node's and the others' packet counters, and what
// they show. It tears the lab down at the end, on failure and when ctx is
// cancelled (Ctrl-C). The error says what failed; the report is written as
// far as it got.
func RunDemo(ctx context.Context, w io.Writer, opts DemoOptions) (err error) {
	if opts.Requests4 == 0 {
		opts.Requests4 = 1000
	}
	if opts.Requests6 == 0 {
		opts.Requests6 = 300
	}
	if opts.Weights == nil {
		opts.Weights = []int{1, 1, 2}
	}
	fmt.Fprintf(w, "building the lab: client -> router -> LAN switch -> 1 xlb node, %d backends ...\n", len(opts.Weights))
	l, err := New(ctx, Config{Prefix: opts.Prefix, Backends: len(opts.Weights), BinDir: opts.BinDir})
	if err != nil {
		return err
	}
	defer func() { err = l.endDemo(w, opts.Keep, err) }()
	PrintTopology(w, l)
	targets, err := l.startDemo(ctx, w, opts.Weights)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "xlbd forwards; sending traffic ...\n")

	before, err := snapshot(l)
	if err != nil {
		return err
	}
	base := serverCounts(l)
	var results []HTTPResult
	for _, t := range targets {
		n := opts.Requests4
		if t.Addr().Is6() {
			n = opts.Requests6
		}
		res := HTTPLoad(ctx, l.Client.NS, t, n, 16)
		results = append(results, res)
		if err := ctx.Err(); err != nil {
			return err
		}
		fmt.Fprintf(w, "\n%d HTTP requests to %v (a new TCP connection each), %v:\n", n, t, res.Elapsed.Round(time.Millisecond))
		printShares(w, l, res, opts.Weights, t.Addr())
	}
	after, err := snapshot(l)
	if err != nil {
		return err
	}
	printCounters(w, l, before, after)
	served := serverCounts(l)
	for k := range served {
		served[k] -= base[k]
	}

	failures := demoFailures(l, targets, results, opts.Weights)
	fmt.Fprintln(w)
	explain(w, l, before, after)
	if len(failures) > 0 {
		return fmt.Errorf("demo failed:\n  %s", strings.Join(failures, "\n  "))
	}
	fmt.Fprintf(w, "\ndemo OK\n")
	return nil
}

// startDemo starts the backends' servers and decapsulation and xlbd on
// node 1 with the backends' weights, and waits until it forwards to the
// HTTP port of each VIP. It returns those VIP:port targets.
func (l *Lab) startDemo(ctx context.Context, w io.Writer, weights []int) ([]netip.AddrPort, error) {
	if _, err := l.StartServers(Ports{}); err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "\nattaching xlb-decap to eth0 of every backend ...\n")
	if err := l.AttachDecap(ctx); err != nil {
		return nil, err
	}
	cfg, err := l.WriteXLBDConfig(0, XLBDOptions{
		Weights:    weights,
		Services:   webServices(l),
		StatusPage: true,
	})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "starting xlbd on %s with %s ...\n", l.Nodes[0].Name, cfg)
	d, err := l.StartXLBD(ctx, 0, cfg)
	if err != nil {
		return nil, err
	}
	var targets []netip.AddrPort
	for _, v := range []netip.Addr{l.VIP4(), l.VIP6()} {
		if v.IsValid() {
			targets = append(targets, netip.AddrPortFrom(v, DefaultPorts.HTTP))
		}
	}
	for _, t := range targets {
		if err := l.WaitForwarding(ctx, t, 30*time.Second, d); err != nil {
			return nil, err
		}
	}
	printStatusPage(w, l)
	return targets, nil
}

// demoFailures says what went wrong with the requests to targets (their
// results, in order): failed requests, and backends of non-zero weight
// that got none.
func demoFailures(l *Lab, targets []netip.AddrPort, results []HTTPResult, weights []int) []string {
	var failures []string
	for i, res := range results {
		if res.Errors > 0 {
			failures = append(failures, fmt.Sprintf("%d of %d requests to %v failed, first: %s", res.Errors, res.Requests, targets[i], strings.Join(res.FirstErrors[:min(3, len(res.FirstErrors))], "; ")))
		}
		for j, h := range l.Backends {
			if weights[j] > 0 && res.Counts[h.Short] == 0 {
				failures = append(failures, fmt.Sprintf("backend %s (weight %d) got none of the requests to %v", h.Short, weights[j], targets[i]))
			}
		}
	}
	return failures
}

// printStatusPage brings node 1's status page out of its namespace and
// prints its address.
func printStatusPage(w io.Writer, l *Lab) {
	addr, err := l.ForwardTCP(l.Nodes[0], StatusPageAddr)
	if err != nil {
		fmt.Fprintf(w, "status page: not forwarded (%v); inside %s: http://%s/\n", err, l.Nodes[0].Name, StatusPageAddr)
		return
	}
	fmt.Fprintf(w, "status page: http://%s/ (open it in a browser while the demo runs; inside namespace %s it is http://%s/)\n", addr, l.Nodes[0].Name, StatusPageAddr)
}

// endDemo tears the lab down at the end of a demo that ended with err,
// or leaves it up (keep, no error) and says how to remove it.
func (l *Lab) endDemo(w io.Writer, keep bool, err error) error {
	if keep && err == nil {
		fmt.Fprintf(w, "\nlab %s left up; remove it with: xlb-lab down --prefix %s\n", l.Prefix, l.Prefix)
		return nil
	}
	fmt.Fprintf(w, "\ntearing down lab %s ...\n", l.Prefix)
	if derr := l.Destroy(); derr != nil {
		err = errors.Join(err, fmt.Errorf("teardown: %w", derr))
	}
	return err
}

// webServices returns only the HTTP services of the lab's VIPs.
func webServices(l *Lab) []Service {
	var out []Service
	for _, s := range l.DefaultServices(Ports{}, "", "") {
		if strings.HasPrefix(s.Name, "web") {
			out = append(out, s)
		}
	}
	return out
}

// PrintTopology writes the lab's namespaces and addresses.
func PrintTopology(w io.Writer, l *Lab) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\nlab %s (namespaces /run/netns/%s*)\n", l.Prefix, l.Prefix)
	fmt.Fprintf(tw, "ROLE\tNAMESPACE\tINTERFACE\tIPv4\tIPv6\n")
	for _, h := range l.Hosts() {
		if h.Role == RoleRouter {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%v\n", h.Role, h.Name, "eth0", RouterClientAddr4, RouterClientAddr6)
			fmt.Fprintf(tw, "\t\t%s\t%v\t%v\n", h.Iface, h.Addr4, h.Addr6)
			fmt.Fprintf(tw, "switch\t%s\t%s\t(bridge of the LAN)\t\n", l.Switch.Name, bridgeName)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%v\n", h.Role, h.Name, h.Iface, h.Addr4, h.Addr6)
	}
	tw.Flush()
	var vips []string
	for _, v := range l.VIPs {
		vips = append(vips, v.String())
	}
	fmt.Fprintf(w, "VIPs %s: on lo of every backend; ", strings.Join(vips, ", "))
	routes, err := l.VIPRoutes(l.VIPPrefixes())
	if err != nil || len(routes) == 0 {
		fmt.Fprintf(w, "no router routes\n")
		return
	}
	var rs []string
	for _, r := range routes {
		var nh []string
		for _, a := range r.NextHops {
			nh = append(nh, a.String())
		}
		rs = append(rs, fmt.Sprintf("%v via %s", r.Prefix, strings.Join(nh, "+")))
	}
	fmt.Fprintf(w, "router: %s\n", strings.Join(rs, ", "))
}

func printShares(w io.Writer, l *Lab, res HTTPResult, weights []int, vip netip.Addr) {
	sum := 0
	for _, wt := range weights {
		sum += wt
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "backend\taddress\tweight\trequests\tshare\tweight share\t\n")
	for i, h := range l.Backends {
		share := 100 * float64(res.Counts[h.Short]) / float64(max(res.Requests, 1))
		exp := 100 * float64(weights[i]) / float64(max(sum, 1))
		fmt.Fprintf(tw, "%s\t%v\t%d\t%d\t%.1f%%\t%.1f%%\t\n", h.Short, h.Addr(vip), weights[i], res.Counts[h.Short], share, exp)
	}
	fmt.Fprintf(tw, "errors\t\t\t%d\t%.1f%%\t0.0%%\t\n", res.Errors, 100*float64(res.Errors)/float64(max(res.Requests, 1)))
	tw.Flush()
}

// counters are the interface counters the demo reports.
type counters struct {
	client, node, routerLAN IfaceStats
	backends                IfaceStats // summed
}

func snapshot(l *Lab) (counters, error) {
	var c counters
	var err error
	if c.client, err = l.Client.IfaceStats("eth0"); err != nil {
		return c, err
	}
	if c.node, err = l.NodeStats(0); err != nil {
		return c, err
	}
	if c.routerLAN, err = l.Router.IfaceStats("eth1"); err != nil {
		return c, err
	}
	for _, h := range l.Backends {
		s, err := h.IfaceStats(h.Iface)
		if err != nil {
			return c, err
		}
		c.backends.RxPackets += s.RxPackets
		c.backends.TxPackets += s.TxPackets
		c.backends.RxBytes += s.RxBytes
		c.backends.TxBytes += s.TxBytes
	}
	return c, nil
}

func serverCounts(l *Lab) map[string]int64 {
	m := map[string]int64{}
	for _, s := range l.Servers() {
		m[s.Name] = s.HTTPRequests()
	}
	return m
}

func printCounters(w io.Writer, l *Lab, before, after counters) {
	fmt.Fprintf(w, "\npacket counters during the traffic (interface deltas):\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "interface\trx packets\ttx packets\trx bytes\ttx bytes\t\n")
	row := func(name string, b, a IfaceStats) {
		d := a.Sub(b)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t\n", name, d.RxPackets, d.TxPackets, d.RxBytes, d.TxBytes)
	}
	row("client eth0", before.client, after.client)
	row("router eth1 (LAN)", before.routerLAN, after.routerLAN)
	row("xlb node "+l.Nodes[0].Short+" eth0", before.node, after.node)
	row("backends eth0 (sum)", before.backends, after.backends)
	tw.Flush()
}

func explain(w io.Writer, l *Lab, before, after counters) {
	c := after.client.Sub(before.client)
	n := after.node.Sub(before.node)
	b := after.backends.Sub(before.backends)
	fmt.Fprintf(w, "What happened: the router sent every packet for a VIP to the xlb node "+
		"(%s), whose XDP program picked a backend per connection with the Maglev "+
		"table (shares follow the weights) and sent the packet, encapsulated, "+
		"straight back out of the same interface (XDP_TX) to that backend: the node "+
		"received %d packets and sent %d. xlb-decap on the backend removed the "+
		"tunnel header and the backend's kernel, which holds the VIP on lo, "+
		"answered. The answers did not come back through the node: the client "+
		"sent %d packets and received %d, and the backends sent %d packets of "+
		"their own (%d bytes) to the router directly (direct server return), so "+
		"the node only ever handled the client-to-service half of each "+
		"connection.\n",
		l.Nodes[0].Addr4, n.RxPackets, n.TxPackets, c.TxPackets, c.RxPackets, b.TxPackets, b.TxBytes)
}
