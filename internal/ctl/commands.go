package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/xlbproject/xlb/api/xlb/v1"
	"github.com/xlbproject/xlb/internal/api"
)

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// parseNoArgs parses the flags of a command that takes no positional
// argument, and fails when it got some.
func parseNoArgs(fs *flag.FlagSet, name string, args []string) error {
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("%s takes no argument (got %q)", name, strings.Join(pos, " "))
	}
	return nil
}

func (c *CLI) status(ctx context.Context, args []string) error {
	fs := c.flags("status")
	if err := parseNoArgs(fs, "status", args); err != nil {
		return err
	}
	return run(ctx, c, (*api.Client).Status, &pb.StatusRequest{}, c.printStatus)
}

// rateFlag adds --rate: rates over one second, measured by xlbd.
func rateFlag(fs interface {
	BoolVar(*bool, string, bool, string)
}, v *bool) {
	fs.BoolVar(v, "rate", false, "add per-second rates (xlbd samples the counters 1 s apart)")
}

func rateInterval(rate bool) *durationpb.Duration {
	if !rate {
		return nil
	}
	return durationpb.New(time.Second)
}

func (c *CLI) services(ctx context.Context, args []string) error {
	fs := c.flags("services")
	svc := fs.String("service", "", "only this service")
	ipvsadm := fs.Bool("ipvsadm", false, "print in the layout of 'ipvsadm -Ln' (scheduler, persistence, weights, connections)")
	var rate bool
	rateFlag(fs, &rate)
	if err := parseNoArgs(fs, "services", args); err != nil {
		return err
	}
	if *ipvsadm && rate {
		return usagef("services: --ipvsadm and --rate do not go together (ipvsadm -Ln has no rates): drop one")
	}
	return run(ctx, c, (*api.Client).ListServices, &pb.ListServicesRequest{Service: *svc, RateInterval: rateInterval(rate)},
		func(r *pb.ListServicesResponse) error {
			if *ipvsadm {
				return c.printIPVSAdm(r)
			}
			return c.printServices(r, rate)
		})
}

func (c *CLI) backends(ctx context.Context, args []string) error {
	fs := c.flags("backends")
	svc := fs.String("service", "", "only this service")
	var rate bool
	rateFlag(fs, &rate)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	req := &pb.ListBackendsRequest{Service: *svc, RateInterval: rateInterval(rate)}
	switch len(pos) {
	case 0:
	case 1:
		req.Address = pos[0]
	default:
		return usagef("backends [ADDR] [--service NAME]")
	}
	return run(ctx, c, (*api.Client).ListBackends, req,
		func(r *pb.ListBackendsResponse) error { return c.printBackends(r, rate) })
}

func (c *CLI) stats(ctx context.Context, args []string) error {
	fs := c.flags("stats")
	watch := fs.Bool("watch", false, "print per-second rates every --interval until interrupted")
	interval := fs.Duration("interval", time.Second, "sampling interval of --watch")
	count := fs.Int("count", 0, "with --watch: stop after this many samples (0: never)")
	if err := parseNoArgs(fs, "stats", args); err != nil {
		return err
	}
	if err := c.checkOutput(); err != nil {
		return err
	}
	if *interval < 100*time.Millisecond {
		return usagef("--interval %v: at least 100ms", *interval)
	}
	cl, err := c.connect()
	if err != nil {
		return err
	}
	read := func() (*pb.CountersResponse, error) {
		cctx, cancel := c.call(ctx)
		defer cancel()
		return cl.Counters(cctx, &pb.CountersRequest{})
	}
	prev, err := read()
	if err != nil {
		return err
	}
	if !*watch {
		if c.json() {
			return c.printJSON(prev)
		}
		return c.printStats(prev, false)
	}
	clear := !c.json() && isTerminal(c.Out)
	for n := 0; *count == 0 || n < *count; n++ {
		if err := c.Sleep(ctx, *interval); err != nil {
			return nil // interrupted: a normal end for --watch
		}
		cur, err := read()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		withRates(prev, cur)
		prev = cur
		if c.json() {
			if err := c.printJSONLine(cur); err != nil {
				return err
			}
			continue
		}
		if clear {
			fmt.Fprint(c.Out, "\033[H\033[2J")
		} else if n > 0 {
			fmt.Fprintln(c.Out)
		}
		if err := c.printStats(cur, true); err != nil {
			return err
		}
	}
	return nil
}

