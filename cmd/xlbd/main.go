// Command xlbd is the xlb daemon: it loads and attaches the XDP forwarder,
// commits the config to it, health-checks the backends, and reloads on
// SIGHUP. SIGUSR1 drains the node (BGP graceful shutdown), SIGUSR2 undrains.
// SIGTERM stops the daemon and leaves the forwarder running on its last
// committed state; the next xlbd adopts it. `xlbd --cleanup` detaches and
// removes everything. Before touching the data plane xlbd checks that the
// kernel has every feature it uses (kernel.go; `xlbd --check-kernel`).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/bgp"
	"github.com/xlbproject/xlb/internal/clusterconfig"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/controller"
	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/kernelnet"
	xmetrics "github.com/xlbproject/xlb/internal/metrics"
	"github.com/xlbproject/xlb/internal/peersync"
	"github.com/xlbproject/xlb/internal/plan"
	"github.com/xlbproject/xlb/internal/prober"
	"github.com/xlbproject/xlb/internal/version"
)

func main() {
	var (
		cfgPath  = flag.String("config", "/etc/xlb/xlb.yaml", "config file, or etcd://HOST:PORT[,HOST:PORT]/KEY: the cluster's config in etcd, with this node's sections from --node-config")
		nodeCfg  = flag.String("node-config", "/etc/xlb/node.yaml", "with --config etcd://...: this node's own sections (node, bgp)")
		cache    = flag.String("cluster-cache", "", "with --config etcd://...: where the last committed cluster config is kept, used at start when etcd is unreachable (default /var/lib/xlb/cluster-<node-config name>.yaml)")
		pinDir   = flag.String("pin-dir", "", "bpffs directory of this instance (default "+datapath.BPFFSRoot+"/<node.name>)")
		cleanup  = flag.Bool("cleanup", false, "detach the forwarder of this instance, remove its pins, and exit")
		check    = flag.Bool("check-config", false, "validate the config and exit")
		logLevel = flag.String("log-level", "info", "debug | info | warn | error")
		apiSock  = flag.String("api-socket", "", "gRPC API unix socket, mode 0600 (default node.api_socket, else "+api.SocketDir+"/<node.name>.sock)")
		apiTCP   = flag.String("api-tcp", "", "also serve the API on HOST:PORT, with mTLS only (needs --tls-cert, --tls-key, --tls-client-ca)")
		tlsCert  = flag.String("tls-cert", "", "server certificate for --api-tcp")
		tlsKey   = flag.String("tls-key", "", "server key for --api-tcp")
		tlsCA    = flag.String("tls-client-ca", "", "CA that signs client certificates for --api-tcp")
		metrics  = flag.String("metrics-addr", "", "Prometheus /metrics and /healthz HTTP address, \"\" or \"off\" to disable (default node.metrics_addr, else "+xmetrics.DefaultAddr+")")
		probe    = flag.Duration("probe-interval", 0, "run the blackbox prober: every interval, a real probe to each VIP through the forwarder and the interface, answered by a backend; a node whose probes all go unanswered withdraws its VIPs (0: off)")
		kernel   = flag.Bool("check-kernel", false, "probe the running kernel for every feature xlb needs, print each with the Linux version that has it, and exit (1 if one is missing)")
		showVer  = flag.Bool("version", false, "print the version (git describe) and the kernel's tag of the embedded forwarder program, and exit")
		page     = flag.Bool("status-page", false, "serve the live status page at / of the metrics address (also node.status_page: true)")
		discard  = flag.Bool("discard-conntrack", false, "if the pinned connection table does not fit this build or node.conntrack_entries, start with an empty one (tracked connections are re-balanced) instead of refusing")
	)
	flag.Parse()
	if *showVer || *kernel {
		infoAndExit(*showVer, *kernel)
	}
	configArg(*check, cfgPath)
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "xlbd: --log-level: %v\n", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	slog.SetDefault(log)

	config.UseRoutes(kernelnet.Route)                                                  // methods dr and nat need connected backends
	cfg, src, err := loadConfig(context.Background(), log, *cfgPath, *nodeCfg, *cache) // cluster.go
	if err != nil {
		fmt.Fprintf(os.Stderr, "xlbd: %v\n", err)
		os.Exit(2)
	}
	if *check {
		fmt.Printf("%s: ok (%d services, %d pools)\n", *cfgPath, len(cfg.Services), len(cfg.Pools))
		return
	}
	if *pinDir == "" {
		*pinDir = filepath.Join(datapath.BPFFSRoot, cfg.Node.Name)
	}
	if !*cleanup {
		if err := checkKernel(log); err != nil {
			fmt.Fprintf(os.Stderr, "xlbd: %v\n", err)
			os.Exit(1)
		}
	}
	if *cleanup {
		cleanupAndExit(log, *pinDir, cfg.BGP)
	}
	srv := serveOpts{cluster: src, tcp: *apiTCP, tls: api.TLSFiles{Cert: *tlsCert, Key: *tlsKey, CA: *tlsCA}, discardCT: *discard, probe: *probe,
		statusPage: *page || cfg.Node.StatusPage}
	srv.socket, srv.metrics, srv.metricsDefault = endpoints(cfg.Node, flagValue("api-socket", *apiSock), flagValue("metrics-addr", *metrics))
	if srv.statusPage && srv.metrics == "" {
		fmt.Fprintf(os.Stderr, "xlbd: the status page is served by the metrics listener, which is off: give --metrics-addr (or node.metrics_addr) an address\n")
		os.Exit(2)
	}
	if err := run(log, cfg, *cfgPath, *pinDir, srv); err != nil {
		log.Error("xlbd stopped", "error", err)
		os.Exit(1)
	}
}

