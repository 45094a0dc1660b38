package health

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/config"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fake is a checker whose results a test scripts. It records every call and
// the number of calls in flight.
type fake struct {
	mu       sync.Mutex
	results  map[netip.Addr][]error // consumed one per call; then ok
	fail     map[netip.Addr]bool    // result once results run out
	calls    map[netip.Addr][]time.Time
	hook     func(netip.Addr, int) // called at each call with its index
	block    time.Duration         // each call waits this long (or ctx)
	hang     bool                  // each call waits for ctx
	inflight int
	maxIn    int
}

func newFake() *fake {
	return &fake{results: map[netip.Addr][]error{}, fail: map[netip.Addr]bool{}, calls: map[netip.Addr][]time.Time{}}
}

func (f *fake) Check(ctx context.Context, a netip.Addr) error {
	f.mu.Lock()
	f.calls[a] = append(f.calls[a], time.Now())
	n := len(f.calls[a])
	f.inflight++
	f.maxIn = max(f.maxIn, f.inflight)
	var err error
	if r := f.results[a]; len(r) > 0 {
		err, f.results[a] = r[0], r[1:]
	} else if f.fail[a] {
		err = errors.New("scripted failure")
	}
	hook, block, hang := f.hook, f.block, f.hang
	f.mu.Unlock()
	if hook != nil {
		hook(a, n)
	}
	switch {
	case hang:
		<-ctx.Done()
		err = ctx.Err()
	case block > 0:
		select {
		case <-time.After(block):
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	f.mu.Lock()
	f.inflight--
	f.mu.Unlock()
	return err
}

func (f *fake) count(a netip.Addr) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls[a])
}

func (f *fake) setFail(a netip.Addr, fail bool) {
	f.mu.Lock()
	f.fail[a] = fail
	f.mu.Unlock()
}

