package e2e

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/lab"
)

// soakSample is one node's state at one moment: xlbd's resident memory,
// the live conntrack entries and persistence templates its last sweep
// counted (its metrics), the lblc entries in its pinned map (the sweep
// deletes the expired ones), and the test clock's advance.
type soakSample struct {
	T         float64 // seconds since the recorder started
	Phase     string  // "run" or "drain"
	Node      int
	RSSKiB    int64 // -1: no daemon at that moment (restart)
	CT        int64 // -1: not read
	Templates int64
	LBLC      int64
	Ticks     uint64
}

type soakRecorder struct {
	s       *soakLab
	p       soakPlan
	clk     *testClock
	start   time.Time
	mu      sync.Mutex
	phase   string
	samples []soakSample
	marks   []string
	stopped chan struct{}
	done    chan struct{}
}

func newSoakRecorder(s *soakLab, p soakPlan, clk *testClock) *soakRecorder {
	return &soakRecorder{s: s, p: p, clk: clk, start: time.Now(), phase: "run", stopped: make(chan struct{}), done: make(chan struct{})}
}

func (r *soakRecorder) setPhase(p string) {
	r.mu.Lock()
	r.phase = p
	r.mu.Unlock()
}

// mark notes an event at the current time (in the summary).
func (r *soakRecorder) mark(what string) {
	r.mu.Lock()
	r.marks = append(r.marks, fmt.Sprintf("%.1fs %s", time.Since(r.start).Seconds(), what))
	r.mu.Unlock()
}

func (r *soakRecorder) sample(ctx context.Context) {
	defer close(r.done)
	t := time.NewTicker(r.p.sampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.stopped:
			return
		case <-t.C:
		}
		for i := range r.s.daemons {
			smp := r.read(i)
			r.mu.Lock()
			smp.Phase = r.phase
			r.samples = append(r.samples, smp)
			r.mu.Unlock()
		}
	}
}

func (r *soakRecorder) stop() {
	close(r.stopped)
	<-r.done
}

// read samples node i now.
func (r *soakRecorder) read(i int) soakSample {
	smp := soakSample{T: time.Since(r.start).Seconds(), Node: i, RSSKiB: -1, CT: -1, Templates: -1, LBLC: -1, Ticks: r.clk.ticks()}
	if d := r.s.daemon(i); d != nil && !d.Exited() {
		smp.RSSKiB = rssKiB(d.PID())
	}
	if m, err := scrapeAll(r.s.Lab, i, "xlb_conntrack_entries", "xlb_persistence_templates"); err == nil {
		smp.CT, smp.Templates = m["xlb_conntrack_entries"], m["xlb_persistence_templates"]
	}
	smp.LBLC = countPinned(filepath.Join(r.s.pinDir(i), "xlb_lblc"))
	return smp
}

// rssKiB is process pid's VmRSS, -1 when it cannot be read.
func rssKiB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				return v
			}
		}
	}
	return -1
}

// scrapeAll reads unlabelled metrics from node i's exporter.
func scrapeAll(l *lab.Lab, i int, names ...string) (map[string]int64, error) {
	resp, err := lab.HTTPClient(l.Nodes[i].NS, 2*time.Second).Get("http://127.0.0.1:9469/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		for _, n := range names {
			if ok && name == n {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return nil, err
				}
				out[n] = int64(f)
			}
		}
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("node %d exports no %s", i, n)
		}
	}
	return out, sc.Err()
}

// countPinned counts the keys of a pinned hash map; -1 if it cannot.
func countPinned(path string) int64 {
	m, err := ebpf.LoadPinnedMap(path, &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return -1
	}
	defer m.Close()
	var n int64
	var k []byte
	var v []byte
	it := m.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	if it.Err() != nil {
		return -1
	}
	return n
}

// waitDrained waits until both nodes count no conntrack entry, template
// or lblc entry, and returns how long each took.
func (r *soakRecorder) waitDrained(ctx context.Context, timeout time.Duration) (map[string]string, error) {
	begin := time.Now()
	took := map[string]string{}
	var last []soakSample
	for time.Since(begin) < timeout && ctx.Err() == nil {
		last = last[:0]
		for i := range r.s.daemons {
			smp := r.read(i)
			last = append(last, smp)
			if _, ok := took[fmt.Sprint("n", i+1)]; !ok && smp.CT == 0 && smp.Templates == 0 && smp.LBLC == 0 {
				took[fmt.Sprint("n", i+1)] = fmt.Sprintf("%.1fs, clock +%d ticks", time.Since(begin).Seconds(), smp.Ticks)
			}
		}
		if len(took) == len(r.s.daemons) {
			r.mu.Lock()
			for _, smp := range last {
				smp.Phase = "drain"
				r.samples = append(r.samples, smp)
			}
			r.mu.Unlock()
			return took, nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	return took, fmt.Errorf("not every entry left within %v: %+v", timeout, last)
}

// soakSummary is summary.json.
type soakSummary struct {
	Plan        string
	Events      soakEvents
	Marks       []string
	RunTicks    uint64
	Wraps       float64
	Traffic     map[string]any
	Counters    map[string]any
	Breaks      soakBreaks
	Drain       map[string]string
	Bounds      map[string]string
	WallSeconds float64
}

func (s *soakSummary) oneLine() string {
	return fmt.Sprintf("%d config changes, %d flaps, restarts %v, clock +%d ticks (%.2f wraps) in the traffic; breaks %v; counters %v; drained %v; bounds %v",
		s.Events.ConfigChanges, len(s.Events.Flaps), s.Events.Restarts, s.RunTicks, s.Wraps, s.Breaks, s.Counters, s.Drain, s.Bounds)
}

// soakOutDir is bench/out/soak (XLB_SOAK_OUT overrides): the tests run
// in e2e/.
func soakOutDir() string {
	if d := os.Getenv("XLB_SOAK_OUT"); d != "" {
		return d
	}
	return filepath.Join("..", "bench", "out", "soak")
}

// write writes samples.csv, summary.json and soak.png to dir.
func (r *soakRecorder) write(dir string, sum *soakSummary) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	r.mu.Lock()
	samples := append([]soakSample(nil), r.samples...)
	sum.Marks = append([]string(nil), r.marks...)
	r.mu.Unlock()
	f, err := os.Create(filepath.Join(dir, "samples.csv"))
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Write([]string{"t_s", "phase", "node", "rss_kib", "conntrack_entries", "templates", "lblc_entries", "clock_ticks"})
	for _, s := range samples {
		w.Write([]string{strconv.FormatFloat(s.T, 'f', 2, 64), s.Phase, strconv.Itoa(s.Node + 1), strconv.FormatInt(s.RSSKiB, 10),
			strconv.FormatInt(s.CT, 10), strconv.FormatInt(s.Templates, 10), strconv.FormatInt(s.LBLC, 10), strconv.FormatUint(s.Ticks, 10)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(sum, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return plotSoak(samples, filepath.Join(dir, "soak.png"))
}
