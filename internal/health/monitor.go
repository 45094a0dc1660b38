package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/xlbproject/xlb/internal/config"
)

// Target is one thing to probe: a backend address and its check.
type Target = config.HealthTarget

// Key identifies a target: health state is kept per (address, check name).
type Key = config.HealthKey

// DefaultConcurrency is how many probes a Monitor runs at once by default.
const DefaultConcurrency = 64

// Initial says whether a target counts as healthy before its first probe
// completes (see the package documentation).
type Initial uint8

const (
	// InitialUpAtStart counts the targets of the first Update as healthy
	// and those added by later Updates as unhealthy, until their first
	// probe completes. The default.
	InitialUpAtStart Initial = iota
	// InitialDown counts every new target as unhealthy until a probe
	// succeeds: nothing gets new flows before it answered.
	InitialDown
	// InitialUp counts every new target as healthy until a probe fails.
	InitialUp
)

// Options configure a Monitor. The zero value is usable.
type Options struct {
	// Concurrency bounds the probes in flight across all targets;
	// DefaultConcurrency when 0.
	Concurrency int
	// Initial is the health of a target before its first probe completes.
	Initial Initial
	// Logger receives health transitions (Info) and first results (Debug);
	// slog.Default() when nil.
	Logger *slog.Logger
	// NewChecker builds the checker of a check; NewChecker when nil.
	NewChecker func(config.HealthCheck) (Checker, error)
}

// Status is the health state of one target.
type Status struct {
	Key Key
	// Healthy is the verdict for the data plane.
	Healthy bool
	// Known is false until a probe has completed since the target was
	// added; Healthy is then Options.Initial's.
	Known bool
	// Since is when Healthy last changed, or when the target was added.
	Since time.Time
	// LastErr is the error of the latest probe; "" when it succeeded.
	LastErr string
	// LastProbe is when the latest probe completed; zero before the first.
	LastProbe time.Time
	// Successes and Failures count the latest run of equal results (one of
	// them is 0).
	Successes, Failures int
	// Probes counts the probes completed since the target was added.
	Probes uint64
}

// Change is a transition of a target's health.
type Change struct {
	Key     Key
	Healthy bool
	// Err is the error of the probe that took the target down; "" when
	// it came up.
	Err string
	At  time.Time
}

// Monitor probes targets and keeps their health. Its methods may be called
// from any goroutine.
type Monitor struct {
	log        *slog.Logger
	initial    Initial
	newChecker func(config.HealthCheck) (Checker, error)
	sem        chan struct{}
	queue      queue
	out        chan Change

	mu      sync.Mutex
	targets map[Key]*entry
	updated bool            // Update has been called
	ctx     context.Context // Run's while it runs, else nil
	ran     bool
	wg      sync.WaitGroup // probe goroutines
}

// entry is one target's state, guarded by Monitor.mu.
type entry struct {
	target  Target
	checker Checker // nil when the check could not be built
	cancel  context.CancelFunc
	gen     uint64 // bumped when the prober is stopped or replaced
	st      Status
}

// New returns a Monitor with no targets. Probing starts with Run.
func New(opts Options) *Monitor {
	m := &Monitor{
		log:        opts.Logger,
		initial:    opts.Initial,
		newChecker: opts.NewChecker,
		sem:        make(chan struct{}, orDefault(opts.Concurrency, DefaultConcurrency)),
		out:        make(chan Change),
		targets:    map[Key]*entry{},
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	if m.newChecker == nil {
		m.newChecker = NewChecker
	}
	m.queue.init()
	return m
}

func orDefault(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

// Update makes targets the set of monitored targets (duplicates count once).
// A target that stays keeps its state; when its check's settings changed, it
// is probed with the new ones from now on, its state kept. New targets start
// unknown (see Options.Initial); removed ones stop being probed and are
// forgotten. Update may be called before Run.
//
// A target whose checker cannot be built is kept as unhealthy with that
// error and not probed; the returned error lists such targets.
func (m *Monitor) Update(targets []Target) error {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	first := !m.updated
	m.updated = true
	seen := make(map[Key]bool, len(targets))
	var errs []error
	for _, t := range targets {
		k := t.Key()
		if seen[k] {
			continue
		}
		seen[k] = true
		e, ok := m.targets[k]
		if ok && e.target.Check.Equal(&t.Check) {
			continue
		}
		chk, err := m.newChecker(t.Check)
		if ok {
			m.stop(e)
		} else {
			healthy := m.initial == InitialUp || m.initial == InitialUpAtStart && first
			e = &entry{st: Status{Key: k, Healthy: healthy, Since: now}}
			m.targets[k] = e
		}
		e.target, e.checker = t, chk
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", k, err))
			m.log.Error("health check cannot run", "target", k.String(), "error", err)
			m.setResult(e, now, err, true)
			continue
		}
		m.start(e)
	}
	for k, e := range m.targets {
		if !seen[k] {
			m.stop(e)
			delete(m.targets, k)
		}
	}
	return errors.Join(errs...)
}

// Run probes the targets until ctx is done, then stops every probe, closes
// the Changes channel and returns ctx's error. It may be called once.
func (m *Monitor) Run(ctx context.Context) error {
	m.mu.Lock()
	if m.ran {
		m.mu.Unlock()
		return errors.New("health: Monitor.Run called twice")
	}
	m.ran = true
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m.ctx = ctx
	for _, e := range m.targets {
		m.start(e)
	}
	m.mu.Unlock()

	pumped := make(chan struct{})
	go func() {
		defer close(pumped)
		m.queue.pump(ctx, m.out)
	}()
	<-ctx.Done()

	m.mu.Lock()
	m.ctx = nil
	for _, e := range m.targets {
		m.stop(e)
	}
	m.mu.Unlock()
	m.wg.Wait()
	<-pumped
	return context.Cause(ctx)
}

// Changes returns the channel of health transitions, in the order they
// happen. The Monitor never blocks on it: a consumer that falls behind gets,
// for each target, the latest transition only (the one that states its
// current health). The channel is closed when Run returns.
func (m *Monitor) Changes() <-chan Change { return m.out }

// State returns the health of the target with key k, when it last changed and
// the error of the latest probe. A target that is not monitored is reported
// unhealthy with lastErr "not monitored".
func (m *Monitor) State(k Key) (healthy bool, since time.Time, lastErr string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.targets[k]
	if !ok {
		return false, time.Time{}, "not monitored"
	}
	return e.st.Healthy, e.st.Since, e.st.LastErr
}

// Snapshot returns the state of every target at one instant.
func (m *Monitor) Snapshot() Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := make(Snapshot, len(m.targets))
	for k, e := range m.targets {
		s[k] = e.st
	}
	return s
}