func spec(name string, interval time.Duration, rise, fall int) config.HealthCheck {
	return config.HealthCheck{
		Name: name, Type: config.CheckTCP, Port: 80,
		Interval: interval, Timeout: interval / 2, Rise: rise, Fall: fall,
	}
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func target(a string, hc config.HealthCheck) Target { return Target{Addr: addr(a), Check: hc} }

// start runs m until the test ends and returns a function that stops it and
// waits for Run to return.
func start(t *testing.T, m *Monitor) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Error("Run did not return within 5s of cancellation")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func newMonitor(f *fake, opts Options) *Monitor {
	opts.Logger = quiet
	opts.NewChecker = func(config.HealthCheck) (Checker, error) { return f, nil }
	return New(opts)
}

// next returns the next change, failing the test after timeout.
func next(t *testing.T, m *Monitor, timeout time.Duration) Change {
	t.Helper()
	select {
	case c, ok := <-m.Changes():
		if !ok {
			t.Fatal("Changes closed")
		}
		return c
	case <-time.After(timeout):
		t.Fatalf("no change within %v", timeout)
	}
	return Change{}
}

// TestRiseFall scripts a run of results and checks, at every probe, the
// state the previous results left: the first result decides, then fall
// failures take the target down and rise successes bring it back.
func TestRiseFall(t *testing.T) {
	const interval = 50 * time.Millisecond
	f := newFake()
	a := addr("10.0.0.1")
	bad := errors.New("bad")
	//                         1    2    3    4    5    6    7    8    9
	f.results[a] = []error{nil, nil, bad, bad, bad, bad, nil, nil, nil}
	wantHealthy := []bool{false, true, true, true, true, false, false, false, true}
	m := newMonitor(f, Options{Initial: InitialDown})
	k := Key{Addr: a, Check: "c"}
	seen := make(chan bool, 20)
	f.hook = func(_ netip.Addr, n int) {
		if n <= len(wantHealthy) {
			h, _, _ := m.State(k)
			seen <- h
		}
	}
	if err := m.Update([]Target{target("10.0.0.1", spec("c", interval, 2, 3))}); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	start(t, m)

	var changes []Change
	for len(changes) < 3 {
		changes = append(changes, next(t, m, 2*time.Second))
	}
	var got []bool
	for len(got) < len(wantHealthy) {
		select {
		case h := <-seen:
			got = append(got, h)
		case <-time.After(2 * time.Second):
			t.Fatalf("only %d probes", len(got))
		}
	}
	if !slices.Equal(got, wantHealthy) {
		t.Errorf("healthy at each probe = %v, want %v", got, wantHealthy)
	}
	for i, want := range []bool{true, false, true} {
		if c := changes[i]; c.Healthy != want || c.Key != k {
			t.Errorf("change %d = %+v, want healthy %v", i, c, want)
		}
	}
	if changes[1].Err != "bad" || changes[2].Err != "" {
		t.Errorf("change errors %q, %q; want the failure's, then none", changes[1].Err, changes[2].Err)
	}
	if d := time.Since(begin); d > 9*interval+2*time.Second {
		t.Errorf("9 probes took %v", d)
	}

	// Without jitter, probes start one interval apart: timers never fire
	// early, so n probes span at least n-1 intervals (less the scheduling
	// delay of the first).
	f.mu.Lock()
	calls := slices.Clone(f.calls[a])
	f.mu.Unlock()
	if span, n := calls[len(calls)-1].Sub(calls[0]), len(calls); span < time.Duration(n-1)*interval-20*time.Millisecond {
		t.Errorf("%d probes span %v, want >= %v", n, span, time.Duration(n-1)*interval)
	}
	healthy, since, lastErr := m.State(k)
	if !healthy || since.Before(begin) || lastErr != "" {
		t.Errorf("State = %v, %v, %q", healthy, since, lastErr)
	}
	st := m.Snapshot()[k]
	if !st.Known || st.Key != k || st.Probes < 8 || st.Failures != 0 || st.Successes < 2 || st.LastProbe.Before(since) {
		t.Errorf("Snapshot = %+v", st)
	}
}

// TestChangeWithinInterval checks that a transition is reported as soon as
// the probe that causes it completes, well before the next probe.
func TestChangeWithinInterval(t *testing.T) {
	const interval = 300 * time.Millisecond
	f := newFake()
	a := addr("10.0.0.1")
	m := newMonitor(f, Options{Initial: InitialUp})
	m.Update([]Target{target("10.0.0.1", spec("c", interval, 1, 1))})
	start(t, m)
	for f.count(a) == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	f.setFail(a, true)
	c := next(t, m, 2*time.Second)
	got := time.Now()
	f.mu.Lock()
	last := f.calls[a][len(f.calls[a])-1]
	f.mu.Unlock()
	if c.Healthy || got.Sub(last) >= interval {
		t.Errorf("change %+v received %v after the probe started, want down within %v", c, got.Sub(last), interval/2)
	}
}

func TestJitter(t *testing.T) {
	const d = 100 * time.Millisecond
	var lo, hi time.Duration = d, 0
	for range 10000 {
		j := jitter(d, 0.5)
		lo, hi = min(lo, j), max(hi, j)
	}
	if lo < 0 || hi >= d/2 || hi-lo < d/2*9/10 {
		t.Errorf("jitter(100ms, 0.5) ranged over [%v, %v], want about [0, 50ms)", lo, hi)
	}
	if j := jitter(d, 0); j != 0 {
		t.Errorf("jitter(100ms, 0) = %v", j)
	}
}

// TestJitteredProbes checks that probes of targets with jitter spread out
// and keep within one interval of each other on average.
func TestJitteredProbes(t *testing.T) {
	const interval = 100 * time.Millisecond
	f := newFake()
	hc := spec("c", interval, 1, 1)
	hc.Jitter = 0.5
	var targets []Target
	for _, a := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"} {
		targets = append(targets, target(a, hc))
	}
	m := newMonitor(f, Options{})
	m.Update(targets)
	stop := start(t, m)
	deadline := time.Now().Add(5 * time.Second)
	for _, tg := range targets {
		for f.count(tg.Addr) < 5 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	var firsts []time.Time
	for _, tg := range targets {
		calls := f.calls[tg.Addr]
		if len(calls) < 5 {
			t.Fatalf("%s probed %d times", tg.Addr, len(calls))
		}
		firsts = append(firsts, calls[0])
		// Periods are in [(1-jitter) × interval, interval]: the mean
		// of four is too (scheduling delays aside).
		mean := calls[4].Sub(calls[0]) / 4
		if mean < interval/2-10*time.Millisecond || mean > 2*interval {
			t.Errorf("%s: mean period %v, want in [%v, %v]", tg.Addr, mean, interval/2, interval)
		}
	}
	slices.SortFunc(firsts, time.Time.Compare)
	if firsts[0].Equal(firsts[len(firsts)-1]) {
		t.Errorf("first probes not spread: %v", firsts)
	}
}

func TestInitialPolicies(t *testing.T) {
	hc := spec("c", time.Hour, 1, 1)
	for _, tc := range []struct {
		name          string
		initial       Initial
		first, second bool // health of targets of the first and a later Update
	}{
		{"up at start", InitialUpAtStart, true, false},
		{"down", InitialDown, false, false},
		{"up", InitialUp, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMonitor(newFake(), Options{Initial: tc.initial})
			m.Update([]Target{target("10.0.0.1", hc)})
			m.Update([]Target{target("10.0.0.1", hc), target("10.0.0.2", hc)})
			s := m.Snapshot()
			a, b := s[Key{Addr: addr("10.0.0.1"), Check: "c"}], s[Key{Addr: addr("10.0.0.2"), Check: "c"}]
			if a.Healthy != tc.first || b.Healthy != tc.second || a.Known || b.Known {
				t.Errorf("first %+v, later %+v; want healthy %v, %v and unknown", a, b, tc.first, tc.second)
			}
			be := func(a string) config.Backend { return config.Backend{Addr: addr(a), HealthCheck: "c"} }
			if s.Healthy(be("10.0.0.1")) != tc.first || s.Healthy(be("10.0.0.2")) != tc.second {
				t.Error("Snapshot.Healthy disagrees with the snapshot")
			}
		})
	}
	s := Snapshot{}
	if !s.Healthy(config.Backend{Addr: addr("10.0.0.9")}) {
		t.Error("unchecked backend unhealthy")
	}
	if s.Healthy(config.Backend{Addr: addr("10.0.0.9"), HealthCheck: "c"}) {
		t.Error("unmonitored checked backend healthy")
	}
}

