// Package metrics exports xlbd's state to Prometheus (docs/OPERATIONS.md): an HTTP
// listener (default 127.0.0.1:9469) with /metrics, in the text exposition
// format, and /healthz, 200 while the forwarder's self-check passes and 503
// otherwise.
//
// Counters and states are read from a Source at scrape time (a custom
// collector: nothing is cached, every scrape is current); commit and table
// generation timings are pushed by the controller (ObserveCommit,
// ObserveTableBuild) into histograms. Every name starts with xlb_; the list
// is in docs/OPERATIONS.md.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/xlbproject/xlb/internal/api"
)

// DefaultAddr is where the metrics listener binds by default: loopback, so
// exposing it is a deliberate choice (--metrics-addr).
const DefaultAddr = "127.0.0.1:9469"

// Source is what the exporter reads at every scrape: a subset of
// api.Backend, so the daemon's API backend serves both. Its methods are
// called concurrently with the API's.
type Source interface {
	// Status gives the node, self-check, drain, BGP sessions, config
	// commit and conntrack occupancy.
	Status(ctx context.Context) (api.StatusInfo, error)
	// Services gives the per-VIP and per-backend counters and states.
	Services(ctx context.Context) ([]api.ServiceInfo, error)
	// GlobalCounters gives the data plane's global counters by name.
	GlobalCounters(ctx context.Context) ([]api.Counter, error)
}

// Options configure New. Zero values take the defaults.
type Options struct {
	Addr string // DefaultAddr when ""
	Log  *slog.Logger
	// Timeout bounds the Source's calls during one scrape or health
	// request (default 5 s).
	Timeout time.Duration
	// Page, when set, is the status page (internal/statuspage), served at
	// / and the paths under it that /metrics and /healthz do not take.
	Page http.Handler
}

// Metrics is the exporter: a registry, its HTTP handler and, after Listen,
// its listener.
type Metrics struct {
	src     Source
	log     *slog.Logger
	addr    string
	timeout time.Duration
	reg     *prometheus.Registry
	l       net.Listener
	page    http.Handler

	commits    *prometheus.CounterVec
	plan       prometheus.Histogram
	apply      prometheus.Histogram
	tableBuild prometheus.Histogram
}

// durationBuckets span 100 µs to about 2.4 s (factor 2.5): plans and table
// builds are sub-millisecond to tens of ms, applies wait for RCU grace
// periods (10-60 ms each).
var durationBuckets = prometheus.ExponentialBuckets(0.0001, 2.5, 12)

// New returns an exporter over src. Nothing listens until Listen.
func New(src Source, o Options) *Metrics {
	if o.Addr == "" {
		o.Addr = DefaultAddr
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	m := &Metrics{
		src: src, log: o.Log, addr: o.Addr, timeout: o.Timeout, page: o.Page,
		reg: prometheus.NewRegistry(),
		commits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xlb_config_commits_total",
			Help: "Commits of a desired state to the data plane, by trigger (startup, reload, api, health, override) and result (ok, error).",
		}, []string{"trigger", "result"}),
		plan: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "xlb_config_plan_duration_seconds",
			Help:    "Time to plan a commit: ids, Maglev tables, map contents (no I/O).",
			Buckets: durationBuckets,
		}),
		apply: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "xlb_config_apply_duration_seconds",
			Help:    "Time to write a planned state into the BPF maps.",
			Buckets: durationBuckets,
		}),
		tableBuild: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "xlb_maglev_table_build_duration_seconds",
			Help:    "Time to populate one Maglev lookup table (paper 3.4, Pseudocode 1).",
			Buckets: durationBuckets,
		}),
	}
	m.reg.MustRegister(
		newCollector(src, o.Timeout),
		m.commits, m.plan, m.apply, m.tableBuild,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// Commit describes one commit for ObserveCommit.
type Commit struct {
	// Trigger says what caused it: "startup", "reload", "api", "health",
	// "override" (a label: keep the set small).
	Trigger string
	Plan    time.Duration // 0 when planning failed before timing it
	Apply   time.Duration // 0 when nothing was applied
	Err     error
}

// ObserveCommit records a commit (plan and apply durations, result). Safe
// for concurrent use; a nil *Metrics ignores it.
func (m *Metrics) ObserveCommit(c Commit) {
	if m == nil {
		return
	}
	result := "ok"
	if c.Err != nil {
		result = "error"
	}
	if c.Trigger == "" {
		c.Trigger = "unknown"
	}
	m.commits.WithLabelValues(c.Trigger, result).Inc()
	if c.Plan > 0 {
		m.plan.Observe(c.Plan.Seconds())
	}
	if c.Apply > 0 {
		m.apply.Observe(c.Apply.Seconds())
	}
}

// ObserveTableBuild records the time to populate one Maglev table. Safe
// for concurrent use; a nil *Metrics ignores it.
func (m *Metrics) ObserveTableBuild(d time.Duration) {
	if m == nil {
		return
	}
	m.tableBuild.Observe(d.Seconds())
}

// Handler serves /metrics and /healthz, and the status page when there is
// one.
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      errorLog{m.log},
		Timeout:       m.timeout + time.Second,
	}))
	mux.HandleFunc("GET /healthz", m.healthz)
	if m.page != nil {
		mux.Handle("GET /", m.page)
		return mux
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "xlbd: /metrics (Prometheus), /healthz (forwarder self-check); the status page is off (xlbd --status-page, node.status_page)")
	})
	return mux
}

// healthz answers 200 while the forwarder's self-check passes, 503 with the
// reason otherwise (or when xlbd cannot say).
func (m *Metrics) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), m.timeout)
	defer cancel()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	st, err := m.src.Status(ctx)
	switch {
	case err != nil:
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "xlbd status unavailable: %v\n", err)
	case !st.SelfCheck.OK:
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "forwarder self-check failing: %s\n", st.SelfCheck.LastError)
	default:
		fmt.Fprintln(w, "ok")
	}
}

// errorLog adapts slog to promhttp's logger.
type errorLog struct{ log *slog.Logger }

func (e errorLog) Println(v ...any) {
	e.log.Warn("metrics scrape", "error", strings.TrimSpace(fmt.Sprintln(v...)))
}

// Listen binds the listener (o.Addr), so that a bad address fails at
// startup.
func (m *Metrics) Listen() error {
	l, err := net.Listen("tcp", m.addr)
	if err != nil {
		return fmt.Errorf("metrics listener %s: %w (choose another: node.metrics_addr or --metrics-addr)", m.addr, err)
	}
	m.l = l
	return nil
}

// Addr returns the bound address (after Listen), else nil.
func (m *Metrics) Addr() net.Addr {
	if m.l == nil {
		return nil
	}
	return m.l.Addr()
}

// Serve serves HTTP on the listener until ctx ends, then shuts down within
// 5 s. It listens first when Listen was not called. It returns nil after
// ctx ends.
func (m *Metrics) Serve(ctx context.Context) error {
	if m.l == nil {
		if err := m.Listen(); err != nil {
			return err
		}
	}
	srv := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(m.l) }()
	m.log.Info("metrics listening", "addr", m.l.Addr(), "paths", "/metrics /healthz")
	select {
	case err := <-errc:
		return fmt.Errorf("metrics: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	if e := <-errc; !errors.Is(e, http.ErrServerClosed) && err == nil {
		err = e
	}
	return err
}

// portLabel formats a VIP port; "0" means all ports.
func portLabel(p uint16) string { return strconv.Itoa(int(p)) }
