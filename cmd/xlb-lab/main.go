// Command xlb-lab builds and removes xlb lab topologies (network namespaces)
// and runs the demo. See package lab.
//
//	xlb-lab up [--nodes N] [--backends M] [--prefix P] [--direct | --bgp [--speakers]] [--serve]
//	xlb-lab down [--prefix P]
//	xlb-lab demo [--bin DIR] [--requests N] [--requests6 N] [--weights 1,1,2] [--keep]
//	xlb-lab demo --scale [--connections N] [--no-sync]
//	xlb-lab demo --methods [--requests N] [--weights 1,1,2]
//	xlb-lab demo --kubernetes
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xlbproject/xlb/lab"
)

const usage = `usage: xlb-lab <command> [flags]

commands:
  up     build a lab topology, print its namespaces and addresses, leave it up
         (--bgp: BIRD on the router peers with the nodes, ECMP for the VIPs)
  down   remove leftover labs (every xl????- namespace, or --prefix P)
  demo   build the single-node lab, run xlbd and xlb-decap, send HTTP traffic,
         report per-backend shares and packet counters, tear down
         (--scale: the 3-node demo with connection sync, and the simultaneous
         change of a backend and a node with and without sync)
         (--methods: one service per forwarding method, where replies went)
         (--kubernetes: a real API server, a LoadBalancer Service on the
         backends as the cluster's nodes: address, endpoints, drain, outage)

run "xlb-lab <command> -h" for the flags of a command; needs root.
`