// TestDedupe counts probes at a real HTTP server: one backend in three pools
// of two services with one check, and with a second check, is probed once
// per interval per check.
func TestDedupe(t *testing.T) {
	const interval = 100 * time.Millisecond
	var hits [2]atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/a" {
			hits[0].Add(1)
		} else {
			hits[1].Add(1)
		}
	}))
	t.Cleanup(s.Close)
	port := serverPort(t, s)
	check := func(name, path string) config.HealthCheck {
		return config.HealthCheck{Name: name, Type: config.CheckHTTP, Port: port, Path: path, ExpectStatus: 200,
			Interval: interval, Timeout: interval / 2, Rise: 1, Fall: 1}
	}
	be := []config.Backend{{Addr: loopback, Weight: 1}}
	cfg := &config.Config{
		HealthChecks: []config.HealthCheck{check("a", "/a"), check("b", "/b")},
		Pools: []config.Pool{
			{Name: "p1", HealthCheck: "a", Backends: be},
			{Name: "p2", HealthCheck: "a", Backends: be},
			{Name: "p3", HealthCheck: "a", Backends: be},
			{Name: "p4", HealthCheck: "b", Backends: be},
		},
		Services: []config.Service{
			{Name: "s1", Pools: []string{"p1", "p2"}},
			{Name: "s2", Pools: []string{"p3", "p4", "p1"}},
		},
	}
	targets := cfg.Desired().HealthTargets()
	if len(targets) != 2 {
		t.Fatalf("HealthTargets() = %v, want one per check", targets)
	}
	m := New(Options{Logger: quiet})
	// Duplicates passed to Update count once too.
	if err := m.Update(append(targets, targets...)); err != nil {
		t.Fatal(err)
	}
	if n := len(m.Snapshot()); n != 2 {
		t.Fatalf("monitoring %d targets, want 2", n)
	}
	stop := start(t, m)
	const window = 10 * interval
	time.Sleep(window)
	stop()
	for i := range hits {
		// One probe per interval: about 10; far from 30 for check a.
		if n := hits[i].Load(); n < 3 || n > int64(window/interval)+2 {
			t.Errorf("check %c: %d probes in %v, want about %d", 'a'+i, n, window, window/interval)
		}
	}
	for _, tg := range targets {
		if h, _, err := m.State(tg.Key()); !h {
			t.Errorf("%v unhealthy: %s", tg.Key(), err)
		}
	}
}