// withRates fills cur's rates from the counters of prev, over the time
// between the two samples as xlbd stamped them.
func withRates(prev, cur *pb.CountersResponse) {
	d := cur.GetSample().GetAt().AsTime().Sub(prev.GetSample().GetAt().AsTime())
	cur.Sample.Interval = durationpb.New(d)
	rate := func(a, b uint64) float64 {
		if b < a || d <= 0 {
			return 0
		}
		return float64(b-a) / d.Seconds()
	}
	rates := func(a, b *pb.Counters) *pb.Rates {
		return &pb.Rates{Packets: rate(a.GetPackets(), b.GetPackets()), Bytes: rate(a.GetBytes(), b.GetBytes()), NewFlows: rate(a.GetNewFlows(), b.GetNewFlows())}
	}
	g := map[string]uint64{}
	for _, x := range prev.Global {
		g[x.Name] = x.Value
	}
	for _, x := range cur.Global {
		if v, ok := g[x.Name]; ok {
			x.Rate = rate(v, x.Value)
		}
	}
	type key struct {
		vip, proto string
		port       uint32
	}
	svc := map[key]*pb.Counters{}
	for _, s := range prev.Services {
		svc[key{s.Vip, s.Protocol.String(), s.Port}] = s.Counters
	}
	for _, s := range cur.Services {
		if p, ok := svc[key{s.Vip, s.Protocol.String(), s.Port}]; ok {
			s.Rates = rates(p, s.Counters)
		}
	}
	be := map[[2]string]*pb.Counters{}
	for _, b := range prev.Backends {
		be[[2]string{b.Service, b.Address}] = b.Counters
	}
	for _, b := range cur.Backends {
		if p, ok := be[[2]string{b.Service, b.Address}]; ok {
			b.Rates = rates(p, b.Counters)
		}
	}
}

func (c *CLI) apply(ctx context.Context, args []string) error {
	fs := c.flags("apply")
	file := fs.String("f", "", "the config file to apply (- for stdin)")
	dry := fs.Bool("dry-run", false, "validate and show the diff; commit nothing")
	reset := fs.Bool("reset-overrides", false, "also drop every runtime override (drain, weight)")
	cluster := fs.Bool("cluster", false, "write the cluster config (health_checks, pools, services) to etcd, where every node takes it (cluster.go)")
	etcdURL := fs.String("etcd", "", "with --cluster: etcd://HOST:PORT[,HOST:PORT]/KEY (default: where this node's xlbd takes its config)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if *file == "" && len(pos) == 1 {
		*file = pos[0]
		pos = nil
	}
	if *file == "" || len(pos) > 0 {
		return usagef("apply -f FILE [--dry-run] [--cluster [--etcd etcd://HOST:PORT/KEY]]")
	}
	if err := c.checkOutput(); err != nil {
		return err
	}
	var data []byte
	if *file == "-" {
		data, err = readAll(os.Stdin)
	} else {
		data, err = os.ReadFile(*file)
	}
	if err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	if *cluster {
		return c.applyCluster(ctx, *file, data, *etcdURL, *dry, 10*time.Second)
	}
	err = run(ctx, c, (*api.Client).ApplyConfig,
		&pb.ApplyConfigRequest{Yaml: data, Source: *file, DryRun: *dry, ResetOverrides: *reset}, c.printApply)
	if errs := api.ConfigErrorsOf(err); errs != nil {
		return c.configRejected(*file, errs)
	}
	return err
}

// errReported is a failure already printed in full.
var errReported = errors.New("reported")

func (c *CLI) configRejected(file string, errs []*pb.ConfigError) error {
	if c.json() {
		if err := c.printJSON(&pb.ConfigErrors{Errors: errs}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(c.Err, "xlbctl: %s rejected, nothing changed:\n", file)
		for _, e := range errs {
			fmt.Fprintf(c.Err, "  %s\n", formatConfigError(e))
		}
	}
	return fmt.Errorf("%w: config rejected", errReported)
}

func formatConfigError(e *pb.ConfigError) string {
	var b strings.Builder
	if e.Source != "" {
		b.WriteString(e.Source + ":")
	}
	if e.Line > 0 {
		b.WriteString(strconv.Itoa(int(e.Line)) + ":")
	}
	if b.Len() > 0 {
		b.WriteString(" ")
	}
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Message)
	return b.String()
}

// setBackend returns the runner of drain, undrain, weight and reset.
func (c *CLI) setBackend(verb string) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		fs := c.flags(verb)
		svc := fs.String("service", "", "only in this service (default: every service that has ADDR)")
		pos, err := parse(fs, args)
		if err != nil {
			return err
		}
		want := 1
		if verb == "weight" {
			want = 2
		}
		if len(pos) != want {
			if verb == "weight" {
				return usagef("weight ADDR N [--service NAME]")
			}
			return usagef("%s ADDR [--service NAME]", verb)
		}
		if _, err := netip.ParseAddr(pos[0]); err != nil {
			return usagef("%s: %q is not an IP address", verb, pos[0])
		}
		if err := c.checkOutput(); err != nil {
			return err
		}
		req := &pb.SetBackendRequest{Address: pos[0], Service: *svc}
		switch verb {
		case "drain":
			req.Action = &pb.SetBackendRequest_Drain{Drain: true}
		case "undrain":
			req.Action = &pb.SetBackendRequest_Drain{Drain: false}
		case "reset":
			req.Action = &pb.SetBackendRequest_Reset_{Reset_: true}
		case "weight":
			w, err := strconv.ParseUint(pos[1], 10, 16)
			if err != nil {
				return usagef("weight %q: an integer 0..65535", pos[1])
			}
			req.Action = &pb.SetBackendRequest_Weight{Weight: uint32(w)}
		}
		var what string
		switch verb {
		case "drain":
			what = "draining: no new flows, tracked flows continue"
		case "undrain":
			what = "undrained: takes new flows when healthy"
		case "reset":
			what = "overrides cleared: back to the config"
		case "weight":
			what = "weight " + pos[1]
		}
		return run(ctx, c, (*api.Client).SetBackend, req, func(r *pb.SetBackendResponse) error {
			for _, b := range r.Backends {
				fmt.Fprintf(c.Out, "%s/%s: %s\n", b.Service, b.Address, what)
			}
			if verb != "reset" {
				fmt.Fprintf(c.Out, "(a runtime override on top of the config; 'xlbctl reset %s' returns to the config)\n", pos[0])
			}
			return nil
		})
	}
}