// Snapshot is the state of every monitored target, by key.
type Snapshot map[Key]Status

// Healthy reports whether backend b is healthy as far as s knows, in the
// form config.DesiredService.ActivePoolWith takes: true for an unchecked
// backend (HealthCheck ""), false for a checked one s does not hold.
func (s Snapshot) Healthy(b config.Backend) bool {
	if b.HealthCheck == "" {
		return true
	}
	st, ok := s[Key{Addr: b.Addr, Check: b.HealthCheck}]
	return ok && st.Healthy
}

// start launches e's prober when the Monitor runs. m.mu is held.
func (m *Monitor) start(e *entry) {
	if m.ctx == nil || e.checker == nil {
		return
	}
	ctx, cancel := context.WithCancel(m.ctx)
	e.gen++
	e.cancel = cancel
	m.wg.Add(1)
	go m.probe(ctx, e, e.gen, e.target, e.checker)
}

// stop ends e's prober, if any, and voids the result of a probe in flight.
// m.mu is held.
func (m *Monitor) stop(e *entry) {
	e.gen++
	if e.cancel != nil {
		e.cancel()
		e.cancel = nil
	}
}

// probe is one target's loop: wait, take a concurrency slot, probe, record.
func (m *Monitor) probe(ctx context.Context, e *entry, gen uint64, t Target, chk Checker) {
	defer m.wg.Done()
	h := &t.Check
	timer := time.NewTimer(jitter(h.Interval, h.Jitter))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		start := time.Now()
		select {
		case m.sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		err := once(ctx, chk, t)
		<-m.sem
		if ctx.Err() != nil {
			return // stopped or replaced: the result is void
		}
		m.record(e, gen, err)
		timer.Reset(max(0, h.Interval-jitter(h.Interval, h.Jitter)-time.Since(start)))
	}
}

// jitter returns a random duration in [0, frac × d).
func jitter(d time.Duration, frac float64) time.Duration {
	return time.Duration(rand.Float64() * frac * float64(d))
}

// once runs one probe bounded by the check's timeout, naming a timeout as
// such rather than by the checker's error for it.
func once(ctx context.Context, chk Checker, t Target) error {
	pctx, cancel := context.WithTimeout(ctx, t.Check.Timeout)
	defer cancel()
	err := chk.Check(pctx, t.Addr)
	if err != nil && ctx.Err() == nil && errors.Is(pctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("timed out after %s", t.Check.Timeout)
	}
	return err
}

// record applies a probe's result unless the prober was stopped since.
func (m *Monitor) record(e *entry, gen uint64, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.gen != gen || m.targets[e.st.Key] != e {
		return
	}
	m.setResult(e, time.Now(), err, false)
}

// setResult updates e's state with one result and reports a transition.
// final marks a result that no probe will follow (a check that cannot be
// built): it decides at once. m.mu is held.
func (m *Monitor) setResult(e *entry, now time.Time, err error, final bool) {
	s := &e.st
	was, wasKnown := s.Healthy, s.Known
	s.Probes++
	s.LastProbe = now
	if err == nil {
		s.Successes++
		s.Failures = 0
		s.LastErr = ""
	} else {
		s.Failures++
		s.Successes = 0
		s.LastErr = err.Error()
	}
	switch h := &e.target.Check; {
	case !s.Known || final:
		s.Known = true
		s.Healthy = err == nil
	case s.Healthy && s.Failures >= h.Fall:
		s.Healthy = false
	case !s.Healthy && s.Successes >= h.Rise:
		s.Healthy = true
	}
	log := m.log.Debug
	msg := "backend health known"
	if s.Healthy != was {
		s.Since = now
		m.queue.push(Change{Key: s.Key, Healthy: s.Healthy, Err: s.LastErr, At: now})
		log, msg = m.log.Info, "backend health changed"
	} else if wasKnown {
		return
	}
	attrs := []any{"target", s.Key.String(), "healthy", s.Healthy, "was", was, "first", !wasKnown}
	if s.Healthy {
		attrs = append(attrs, "successes", s.Successes)
	} else {
		attrs = append(attrs, "failures", s.Failures, "error", s.LastErr)
	}
	log(msg, attrs...)
}