// configArg takes the config file from the argument after the flags,
// as in `xlbd --check-config FILE`; it exits on any other argument.
func configArg(check bool, cfgPath *string) {
	if flag.NArg() == 0 {
		return
	}
	cfgSet := false
	flag.Visit(func(f *flag.Flag) { cfgSet = cfgSet || f.Name == "config" })
	if !check || flag.NArg() > 1 || cfgSet {
		fmt.Fprintf(os.Stderr, "xlbd: unexpected arguments %q (the config file is --config FILE, or --check-config FILE)\n", flag.Args())
		os.Exit(2)
	}
	*cfgPath = flag.Arg(0)
}

// cleanupAndExit answers --cleanup: it detaches the forwarder pinned in
// pinDir, removes its pins and the VIP routes, and exits.
func cleanupAndExit(log *slog.Logger, pinDir string, b *config.BGP) {
	if err := datapath.Cleanup(pinDir); err != nil {
		log.Error("cleanup failed", "pin_dir", pinDir, "error", err)
		os.Exit(1)
	}
	if err := cleanupKernelRoutes(b, log); err != nil {
		log.Error("cleanup of the VIP routes failed", "error", err)
		os.Exit(1)
	}
	log.Info("forwarder detached and pins removed", "pin_dir", pinDir)
	os.Exit(0)
}

// infoAndExit answers --version and --check-kernel.
func infoAndExit(showVersion, kernel bool) {
	if showVersion {
		version.Print(os.Stdout, "xlbd", datapath.ProgramTags()...)
	}
	if kernel && !printKernel(os.Stdout) {
		os.Exit(1)
	}
	os.Exit(0)
}

func bgpConfig(b *config.BGP, restarting bool) bgp.Config {
	c := bgp.Config{
		ASN: b.ASN, RouterID: b.RouterID, ListenPort: b.ListenPort,
		GracefulRestartTime: b.GracefulRestartTime, ShutdownWait: b.ShutdownWait,
		NextHop4: b.NextHop4, NextHop6: b.NextHop6, Restarting: restarting,
	}
	for _, p := range b.Peers {
		c.Peers = append(c.Peers, bgp.Peer{Addr: p.Addr, ASN: p.ASN, Port: p.Port,
			HoldTime: p.HoldTime, Keepalive: p.Keepalive, Password: p.Password})
	}
	return c
}