var ctStates = map[string]pb.ConntrackState{
	"":            pb.ConntrackState_CONNTRACK_STATE_UNSPECIFIED,
	"any":         pb.ConntrackState_CONNTRACK_STATE_UNSPECIFIED,
	"syn":         pb.ConntrackState_CONNTRACK_STATE_SYN,
	"established": pb.ConntrackState_CONNTRACK_STATE_ESTABLISHED,
	"closing":     pb.ConntrackState_CONNTRACK_STATE_CLOSING,
}

func (c *CLI) conntrack(ctx context.Context, args []string) error {
	fs := c.flags("conntrack")
	svc := fs.String("service", "", "only entries of this service")
	backend := fs.String("backend", "", "only entries pointing to this backend address")
	state := fs.String("state", "", "syn | established | closing")
	limit := fs.Uint("limit", api.DefaultConntrackLimit, "at most this many entries")
	expired := fs.Bool("expired", false, "include entries idle past their timeout")
	templates := fs.Bool("templates", false, "the persistence templates instead of the connections")
	if err := parseNoArgs(fs, "conntrack", args); err != nil {
		return err
	}
	st, ok := ctStates[*state]
	if !ok {
		return usagef("--state %q: syn, established or closing", *state)
	}
	return run(ctx, c, (*api.Client).ConntrackDump, &pb.ConntrackDumpRequest{
		Service: *svc, Backend: *backend, State: st, Limit: uint32(*limit), IncludeExpired: *expired, Templates: *templates,
	}, c.printConntrack)
}

func (c *CLI) explain(ctx context.Context, args []string) error {
	fs := c.flags("explain")
	flags := fs.String("flags", "S", "TCP flags: letters F S R P A U (A or . for ACK), or a number")
	hexDump := fs.Bool("hex", false, "also print the output frame in hex")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 3 {
		return usagef("explain SRC:PORT DST:PORT tcp|udp [--flags S]")
	}
	var proto pb.Protocol
	switch strings.ToLower(pos[2]) {
	case "tcp", "6":
		proto = pb.Protocol_PROTOCOL_TCP
	case "udp", "17":
		proto = pb.Protocol_PROTOCOL_UDP
	default:
		return usagef("explain: protocol %q: tcp or udp", pos[2])
	}
	f, err := api.ParseTCPFlags(*flags)
	if err != nil {
		return usagef("--flags: %v", err)
	}
	return run(ctx, c, (*api.Client).Explain, &pb.ExplainRequest{Src: pos[0], Dst: pos[1], Protocol: proto, TcpFlags: uint32(f)},
		func(r *pb.ExplainResponse) error { return c.printExplain(r, *hexDump) })
}

func (c *CLI) node(ctx context.Context, args []string) error {
	fs := c.flags("node")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || (pos[0] != "drain" && pos[0] != "undrain") {
		return usagef("node drain | node undrain")
	}
	if pos[0] == "drain" {
		return run(ctx, c, (*api.Client).NodeDrain, &pb.NodeDrainRequest{}, func(r *pb.NodeDrainResponse) error {
			return c.printChange(r.Changed, "node draining: VIPs announced with GRACEFUL_SHUTDOWN, then withdrawn; the forwarder keeps serving what still arrives",
				"node already drained")
		})
	}
	return run(ctx, c, (*api.Client).NodeUndrain, &pb.NodeUndrainRequest{}, func(r *pb.NodeUndrainResponse) error {
		return c.printChange(r.Changed, "node undrained: VIPs announced again", "node was not drained")
	})
}

// printChange prints changed or, when the call changed nothing, unchanged.
func (c *CLI) printChange(did bool, changed, unchanged string) error {
	if did {
		fmt.Fprintln(c.Out, changed)
	} else {
		fmt.Fprintln(c.Out, unchanged)
	}
	return nil
}

// run connects (once per CLI), makes one call with req bounded by --timeout
// and prints the response: as JSON with -o json, else with text. A failed
// call's error is returned as it is.
func run[Req any, Resp proto.Message](ctx context.Context, c *CLI,
	call func(*api.Client, context.Context, Req, ...grpc.CallOption) (Resp, error), req Req, text func(Resp) error) error {
	cl, err := c.connect()
	if err != nil {
		return err
	}
	cctx, cancel := c.call(ctx)
	defer cancel()
	r, err := call(cl, cctx, req)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(r)
	}
	return text(r)
}
