package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/testenv"
	"github.com/xlbproject/xlb/lab"
)

// The soak: two nodes with connection sync run xlbd-variant (its forwarder
// reads a clock offset the test advances, bpf/xlb_variant.c) under mixed
// traffic for XLB_SOAK (make soak: an hour; unset: the short run of make
// test), while the config changes, a backend's health flaps and the
// daemons restart, and the data plane's clock passes the 16-bit conntrack
// stamp's wrap at least twice. Then it checks what docs/ARCHITECTURE.md
// ("The soak") promises and writes its samples and plot to bench/out/soak.

// soakPlan is the pace of one soak run.
type soakPlan struct {
	short                                          bool
	run                                            time.Duration // traffic
	cfgEvery, flapEvery, flapFor, restartEvery     time.Duration
	sampleEvery                                    time.Duration
	ticksPerSec, drainTicksPerSec                  float64 // the test clock's pace
	sessions, udpFlows                             int
	httpPause, udpChurnPause, sessionEvery, udpGap time.Duration
}

// soakWrap is the conntrack stamp's period in ticks (16 bits).
const soakWrap = 1 << 16

func soakPlanFor(t *testing.T) soakPlan {
	p := soakPlan{short: true, run: 45 * time.Second, cfgEvery: 3 * time.Second, flapEvery: 15 * time.Second,
		flapFor: 3 * time.Second, restartEvery: 14 * time.Second, sampleEvery: time.Second}
	if s := os.Getenv("XLB_SOAK"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < time.Minute {
			t.Fatalf("XLB_SOAK=%q: want a duration of a minute or more", s)
		}
		p = soakPlan{run: d, cfgEvery: 10 * time.Second, flapEvery: time.Minute, flapFor: 5 * time.Second,
			restartEvery: 2 * time.Minute, sampleEvery: 5 * time.Second}
	}
	// 2.25 wraps within the traffic, and at least 2 per 10 minutes.
	p.ticksPerSec = max(2.25*soakWrap/p.run.Seconds(), 2*soakWrap/600.0)
	// Once traffic stops nothing live is left to keep: fast, yet a sweep
	// (every second) still sees every entry before its stamp wraps.
	p.drainTicksPerSec = 25000
	p.sessions, p.udpFlows = 20, 16
	p.sessionEvery, p.udpGap = 200*time.Millisecond, 200*time.Millisecond
	p.httpPause, p.udpChurnPause = 50*time.Millisecond, 100*time.Millisecond
	return p
}

// soakUDPTimeout is the config's UDP timeout (soakConfig).
const soakUDPTimeout = 30 * time.Minute

// udpTimeoutReal is soakUDPTimeout in real time while traffic runs.
func (p soakPlan) udpTimeoutReal() time.Duration {
	ticks := soakUDPTimeout.Seconds() / (1 << 28 / 1e9)
	return time.Duration(ticks / p.ticksPerSec * float64(time.Second))
}

// soakServiceEdits: web4 is wlc and persistent (templates), web6 lblc
// (lblc entries); echo4 and udp4 keep Maglev.
var soakServiceEdits = map[string]string{
	"web4": ", scheduler: wlc, persistence: {timeout: 1800s}",
	"web6": ", scheduler: lblc",
}

// soakConfig is node i's config: sync, HTTP health checks, timeouts far
// above the clock's steps and xlbd-variant's lead (the forwarder's 2 h TCP
// timeout is 8 s of the short run's clock), backend 3's weight w3.
func soakConfig(l *lab.Lab, i, w3 int) string {
	cfg := string(l.XLBDConfig(i, lab.XLBDOptions{Sync: true, Weights: []int{1, 1, w3}}))
	cfg = strings.Replace(cfg, "  conntrack_entries:", "  timeouts: {tcp: 2h, tcp_syn: 10m, tcp_fin: 10m, udp: 30m}\n  conntrack_entries:", 1)
	cfg = withHTTPCheck(cfg)
	lines := strings.Split(cfg, "\n")
	for k, line := range lines {
		for name, edit := range soakServiceEdits {
			if strings.Contains(line, "{name: "+name+",") {
				lines[k] = strings.TrimSuffix(line, "}") + edit + "}"
			}
		}
	}
	return strings.Join(lines, "\n")
}

// soakLab is the lab and its two daemons, which restarts replace.
type soakLab struct {
	*lab.Lab
	bin     string
	configs []string
	mu      sync.Mutex
	daemons []*lab.Daemon
	reloads []int // SIGHUPs sent to each node's current daemon
}

func (s *soakLab) daemon(i int) *lab.Daemon {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.daemons[i]
}

func (s *soakLab) pinDir(i int) string { return filepath.Join(datapath.BPFFSRoot, s.NodeName(i)) }

