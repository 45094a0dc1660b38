package e2e

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/datapath"
)

// testClock advances the offset of both nodes' forwarder clocks
// (datapath.TestClockMap, pinned: it outlives the daemons' restarts) every
// clockStep at a pace in ticks per second. A step is a few ticks: far
// under XLB_CT_AHEAD, which is what a sweep tolerates between its clock
// read and its run (xlbd-variant adds a lead of its own).
type testClock struct {
	maps   []*ebpf.Map
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	pace   float64 // ticks per second
	off    float64 // ns
	err    error
}

const clockStep = 5 * time.Millisecond

func startTestClock(ctx context.Context, s *soakLab, pace float64) (*testClock, error) {
	c := &testClock{pace: pace, done: make(chan struct{})}
	for i := range s.daemons {
		m, err := ebpf.LoadPinnedMap(filepath.Join(s.pinDir(i), datapath.TestClockMap), nil)
		if err != nil {
			c.close()
			return nil, fmt.Errorf("node %d's test clock (is %s the variant build?): %w", i, s.bin, err)
		}
		c.maps = append(c.maps, m)
	}
	ctx, c.cancel = context.WithCancel(ctx)
	go c.run(ctx)
	return c, nil
}

func (c *testClock) run(ctx context.Context) {
	defer close(c.done)
	t := time.NewTicker(clockStep)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			c.mu.Lock()
			c.off += c.pace * now.Sub(last).Seconds() * (1 << 28)
			off := uint64(c.off)
			c.mu.Unlock()
			last = now
			for _, m := range c.maps {
				if err := m.Update(uint32(0), off, ebpf.UpdateAny); err != nil {
					c.mu.Lock()
					c.err = err
					c.mu.Unlock()
				}
			}
		}
	}
}

// ticks is how far the clock was advanced, in conntrack ticks.
func (c *testClock) ticks() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return uint64(c.off / (1 << 28))
}

func (c *testClock) lastErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *testClock) setPace(p float64) {
	c.mu.Lock()
	c.pace = p
	c.mu.Unlock()
}

func (c *testClock) stop() error {
	if c.cancel != nil {
		c.cancel()
		<-c.done
		c.cancel = nil
	}
	c.close()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *testClock) close() {
	for _, m := range c.maps {
		m.Close()
	}
	c.maps = nil
}

// soakEvents is what happened to the nodes and backends during the traffic.
type soakEvents struct {
	ConfigChanges int
	Flaps         []flapWindow
	Restarts      []string // "n1 1.9s"
	ClockErr      string   `json:",omitempty"`
}

// flapWindow is a health flap of the flapped backend: its check failed
// from Down to Up; Until is Up plus the time a check takes to notice.
type flapWindow struct {
	Down, Up, Until time.Time
}

// soakFlapped is the backend whose health flaps (its sessions may break).
const soakFlapped = 1

func (e *soakEvents) inFlap(at time.Time) bool {
	for _, f := range e.Flaps {
		if !at.Before(f.Down) && !at.After(f.Until) {
			return true
		}
	}
	return false
}

// runSoakEvents runs the traffic phase's events until p.run has passed:
// config changes (backend 3's weight 1 <-> 2 on both nodes, SIGHUP), a
// health flap of backend 2 (its HTTP check answers 503 for p.flapFor),
// and restarts of the nodes' daemons in turn.
func runSoakEvents(ctx context.Context, t *testing.T, s *soakLab, p soakPlan, clk *testClock, rec *soakRecorder) soakEvents {
	t.Helper()
	var ev soakEvents
	start := time.Now()
	nextCfg, nextFlap, nextRestart := start.Add(p.cfgEvery), start.Add(p.flapEvery/2), start.Add(p.restartEvery/2)
	var up time.Time
	w3, node := 1, 0
	flapped := s.Servers()[soakFlapped]
	for now := time.Now(); now.Sub(start) < p.run; now = time.Now() {
		switch {
		case !up.IsZero() && now.After(up):
			flapped.SetHTTPStatus(200)
			f := &ev.Flaps[len(ev.Flaps)-1]
			f.Up, f.Until = now, now.Add(2*time.Second)
			up = time.Time{}
		case now.After(nextFlap):
			flapped.SetHTTPStatus(503)
			ev.Flaps = append(ev.Flaps, flapWindow{Down: now, Until: now.Add(p.flapFor + 2*time.Second)})
			up, nextFlap = now.Add(p.flapFor), now.Add(p.flapEvery)
			rec.mark(fmt.Sprintf("flap b%d", soakFlapped+1))
		case now.After(nextCfg):
			w3 = 3 - w3
			s.writeConfigs(t, w3)
			for i := range s.daemons {
				if err := s.reload(i); err != nil {
					t.Errorf("reload node %d: %v", i, err)
				}
			}
			ev.ConfigChanges++
			nextCfg = now.Add(p.cfgEvery)
		case now.After(nextRestart):
			rec.mark(fmt.Sprintf("restart n%d", node+1))
			took := s.restart(ctx, t, node)
			ev.Restarts = append(ev.Restarts, fmt.Sprintf("n%d %s", node+1, took.Round(100*time.Millisecond)))
			node, nextRestart = 1-node, time.Now().Add(p.restartEvery)
		default:
			time.Sleep(50 * time.Millisecond)
		}
	}
	if !up.IsZero() {
		flapped.SetHTTPStatus(200)
		f := &ev.Flaps[len(ev.Flaps)-1]
		f.Up, f.Until = time.Now(), time.Now().Add(2*time.Second)
	}
	s.checkCommitted(t)
	if err := clk.lastErr(); err != nil {
		ev.ClockErr = err.Error()
		t.Errorf("advance the test clock: %v", err)
	}
	return ev
}

// describe is the plan in words, for the summary.
func (p soakPlan) describe() string {
	speed := p.ticksPerSec * math.Exp2(28) / 1e9
	return fmt.Sprintf("%v of traffic (%d TCP sessions, %d UDP flows, HTTP and UDP churn), config change every %v, flap every %v for %v, restart every %v; clock %.0f ticks/s (%.0fx), drain %.0f ticks/s",
		p.run, p.sessions, p.udpFlows, p.cfgEvery, p.flapEvery, p.flapFor, p.restartEvery, p.ticksPerSec, speed, p.drainTicksPerSec)
}