func TestConcurrencyBound(t *testing.T) {
	f := newFake()
	f.block = 60 * time.Millisecond
	hc := spec("c", 100*time.Millisecond, 1, 1)
	var targets []Target
	for i := 1; i <= 12; i++ {
		targets = append(targets, Target{Addr: netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), Check: hc})
	}
	m := newMonitor(f, Options{Concurrency: 3})
	m.Update(targets)
	stop := start(t, m)
	deadline := time.Now().Add(5 * time.Second)
	for _, tg := range targets {
		for f.count(tg.Addr) < 2 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.maxIn != 3 {
		t.Errorf("at most %d probes in flight, want exactly the bound 3", f.maxIn)
	}
	for _, tg := range targets {
		if len(f.calls[tg.Addr]) < 2 {
			t.Errorf("%s probed %d times", tg.Addr, len(f.calls[tg.Addr]))
		}
	}
}

func TestUpdateKeepsState(t *testing.T) {
	const interval = 50 * time.Millisecond
	f := newFake()
	a, b := addr("10.0.0.1"), addr("10.0.0.2")
	hc := spec("c", interval, 1, 2)
	m := newMonitor(f, Options{Initial: InitialDown})
	m.Update([]Target{{Addr: a, Check: hc}})
	start(t, m)
	ka, kb := Key{Addr: a, Check: "c"}, Key{Addr: b, Check: "c"}
	if c := next(t, m, 2*time.Second); c.Key != ka || !c.Healthy {
		t.Fatalf("change %+v", c)
	}
	before := m.Snapshot()[ka]

	// Adding b leaves a alone.
	m.Update([]Target{{Addr: a, Check: hc}, {Addr: b, Check: hc}})
	s := m.Snapshot()
	if got := s[ka]; !got.Healthy || !got.Known || !got.Since.Equal(before.Since) || got.Probes < before.Probes {
		t.Errorf("a after adding b = %+v, was %+v", got, before)
	}
	if got := s[kb]; got.Healthy || got.Known {
		t.Errorf("new target b = %+v, want unknown and unhealthy", got)
	}

	// Changing the check's settings keeps a's state; a failure now needs
	// fall (2) results to take it down, as before.
	hc2 := hc
	hc2.Timeout = interval / 4
	m.Update([]Target{{Addr: a, Check: hc2}, {Addr: b, Check: hc2}})
	if got := m.Snapshot()[ka]; !got.Healthy || !got.Since.Equal(before.Since) {
		t.Errorf("a after a settings change = %+v", got)
	}
	n0 := f.count(a)
	f.setFail(a, true)
	for {
		c := next(t, m, 2*time.Second)
		if c.Key == ka {
			if c.Healthy || f.count(a)-n0 < 2 {
				t.Errorf("a: change %+v after %d failing probes, want down after 2", c, f.count(a)-n0)
			}
			break
		}
	}

	// Removing a stops its probes and forgets it.
	m.Update([]Target{{Addr: b, Check: hc2}})
	if h, _, err := m.State(ka); h || err != "not monitored" {
		t.Errorf("State(removed) = %v, %q", h, err)
	}
	n := f.count(a)
	time.Sleep(3 * interval)
	if got := f.count(a); got > n+1 { // one probe may have been in flight
		t.Errorf("removed target probed %d more times", got-n)
	}
	if got := f.count(b); got == 0 {
		t.Error("b never probed")
	}
}