// writeConfigs writes both nodes' configs with backend 3's weight w3.
func (s *soakLab) writeConfigs(t *testing.T, w3 int) {
	t.Helper()
	for i := range s.configs {
		if err := os.WriteFile(s.configs[i], []byte(soakConfig(s.Lab, i, w3)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// start starts node i's daemon and waits for its first commit.
func (s *soakLab) start(ctx context.Context, t *testing.T, i int) time.Duration {
	t.Helper()
	begin := time.Now()
	d, err := s.StartXLBDBinary(ctx, i, s.configs[i], s.bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.WaitOutput(ctx, "config committed", 1, 30*time.Second); err != nil {
		t.Fatalf("xlbd on node %d did not come up: %v\n%s", i, err, d.Output())
	}
	s.mu.Lock()
	s.daemons[i], s.reloads[i] = d, 0
	s.mu.Unlock()
	return time.Since(begin)
}

// reload sends node i's daemon SIGHUP.
func (s *soakLab) reload(i int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reloads[i]++
	return s.daemons[i].Reload()
}

// checkCommitted: every reload of each node's current daemon was
// committed (its xlb_config_generation counts its first commit and each
// one since; health changes do not commit), none rejected.
func (s *soakLab) checkCommitted(t *testing.T) {
	t.Helper()
	for i := range s.daemons {
		s.mu.Lock()
		want, out := s.reloads[i]+1, s.daemons[i].Output()
		s.mu.Unlock()
		var got int64
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			if m, err := scrapeAll(s.Lab, i, "xlb_config_generation"); err == nil {
				if got = m["xlb_config_generation"]; got >= int64(want) {
					break
				}
			}
		}
		if got < int64(want) {
			t.Errorf("n%d: %d commits for %d reloads since its start", i+1, got, want-1)
		}
		if strings.Contains(out, "reload rejected") {
			t.Errorf("n%d rejected a reload:\n%s", i+1, out)
		}
	}
}

// restart stops node i's daemon (SIGTERM: the pinned forwarder carries
// on) and starts it again, and reloads it as soon as it committed, while
// it may still wait for its peer's bulk copy (a SIGHUP there once killed
// xlbd: it must be queued for the controller).
func (s *soakLab) restart(ctx context.Context, t *testing.T, i int) time.Duration {
	t.Helper()
	begin := time.Now()
	if err := s.daemon(i).Stop(); err != nil {
		t.Fatalf("stop xlbd on node %d: %v", i, err)
	}
	s.start(ctx, t, i)
	if err := s.reload(i); err != nil {
		t.Errorf("reload node %d right after its start: %v", i, err)
	}
	return time.Since(begin)
}

func newSoakLab(ctx context.Context, t *testing.T) *soakLab {
	t.Helper()
	testenv.RequireNetns(t)
	testenv.RequireCommands(t, "nsenter", "ip")
	l := newLab(ctx, t, lab.Config{Nodes: 2, Backends: 3})
	s := &soakLab{Lab: l, bin: buildVariantXLBD(t), configs: make([]string, 2), daemons: make([]*lab.Daemon, 2),
		reloads: make([]int, 2)}
	for i := range s.configs {
		s.configs[i] = filepath.Join(l.Dir, fmt.Sprintf("xlbd-soak-%d.yaml", i))
	}
	s.writeConfigs(t, 1)
	for i := range s.daemons {
		s.start(ctx, t, i)
	}
	web := netip.AddrPortFrom(l.VIP4(), lab.DefaultPorts.HTTP)
	if err := l.WaitForwarding(ctx, web, 20*time.Second, s.daemons...); err != nil {
		t.Fatal(err)
	}
	for i := range s.daemons {
		waitLog(t, s.daemons[i], "connection sync running", 10*time.Second)
	}
	return s
}

// TestSoak runs the soak (see the top of this file); XLB_SOAK=1h is make
// soak's. The short run takes about 80 s.
func TestSoak(t *testing.T) {
	began := time.Now()
	p := soakPlanFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), p.run+5*time.Minute)
	defer cancel()
	s := newSoakLab(ctx, t)
	clk, err := startTestClock(ctx, s, p.ticksPerSec)
	if err != nil {
		t.Fatal(err)
	}
	defer clk.stop()
	rec := newSoakRecorder(s, p, clk)
	go rec.sample(ctx)
	base := rec.counters(t)
	tr := startSoakTraffic(ctx, t, s, p)
	ev := runSoakEvents(ctx, t, s, p, clk, rec)
	runTicks := clk.ticks()
	res := tr.stop()
	time.Sleep(2 * time.Second) // the last FINs and echoes
	end := rec.counters(t)
	rec.setPhase("drain")
	clk.setPace(p.drainTicksPerSec)
	drained, drainErr := rec.waitDrained(ctx, 90*time.Second)
	rec.stop()
	br := checkSoakBreaks(t, res, ev)
	sum := soakSummary{Plan: p.describe(), Events: ev, RunTicks: runTicks, Wraps: float64(runTicks) / soakWrap,
		Traffic: res.describe(), Breaks: br, Counters: checkSoakCounters(t, base, end, res, br, len(ev.Flaps)), Drain: drained}
	if drainErr != nil {
		t.Errorf("after traffic stopped: %v", drainErr)
	}
	if runTicks < 2*soakWrap {
		t.Errorf("the data plane's clock moved %d ticks during the traffic: fewer than two wraps (%d)", runTicks, 2*soakWrap)
	}
	sum.Bounds = rec.checkBounds(t)
	out := soakOutDir()
	if err := rec.write(out, &sum); err != nil {
		t.Errorf("write the soak's outputs: %v", err)
	}
	sum.WallSeconds = time.Since(began).Seconds()
	t.Logf("soak: %s", sum.oneLine())
	t.Logf("samples and plot in %s", out)
}