type serveOpts struct {
	socket, tcp string
	tls         api.TLSFiles
	metrics     string // "" for none
	// metricsDefault: metrics is the default address, not asked for, so a
	// second instance finding it taken starts without metrics.
	metricsDefault bool
	discardCT      bool
	probe          time.Duration // prober interval; 0: no prober
	statusPage     bool          // serve the status page on the metrics listener
	// cluster is the config's etcd source (nil: a file).
	cluster *clusterconfig.Source
}

// datapathOptions are the forwarder's options from the node section.
func datapathOptions(log *slog.Logger, cfg *config.Config, pinDir string, so serveOpts) datapath.Options {
	return datapath.Options{
		Interface:        cfg.Node.Interface,
		PinDir:           pinDir,
		Mode:             datapath.Mode(cfg.Node.XDPMode.String()),
		ConntrackEntries: cfg.Node.ConntrackEntries,
		FragEntries:      cfg.Node.FragmentTableEntries,
		MaxServices:      cfg.Node.MaxServices,
		MaxReals:         cfg.Node.MaxBackends,
		TableBytes:       tableBytes(cfg),
		DiscardConntrack: so.discardCT,
		Logger:           log,
	}
}

func run(log *slog.Logger, cfg *config.Config, path, pinDir string, so serveOpts) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// SIGHUP, SIGUSR1 and SIGUSR2 are caught from the start and handled
	// once the controller runs: until then their default action, exit,
	// would stop a daemon that is still starting (a reload while its sync
	// waits for the peers' bulk copies killed it).
	requests := signalRequests()
	// The API socket first: a second xlbd for the same socket stops here,
	// before it touches the pinned data plane.
	apiView, m, err := serve(ctx, log, cfg, pinDir, so)
	if err != nil {
		return err
	}
	// Another instance of this host forwarding one of our VIPs: refused
	// before the data plane is touched.
	if err := controller.CheckInstances(pinDir, cfg.Desired()); err != nil {
		return err
	}
	dp, err := datapath.Open(datapathOptions(log, cfg, pinDir, so))
	if err != nil {
		// An incompatible pinned map names itself, both layouts and the
		// choices (datapath.IncompatibleMapError).
		return err
	}
	defer dp.Close()
	closeRings, err := startRings(ctx, log, dp, cfg.Node.Name)
	if err != nil {
		return err
	}
	defer closeRings()
	syncer, err := newSyncer(log, cfg, dp, m) // sync.go; nil without node.sync
	if err != nil {
		return err
	}
	ctl, speaker, err := newController(log, cfg, path, dp, m, so, syncer)
	if err != nil {
		return err
	}
	runKube, err := startKubernetes(ctx, log, cfg, ctl) // kubernetes.go
	if err != nil {
		return err
	}
	if err := ctl.Commit(cfg); err != nil {
		return fmt.Errorf("initial config: %w (the forwarder keeps its previous state)", err)
	}
	runCluster(ctx, so.cluster, cfg, ctl) // cluster.go: watch the etcd key
	runKube()
	if cfg.Node.Sync != nil {
		startSync(ctx, log, syncer, len(cfg.Node.Sync.Peers)) // before the VIPs are announced
	}
	if syncer != nil {
		apiView.SetClusterStatus(syncer.ClusterInfo)
	}
	apiView.Attach(ctl, speaker)
	if speaker != nil {
		// The announcements were recorded by the first commit; a restart
		// (pinned forwarder found) starts in graceful-restart mode.
		if err := speaker.Start(ctx); err != nil {
			return fmt.Errorf("bgp: %w", err)
		}
		// On the way out: keep the routers' routes (graceful restart) while
		// the pinned forwarder goes on; a drain is explicit (SIGUSR1).
		defer speaker.Stop(true)
	}
	log.Info("xlbd running", "version", version.String(), "program_tag", programTag(dp), "interface", cfg.Node.Interface, "mode", dp.Mode(), "pin_dir", pinDir, "config", path)
	ctl.Run(ctx, requests)
	log.Info("xlbd stopping; the forwarder keeps running on the last committed state", "pin_dir", pinDir)
	return nil
}

