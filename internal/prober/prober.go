// Package prober is the blackbox prober: at every interval it sends one
// real probe to each VIP through the live forwarder and the interface's
// real transmit path (datapath.SendProbe), from a node address, and waits
// for the backend's answer, which direct server return sends straight to
// that address. A node whose probes all go unanswered for FailRounds
// rounds in a row cannot deliver: the controller withdraws its VIPs.
package prober

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/state"
)

// Defaults of Options.
const (
	DefaultInterval   = time.Second
	DefaultFailRounds = 2
)

// Options configure New.
type Options struct {
	// Send sends a probe flow through the forwarder and returns its
	// verdict (datapath.SendProbe).
	Send func(packet.Flow) (uint32, error)
	// Src4 and Src6 are the node's addresses, the probes' sources.
	Src4, Src6 netip.Addr
	Interval   time.Duration // default DefaultInterval
	// Timeout is how long a probe's answer is awaited (default half the
	// interval).
	Timeout    time.Duration
	FailRounds int // default DefaultFailRounds
	Log        *slog.Logger
}

// Result is the last probe of one VIP.
type Result struct {
	VIP       state.VIPKey
	Up        bool
	Latency   time.Duration // of the answered probe
	Err       string        // why the probe failed
	CheckedAt time.Time
}

// Status is the prober's last round.
type Status struct {
	// OK is false once every probe went unanswered in FailRounds rounds
	// in a row.
	OK      bool
	Results []Result // by VIP
}

// Prober probes the VIPs it is given. Its methods are safe for
// concurrent use.
type Prober struct {
	o       Options
	mu      sync.Mutex
	targets []state.VIPKey
	status  Status
	failed  int           // rounds in a row without any answer
	changes chan struct{} // a verdict changed (buffered, 1)
}

// New returns a prober; Run starts it.
func New(o Options) *Prober {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Timeout <= 0 {
		o.Timeout = o.Interval / 2
	}
	if o.FailRounds <= 0 {
		o.FailRounds = DefaultFailRounds
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Prober{o: o, status: Status{OK: true}, changes: make(chan struct{}, 1)}
}

// Changes is signalled when the node's verdict (Status.OK) changes, so
// the controller need not wait for its next self-check.
func (p *Prober) Changes() <-chan struct{} { return p.changes }

// SetTargets makes keys the VIPs probed from the next round on.
func (p *Prober) SetTargets(keys []state.VIPKey) {
	keys = slices.Clone(keys)
	slices.SortFunc(keys, state.VIPKey.Compare)
	p.mu.Lock()
	p.targets = keys
	p.mu.Unlock()
}

// Status returns the last round's results.
func (p *Prober) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Status{OK: p.status.OK, Results: slices.Clone(p.status.Results)}
}

// Run probes every interval until ctx ends.
func (p *Prober) Run(ctx context.Context) {
	t := time.NewTicker(p.o.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.Round(ctx)
		}
	}
}

// Round probes every target once, at the same time, and records the
// results.
func (p *Prober) Round(ctx context.Context) Status {
	p.mu.Lock()
	targets := p.targets
	p.mu.Unlock()
	results := make([]Result, len(targets))
	var wg sync.WaitGroup
	for i, k := range targets {
		wg.Go(func() { results[i] = p.probe(ctx, k) })
	}
	wg.Wait()
	return p.record(results)
}

// record keeps a round's results and judges the node.
func (p *Prober) record(results []Result) Status {
	answered := len(results) == 0
	for _, r := range results {
		answered = answered || r.Up
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if answered {
		p.failed = 0
	} else {
		p.failed++
	}
	ok := p.failed < p.o.FailRounds
	if ok != p.status.OK {
		select {
		case p.changes <- struct{}{}:
		default:
		}
		if ok {
			p.o.Log.Info("prober: VIPs answer again")
		} else {
			p.o.Log.Error("prober: no VIP answered its probes: this node does not deliver", "rounds", p.failed)
		}
	}
	p.status = Status{OK: ok, Results: results}
	return p.status
}
