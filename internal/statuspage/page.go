// Package statuspage is xlbd's live status page (docs/OPERATIONS.md, Status
// page): served at / of the metrics listener when enabled (xlbd
// --status-page or node.status_page), read-only, with no asset from outside
// the binary.
//
// A sampler reads the node's status, its services with their rates and the
// global counters once a second, through the same API calls and in the
// same JSON form as xlbctl -o json (api.JSONOptions), and keeps the last
// minutes of each service's rates for the page's charts. The page polls
// /status.json and draws everything itself.
package statuspage

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/xlbproject/xlb/api/xlb/v1"
	"github.com/xlbproject/xlb/internal/api"
)

// Source is what the sampler calls: a subset of the API's service
// (api.NewService).
type Source interface {
	Status(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error)
	ListServices(context.Context, *pb.ListServicesRequest) (*pb.ListServicesResponse, error)
	Counters(context.Context, *pb.CountersRequest) (*pb.CountersResponse, error)
	ConntrackDump(context.Context, *pb.ConntrackDumpRequest) (*pb.ConntrackDumpResponse, error)
}

// Defaults of Options.
const (
	DefaultInterval = time.Second
	DefaultHistory  = 5 * time.Minute
)

// Options configure New. Zero values take the defaults.
type Options struct {
	// Interval is the sampling period, and the interval rates are measured
	// over.
	Interval time.Duration
	// History is how far back the charts go.
	History time.Duration
	// ConnInterval is how often the connection table is counted
	// (DefaultConnInterval).
	ConnInterval time.Duration
	Log          *slog.Logger
}

// Snapshot is /status.json: the three API responses, each exactly as
// `xlbctl -o json status`, `xlbctl -o json services --rate` and
// `xlbctl -o json stats --watch` print it, and the charts' history.
type Snapshot struct {
	Status   json.RawMessage `json:"status"`
	Services json.RawMessage `json:"services"`
	Counters json.RawMessage `json:"counters"`
	History  History         `json:"history"`
	// Connections is the last count of the connection table; null until
	// the first.
	Connections *Connections `json:"connections"`
	// Error says why the last sample failed (the parts above are then
	// from the last one that did not); "" when it did not.
	Error string `json:"error"`
	// SampledAt is when the parts above were read.
	SampledAt time.Time `json:"sampled_at"`
}

//go:embed web
var webFS embed.FS

// Page is the status page: its sampler and its HTTP handler.
type Page struct {
	src   Source
	o     Options
	mu    sync.Mutex
	snap  Snapshot
	hist  *history
	conns *Connections // the last count
}

// New returns a page over src; nothing is sampled until Run.
func New(src Source, o Options) *Page {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.History <= 0 {
		o.History = DefaultHistory
	}
	if o.ConnInterval <= 0 {
		o.ConnInterval = DefaultConnInterval
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Page{src: src, o: o, hist: newHistory(o.History), snap: Snapshot{Error: "no sample yet"}}
}

// Run samples until ctx ends. Each round takes one Interval (the rates are
// measured over it); the connection table is counted alongside.
func (p *Page) Run(ctx context.Context) {
	done := make(chan struct{})
	go func() { p.countConnections(ctx); close(done) }()
	defer func() { <-done }()
	failing, sampled := false, false
	for ctx.Err() == nil {
		start := time.Now()
		err := p.sample(ctx)
		sampled = sampled || err == nil
		if err != nil && ctx.Err() == nil {
			switch {
			case !sampled:
				// xlbd is starting: its controller is not there yet.
				p.o.Log.Debug("status page: no sample yet", "error", err)
			case !failing:
				p.o.Log.Warn("status page: sample failed", "error", err)
			}
			p.mu.Lock()
			p.snap.Error = err.Error()
			p.mu.Unlock()
			// A failed call may return at once: keep the period.
			select {
			case <-ctx.Done():
			case <-time.After(time.Until(start.Add(p.o.Interval))):
			}
		}
		failing = err != nil
	}
}

// sample reads the services and counters with rates over one interval (the
// two calls run side by side), then the status, and stores the snapshot.
func (p *Page) sample(ctx context.Context) error {
	iv := durationpb.New(p.o.Interval)
	var (
		ctrs *pb.CountersResponse
		cerr error
		wg   sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctrs, cerr = p.src.Counters(ctx, &pb.CountersRequest{RateInterval: iv})
	}()
	svcs, serr := p.src.ListServices(ctx, &pb.ListServicesRequest{RateInterval: iv})
	wg.Wait()
	if serr != nil {
		return serr
	}
	if cerr != nil {
		return cerr
	}
	st, err := p.src.Status(ctx, &pb.StatusRequest{})
	if err != nil {
		return err
	}
	var snap Snapshot
	for _, part := range []struct {
		m   proto.Message
		dst *json.RawMessage
	}{{st, &snap.Status}, {svcs, &snap.Services}, {ctrs, &snap.Counters}} {
		b, err := api.JSONOptions.Marshal(part.m)
		if err != nil {
			return err
		}
		*part.dst = b
	}
	snap.SampledAt = time.Now().UTC()
	if s := svcs.GetSample().GetAt(); s != nil {
		snap.SampledAt = s.AsTime()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hist.add(snap.SampledAt, svcs.GetServices())
	snap.History = p.hist.export()
	p.snap = snap
	return nil
}

// Snapshot returns the last snapshot with the last count of the
// connection table.
func (p *Page) Snapshot() Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.snap
	s.Connections = p.conns
	return s
}

// Handler serves the page: GET / (the page), /status/* (its script and
// style sheet) and /status.json. Mount it on those paths.
func (p *Page) Handler() http.Handler {
	web, _ := fs.Sub(webFS, "web")
	mux := http.NewServeMux()
	files := http.FileServerFS(web)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		setHeaders(w)
		http.ServeFileFS(w, r, web, "index.html")
	})
	mux.Handle("GET /status/", http.StripPrefix("/status", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") { // no listing
			http.NotFound(w, r)
			return
		}
		setHeaders(w)
		files.ServeHTTP(w, r)
	})))
	mux.HandleFunc("GET /status.json", p.serveJSON)
	return mux
}

// setHeaders: nothing from elsewhere may load (the page has no external
// asset, and says so to the browser), and nothing is cached.
func setHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
}

func (p *Page) serveJSON(w http.ResponseWriter, r *http.Request) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(p.Snapshot()); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	setHeaders(w)
	w.Header().Set("Content-Type", "application/json")
	w.Write(buf.Bytes())
}