// serve starts the API server and, when configured, the metrics server.
func serve(ctx context.Context, log *slog.Logger, cfg *config.Config, pinDir string, so serveOpts) (*controller.API, *xmetrics.Metrics, error) {
	apiView := controller.NewAPI(cfg.Node.Interface, pinDir, version.String())
	server, err := api.Listen(apiView, api.Options{Socket: so.socket, TCP: so.tcp, TLS: so.tls, Log: log})
	if err != nil {
		return nil, nil, err
	}
	go server.Serve(ctx)
	m, err := serveMetrics(ctx, log, apiView, so)
	return apiView, m, err
}

// startRings starts the readers of the forwarder's ring buffers: held
// fragments (docs/ARCHITECTURE.md, IP fragments), re-injected through the
// forwarder, and tracer records, relayed to their receivers; and the
// connection table's sweep.
func startRings(ctx context.Context, log *slog.Logger, dp *datapath.Datapath, node string) (func(), error) {
	holder, err := dp.NewFragHolder(datapath.FragHoldOptions{})
	if err != nil {
		return nil, err
	}
	go func() {
		if err := holder.Run(ctx); err != nil {
			log.Error("fragment holder stopped", "error", err)
		}
	}()
	traces, err := dp.TraceReader()
	if err != nil {
		holder.Close()
		return nil, err
	}
	go relayTraces(log, traces, node)
	go dp.RunSweeper(ctx, time.Second, log) // connection counts see timeouts (datapath/conns.go)
	return func() { traces.Close(); holder.Close() }, nil
}

// newController makes the controller and, with a bgp section, its speaker.
func newController(log *slog.Logger, cfg *config.Config, path string, dp *datapath.Datapath, m *xmetrics.Metrics, so serveOpts, syncer *peersync.Syncer) (*controller.Controller, *bgp.Speaker, error) {
	probe := so.probe
	lim := limits(cfg.Node)
	copts := controller.Options{Path: path, Limits: lim, Log: log, OnCommit: func(e controller.CommitEvent) {
		m.ObserveCommit(xmetrics.Commit{Trigger: e.Trigger, Plan: e.Plan, Apply: e.Apply, Err: e.Err})
		if syncer != nil {
			syncer.SetState(e.State, e.Version)
		}
	}}
	if so.cluster != nil {
		copts.Load = func() (*config.Config, error) { return so.cluster.Load(context.Background()) }
	}
	if probe > 0 {
		copts.Prober = prober.New(prober.Options{Send: dp.SendProbe, Src4: cfg.Node.Address, Src6: cfg.Node.Address6, Interval: probe, Log: log})
	}
	var speaker *bgp.Speaker
	if cfg.BGP != nil && cfg.BGP.Mode == config.BGPExternal {
		k, err := kernelRoutes(cfg.BGP, log)
		if err != nil {
			return nil, nil, err
		}
		copts.BGP = k
	} else if cfg.BGP != nil {
		var err error
		if speaker, err = bgp.New(bgpConfig(cfg.BGP, dp.Adopted()), log); err != nil {
			return nil, nil, err
		}
		copts.BGP = speaker
	}
	return controller.New(dp, copts), speaker, nil
}

// limits are the planner's id ranges for the capacities of node (ids
// below the limits, from 1).
func limits(n config.Node) plan.Limits {
	return plan.Limits{MaxServices: n.MaxServices + 1, MaxReals: n.MaxBackends + 1}
}

// tableBytes is the memory of the Maglev tables of cfg's services.
func tableBytes(cfg *config.Config) uint64 {
	var b uint64
	for _, s := range cfg.Services {
		b += datapath.TableBytes(s.TableSize)
	}
	return b
}

// signalRequests turns SIGHUP, SIGUSR1 and SIGUSR2 into the controller's
// reload, drain and undrain requests.
func signalRequests() <-chan controller.Request {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
	requests := make(chan controller.Request, 4)
	go func() {
		for s := range sigs {
			switch s {
			case syscall.SIGHUP:
				requests <- controller.RequestReload
			case syscall.SIGUSR1:
				requests <- controller.RequestDrain
			case syscall.SIGUSR2:
				requests <- controller.RequestUndrain
			}
		}
	}()
	return requests
}