func TestUpdateReportsBadCheck(t *testing.T) {
	m := New(Options{Logger: quiet, Initial: InitialUp})
	bad := config.HealthCheck{Name: "x", Type: config.CheckExec, Interval: time.Second, Timeout: time.Millisecond, Rise: 1, Fall: 1}
	err := m.Update([]Target{{Addr: addr("10.0.0.1"), Check: bad}})
	if err == nil {
		t.Fatal("Update accepted an exec check without command")
	}
	h, _, lastErr := m.State(Key{Addr: addr("10.0.0.1"), Check: "x"})
	if h || lastErr == "" {
		t.Errorf("State = %v, %q; want unhealthy with the error", h, lastErr)
	}
}

func TestCancellation(t *testing.T) {
	f := newFake()
	f.hang = true
	hc := spec("c", 100*time.Millisecond, 1, 1)
	hc.Timeout = 90 * time.Millisecond
	m := newMonitor(f, Options{})
	m.Update([]Target{target("10.0.0.1", hc), target("10.0.0.2", hc)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	for f.count(addr("10.0.0.1")) == 0 || f.count(addr("10.0.0.2")) == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Run did not return after cancellation")
	}
	f.mu.Lock()
	inflight := f.inflight
	f.mu.Unlock()
	if inflight != 0 {
		t.Errorf("%d probes still running after Run returned", inflight)
	}
	for range m.Changes() { // closed: the loop ends
	}
	if err := m.Run(context.Background()); err == nil {
		t.Error("second Run succeeded")
	}
	// Update after Run starts nothing and does not block.
	m.Update([]Target{target("10.0.0.3", hc)})
}

// TestTimeoutNamed checks that a probe cut by the timeout says so.
func TestTimeoutNamed(t *testing.T) {
	f := newFake()
	f.hang = true
	hc := spec("c", 100*time.Millisecond, 1, 1)
	hc.Timeout = 20 * time.Millisecond
	m := newMonitor(f, Options{Initial: InitialUp})
	m.Update([]Target{target("10.0.0.1", hc)})
	start(t, m)
	c := next(t, m, 2*time.Second)
	if c.Healthy || c.Err != "timed out after 20ms" {
		t.Errorf("change %+v, want down with a timeout", c)
	}
}

// TestSlowConsumer checks that probing goes on while nobody reads Changes,
// and that the consumer then learns each target's latest health.
func TestSlowConsumer(t *testing.T) {
	const interval = 100 * time.Millisecond
	f := newFake()
	a := addr("10.0.0.1")
	m := newMonitor(f, Options{Initial: InitialDown})
	m.Update([]Target{target("10.0.0.1", spec("c", interval, 1, 1))})
	start(t, m)
	// Flip the target several times without reading Changes.
	for i := range 4 {
		f.setFail(a, i%2 == 0)
		n := f.count(a)
		for f.count(a) < n+2 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	f.setFail(a, false)
	n := f.count(a)
	for f.count(a) < n+2 {
		time.Sleep(5 * time.Millisecond)
	}
	// The pump holds at most the change it is trying to deliver plus the
	// latest per target; the last one received states the current health.
	var last Change
	for {
		select {
		case c := <-m.Changes():
			last = c
			continue
		case <-time.After(3 * interval):
		}
		break
	}
	if !last.Healthy {
		t.Errorf("last change %+v, want healthy", last)
	}
	if h, _, _ := m.State(Key{Addr: a, Check: "c"}); !h {
		t.Error("State unhealthy")
	}
}