func main() {
	// The lab's daemons run the blackbox prober (xlbd --probe-interval).
	lab.ProbeInterval = time.Second
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	interrupted := ctx.Err() != nil
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		if interrupted {
			fmt.Fprintf(os.Stderr, "xlb-lab: interrupted: %v\n", err)
		} else {
			fmt.Fprintf(os.Stderr, "xlb-lab: %v\n", err)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return flag.ErrHelp
	}
	switch args[0] {
	case "up":
		return up(ctx, args[1:], out)
	case "down":
		return down(args[1:], out)
	case "demo":
		return demo(ctx, args[1:], out)
	case "-h", "--help", "help":
		fmt.Fprint(out, usage)
		return nil
	}
	fmt.Fprint(os.Stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

func up(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	nodes := fs.Int("nodes", lab.DefaultNodes, "xlb nodes (VIP routes: multipath over all of them)")
	backends := fs.Int("backends", lab.DefaultBackends, "backends")
	prefix := fs.String("prefix", "", "namespace name prefix (default: random xl????-)")
	direct := fs.Bool("direct", false, "route the VIPs straight to backend b1 (works without xlb)")
	bgp := fs.Bool("bgp", false, "no static VIP routes: run BIRD on the router, peering with every node (router AS 65000, nodes AS 65001), ECMP into the kernel")
	speakers := fs.Bool("speakers", false, "with --bgp: run a stand-in BGP speaker (BIRD) on every node that announces the VIPs, as xlbd will")
	serve := fs.Bool("serve", false, "run the backends' HTTP/UDP/TCP servers in the foreground until Ctrl-C (the lab stays up afterwards)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg := lab.Config{Prefix: *prefix, Nodes: *nodes, Backends: *backends}
	switch {
	case *direct && *bgp:
		return errors.New("--direct and --bgp exclude each other")
	case *speakers && !*bgp:
		return errors.New("--speakers needs --bgp")
	case *direct:
		cfg.Routing = lab.RouteToBackend
	case *bgp:
		cfg.Routing = lab.RouteNone
	}
	l, err := lab.New(ctx, cfg)
	if err != nil {
		return err
	}
	if *bgp {
		if err := startBGP(ctx, l, *speakers, out); err != nil {
			return errors.Join(err, l.Destroy())
		}
	}
	lab.PrintTopology(out, l)
	fmt.Fprintf(out, "\nrun commands inside with: nsenter --net=%s/%sclient -- <command>\n", lab.NetnsDir, l.Prefix)
	fmt.Fprintf(out, "remove with: xlb-lab down --prefix %s\n", l.Prefix)
	if !*serve {
		return nil
	}
	all, err := l.StartServers(lab.Ports{})
	if err != nil {
		return err
	}
	p := lab.DefaultPorts
	fmt.Fprintf(out, "serving HTTP :%d, UDP echo :%d, TCP line echo :%d on every backend; Ctrl-C stops serving\n", p.HTTP, p.UDP, p.TCP)
	<-ctx.Done()
	for _, s := range all {
		s.Close()
		fmt.Fprintf(out, "%s: %d HTTP requests, %d UDP datagrams, %d TCP connections on VIPs\n", s.Name, s.HTTPRequests(), s.UDPDatagrams(), s.TCPConns())
	}
	return nil
}

// startBGP starts the router's BIRD and, with speakers, a stand-in speaker
// on every node, and waits for the ECMP routes.
func startBGP(ctx context.Context, l *lab.Lab, speakers bool, out io.Writer) error {
	r, err := l.StartBIRD(ctx, lab.BIRDOptions{})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "BIRD runs in %s: config %s, log %s\n  birdc -s %s show protocols\n",
		l.Router.Name, r.Config, r.LogPath, r.Socket)
	if !speakers {
		return nil
	}
	for i := range l.Nodes {
		if _, err := l.StartNodeBIRD(ctx, i, lab.NodeBIRDOptions{}); err != nil {
			return err
		}
	}
	if err := r.WaitEstablished(ctx, 15*time.Second); err != nil {
		return err
	}
	for _, p := range l.VIPPrefixes() {
		if _, err := l.WaitRoute(ctx, p, l.NodeNextHops(p.Addr()), 10*time.Second); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "stand-in speakers (BIRD) on %d nodes announce the VIPs; the router has a %d-way route for each\n", len(l.Nodes), len(l.Nodes))
	return nil
}

func down(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("down", flag.ContinueOnError)
	prefix := fs.String("prefix", "", "remove only namespaces with this prefix (default: every xl????- lab)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	names, err := lab.Cleanup(*prefix)
	for _, n := range names {
		fmt.Fprintf(out, "removed %s\n", n)
	}
	if len(names) == 0 && err == nil {
		fmt.Fprintf(out, "nothing to remove\n")
	}
	return err
}

func demo(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var opts lab.DemoOptions
	fs.StringVar(&opts.BinDir, "bin", "", "directory holding xlbd and xlb-decap (default: next to xlb-lab, or the repository's bin/)")
	fs.IntVar(&opts.Requests4, "requests", 1000, "HTTP requests to the IPv4 VIP")
	fs.IntVar(&opts.Requests6, "requests6", 300, "HTTP requests to the IPv6 VIP")
	weights := fs.String("weights", "1,1,2", "backend weights, one per backend")
	fs.StringVar(&opts.Prefix, "prefix", "", "namespace name prefix (default: random xl????-)")
	fs.BoolVar(&opts.Keep, "keep", false, "leave the lab up after a successful demo")
	scale := fs.Bool("scale", false, "the multi-node demo instead: 3 nodes behind BIRD ECMP, node drain, backend and node failures, restore")
	conns := fs.Int("connections", 200, "long-lived connections of the --scale demo")
	noSync := fs.Bool("no-sync", false, "the --scale demo without connection sync (node.sync) and without the simultaneous-change step")
	methods := fs.Bool("methods", false, "the forwarding-methods demo instead: one service per method (gre, ipip, gue, dr, nat) on a 1500-byte segment")
	kube := fs.Bool("kubernetes", false, "the Kubernetes demo instead: a real API server (make kube-bin), a LoadBalancer Service served by the backends as the cluster's nodes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *kube {
		return lab.RunKubeDemo(ctx, out, lab.KubeDemoOptions{BinDir: opts.BinDir, Prefix: opts.Prefix, Keep: opts.Keep})
	}
	if *scale {
		return lab.RunScaleDemo(ctx, out, lab.ScaleDemoOptions{Connections: *conns, BinDir: opts.BinDir, Prefix: opts.Prefix, Sync: !*noSync})
	}
	for _, f := range strings.Split(*weights, ",") {
		w, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || w < 0 {
			return fmt.Errorf("--weights: bad weight %q", f)
		}
		opts.Weights = append(opts.Weights, w)
	}
	if *methods {
		return lab.RunMethodsDemo(ctx, out, lab.MethodsDemoOptions{Requests: opts.Requests4, Weights: opts.Weights,
			BinDir: opts.BinDir, Prefix: opts.Prefix, Keep: opts.Keep})
	}
	return lab.RunDemo(ctx, out, opts)
}
