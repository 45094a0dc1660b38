package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/controller"
	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/lab"
)

// crashBinary is xlbd with crash points (go build -tags xlb_crashpoints),
// which make build puts beside the others.
const crashBinary = "xlbd-crash"

// crashEnv is a lab whose xlbd is killed: two configs it switches
// between, what the data plane holds under each, and the pins of a clean
// start.
type crashEnv struct {
	*env
	files [2]string // config A (the lab's) and config B
	sigs  [2]string // the data plane's signature under each
	pins  []string  // the pin directory's entries after a clean start
	bin   string    // the xlbd binary
}

// crashConfigs returns config B: config A with other weights (each
// service's table patched in place), node settings changed, and two more
// services, one on a VIP address of its own, one with a scheduler.
func crashConfigB(e *env) string {
	opts := e.opts
	opts.Weights = []int{1, 2, 1}
	b := string(e.lab.XLBDConfig(0, opts))
	b = strings.Replace(b, "node:\n", "node:\n  icmp_echo_rate: 50\n", 1)
	b = strings.Replace(b, "services:\n", "services:\n"+
		"  - {name: extra, vip: "+e.lab.VIP4().String()+", port: 8080, protocol: tcp, pools: [spare], scheduler: wlc}\n"+
		"  - {name: other, vip: \"10.250.0.1\", port: 80, protocol: tcp, pools: [spare]}\n", 1)
	return strings.Replace(b, "pools:\n", "pools:\n  spare:\n    backends:\n      - {address: \"10.100.0.250\", weight: 1}\n      - {address: \"10.100.0.251\", weight: 2}\n", 1)
}

// setupCrash builds the lab with xlbd binary bin (lab.XLBDBinary or
// crashBinary) running config A, and learns the data plane's signature
// under A and, applied through the API, under B (then back to A).
func setupCrash(t *testing.T, bin string) *crashEnv {
	t.Helper()
	e := setup(t, []int{1, 1, 1})
	c := &crashEnv{env: e}
	var err error
	if c.bin, err = e.lab.Binary(bin); err != nil {
		t.Fatal(err)
	}
	c.files = [2]string{filepath.Join(e.lab.Dir, "crash-a.yaml"), filepath.Join(e.lab.Dir, "crash-b.yaml")}
	if err := os.WriteFile(c.files[0], e.lab.XLBDConfig(0, e.opts), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.files[1], []byte(crashConfigB(e)), 0o644); err != nil {
		t.Fatal(err)
	}
	if bin != lab.XLBDBinary {
		if err := e.xlbd.Stop(); err != nil {
			t.Fatal(err)
		}
		c.restart(t)
	}
	c.pins = c.pinNames(t)
	c.sigs[0] = c.signature(t)
	for _, i := range []int{1, 0} {
		if out, err := e.ctl(t, "apply", "-f", c.files[i]); err != nil {
			t.Fatalf("apply: %v\n%s", err, out)
		}
		c.sigs[i] = c.signature(t)
	}
	if c.sigs[0] == c.sigs[1] {
		t.Fatal("configs A and B give the same data plane")
	}
	t.Logf("the data plane under config A:\n%s\nunder B:\n%s", c.sigs[0], c.sigs[1])
	return c
}

// restart starts c.bin on the config file and waits until it runs (its
// signal handlers are set once it says so).
func (c *crashEnv) restart(t *testing.T) {
	t.Helper()
	d, err := c.lab.StartXLBDBinary(context.Background(), 0, c.config, c.bin)
	if err != nil {
		t.Fatal(err)
	}
	c.xlbd = d
	if err := d.WaitOutput(context.Background(), "xlbd running", 1, 20*time.Second); err != nil {
		t.Fatalf("the restart did not come up: %v\n%s", err, d.Output())
	}
}

// fileConfig returns which of A (0) and B (1) the config file holds.
func (c *crashEnv) fileConfig(t *testing.T) int {
	t.Helper()
	i := c.fileIs()
	if i < 0 {
		got, _ := os.ReadFile(c.config)
		t.Fatalf("the config file holds neither A nor B:\n%s", got)
	}
	return i
}

// fileIs returns which of A (0) and B (1) the config file holds, -1 for
// neither.
func (c *crashEnv) fileIs() int {
	got, err := os.ReadFile(c.config)
	if err != nil {
		return -1
	}
	for i, f := range c.files {
		if want, _ := os.ReadFile(f); string(want) == string(got) {
			return i
		}
	}
	return -1
}

// signature describes what the data plane forwards with: every VIP with
// its encapsulation and its table slot by slot as backend addresses, and
// every real with its address and state.
func (c *crashEnv) signature(t *testing.T) string {
	t.Helper()
	p := c.pinned(t)
	svcs, err := p.Services()
	if err != nil {
		t.Fatal(err)
	}
	tables, err := p.Tables()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, s := range svcs {
		addr := map[uint32]string{}
		fmt.Fprintf(&b, "%s encap %v reals", s.Key, s.Encap)
		for _, r := range s.Reals {
			addr[r.ID] = r.Real.Addr.String()
			fmt.Fprintf(&b, " %s/%v", r.Real.Addr, r.Real.Active)
		}
		h := sha256.New()
		for _, id := range tables[s.Key] {
			a, ok := addr[id]
			if !ok && id != 0 {
				a = fmt.Sprintf("foreign real %d", id)
			}
			h.Write([]byte(a + ","))
		}
		fmt.Fprintf(&b, " table %d %x", len(tables[s.Key]), h.Sum(nil)[:8])
		var sc []byte
		if err := c.pinnedMap(t, "xlb_svc_sched").Lookup(s.SvcID, &sc); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, " scheduler %d of %d\n", sc[0], binary.LittleEndian.Uint32(sc[4:8])) // svc_sched.kind, .n
	}
	// Every scheduler that is set (one of a service no VIP publishes
	// would count here), and the VIP address set.
	var k uint32
	var v []byte
	set := 0
	for it := c.pinnedMap(t, "xlb_svc_sched").Iterate(); it.Next(&k, &v); {
		if slices.ContainsFunc(v, func(x byte) bool { return x != 0 }) {
			set++
		}
	}
	fmt.Fprintf(&b, "schedulers set: %d\nVIP addresses:", set)
	var ak []byte
	var flags uint32
	var addrs []string
	for it := c.pinnedMap(t, "xlb_vip_addrs").Iterate(); it.Next(&ak, &flags); {
		addrs = append(addrs, fmt.Sprintf(" %x/%d", ak, flags))
	}
	slices.Sort(addrs)
	return b.String() + strings.Join(addrs, "") + "\n"
}

// pinnedMap opens the node's map pinned as name, read-only, until t ends.
func (c *crashEnv) pinnedMap(t *testing.T, name string) *ebpf.Map {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(lab.PinDir, c.lab.NodeName(0), name), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// pinNames lists the node's pin directory.
func (c *crashEnv) pinNames(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(lab.PinDir, c.lab.NodeName(0)))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, en := range ents {
		names = append(names, en.Name())
	}
	return names
}

// programs are the ids of the programs the instance runs: the pinned
// link's, and the stages in the program array it tail-calls through.
func (c *crashEnv) programs(t *testing.T) []ebpf.ProgramID {
	t.Helper()
	l, err := link.LoadPinnedLink(filepath.Join(lab.PinDir, c.lab.NodeName(0), "link"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	li, err := l.Info()
	if err != nil {
		t.Fatal(err)
	}
	ids := []ebpf.ProgramID{li.Program}
	p, err := ebpf.NewProgramFromID(li.Program)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	pi, err := p.Info()
	if err != nil {
		t.Fatal(err)
	}
	maps, _ := pi.MapIDs()
	for _, id := range maps {
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			t.Fatal(err)
		}
		if m.Type() == ebpf.ProgramArray {
			var k, prog uint32
			for it := m.Iterate(); it.Next(&k, &prog); {
				ids = append(ids, ebpf.ProgramID(prog))
			}
		}
		m.Close()
	}
	return ids
}

// checkAfterRestart checks a restart after a kill: the commit record says
// done for the config file's config; the data plane holds exactly that
// config (want: 0 for A, 1 for B); the pins are a clean start's; no table
// slot outside the VIPs' holds more than the new process's placeholder;
// the killed instance's programs are gone.
func (c *crashEnv) checkAfterRestart(t *testing.T, what string, want int, killed []ebpf.ProgramID) {
	t.Helper()
	rec, err := controller.ReadCommitRecord(filepath.Join(lab.PinDir, c.lab.NodeName(0)))
	if err != nil || rec == nil {
		t.Fatalf("%s: commit record: %v, %v", what, rec, err)
	}
	cfg, err := config.Load(c.config)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Phase != controller.PhaseDone || rec.Config != controller.ConfigDigest(cfg) {
		t.Errorf("%s: commit record %+v, want done for the file's config %s", what, rec, controller.ConfigDigest(cfg))
	}
	if got := c.fileConfig(t); got != want {
		t.Errorf("%s: the config file holds config %c, want %c", what, 'A'+got, 'A'+want)
	}
	if sig := c.signature(t); sig != c.sigs[want] {
		t.Errorf("%s: the data plane holds neither config %c exactly:\n%s\nwant:\n%s", what, 'A'+want, sig, c.sigs[want])
	}
	if pins := c.pinNames(t); !slices.Equal(pins, c.pins) {
		t.Errorf("%s: pins %v, a clean start has %v", what, pins, c.pins)
	}
	if extra := c.unreachedTables(t); len(extra) > 0 {
		t.Errorf("%s: table slots no VIP reaches hold %v (at most one placeholder expected)", what, extra)
	}
	deadline := time.Now().Add(2 * time.Second)
	for _, id := range killed {
		for {
			p, err := ebpf.NewProgramFromID(id)
			if errors.Is(err, os.ErrNotExist) {
				break
			}
			if err == nil {
				p.Close()
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: program %d of the killed xlbd is still loaded (%v)", what, id, err)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// unreachedTables lists the inner maps held by table slots no VIP points
// at, beyond one placeholder of one entry.
func (c *crashEnv) unreachedTables(t *testing.T) []string {
	t.Helper()
	vips, tables := c.pinnedMap(t, "xlb_vips"), c.pinnedMap(t, "xlb_tables")
	reached := map[uint32]bool{}
	var k, v []byte
	for it := vips.Iterate(); it.Next(&k, &v); {
		reached[binary.LittleEndian.Uint32(v[4:8])] = true // vip_info.table_id
	}
	held := map[uint32]int{} // inner map id -> entries
	for slot := range tables.MaxEntries() {
		var id uint32
		if tables.Lookup(slot, &id) != nil || reached[slot] {
			continue
		}
		inner, err := ebpf.NewMapFromID(ebpf.MapID(id))
		if err != nil {
			t.Fatal(err)
		}
		held[id] = int(inner.MaxEntries())
		inner.Close()
	}
	var out []string
	for id, n := range held {
		if n != 1 || len(held) > 1 {
			out = append(out, fmt.Sprintf("map %d of %d entries", id, n))
		}
	}
	return out
}

// TestCrashKillsUnderSessions (crash anywhere): with 20 long TCP sessions
// through the node, xlbd is killed with SIGKILL ten times in a row at a
// random moment of a stream of changes: config file rewrites with SIGHUP,
// API applies, each a commit, switching between configs A and B. Each
// time the next xlbd comes up, its commit record says done for the config
// file's config, the data plane holds exactly that config (never parts of
// both), the pins are those of a clean start, no table slot outside the
// VIPs' holds more than one placeholder, and the killed xlbd's programs are
// gone. No session breaks.
func TestCrashKillsUnderSessions(t *testing.T) {
	c := setupCrash(t, lab.XLBDBinary)
	sess, err := lab.StartTCPSessions(context.Background(), c.lab.Client.NS, c.echo4(), 20, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Stop()
	ctl, err := c.lab.Binary("xlbctl")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cut := 0 // restarts that found the commit record pending
	for i := range 10 {
		killed := c.programs(t)
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { c.changes(ctx, ctl, i) })
		wait := time.Duration(20+rand.IntN(400)) * time.Millisecond
		time.Sleep(wait)
		c.xlbd.Kill()
		stop()
		wg.Wait()
		want := c.fileConfig(t)
		c.restart(t)
		c.checkAfterRestart(t, fmt.Sprintf("kill %d (%v into the changes, config %c)", i+1, wait, 'A'+want), want, killed)
		if strings.Contains(c.xlbd.Output(), "stopped in the middle of a commit") {
			cut++
		}
	}
	t.Logf("10 kills and restarts in %v; %d of them cut a commit (the record said pending)", time.Since(start).Round(time.Millisecond), cut)
	time.Sleep(500 * time.Millisecond)
	res := sess.Stop()
	t.Logf("TCP: %d sessions, %d messages, %d breaks", len(res.Sessions), res.Messages(), len(res.Breaks))
	if len(res.Sessions) != 20 || len(res.Breaks) > 0 {
		t.Fatalf("%d sessions, %d breaks: %v", len(res.Sessions), len(res.Breaks), res.Breaks)
	}
}

// changes switches the config between A and B until ctx ends, by
// rewriting the file and SIGHUP, and by API applies, in turns, with no
// pause: xlbd is committing most of the time.
func (c *crashEnv) changes(ctx context.Context, bin string, seed int) {
	for n := seed; ctx.Err() == nil; n++ {
		to := c.files[(c.fileIs()+1)%2]
		if n%2 == 0 {
			b, _ := os.ReadFile(to)
			if os.WriteFile(c.config, b, 0o644) != nil || c.xlbd.Reload() != nil {
				return
			}
			continue
		}
		if _, err := c.lab.Nodes[0].Run(ctx, bin, "--socket", c.lab.APISocket(0), "apply", "-f", to); err != nil {
			return // killed
		}
	}
}

// TestCrashAfterEveryCommitStep (crash anywhere): xlbd built with crash
// points (bin/xlbd-crash) is made to kill itself after each step of a
// commit in turn: after the commit record says pending, after each of the
// data plane's steps (datapath.CommitSteps), after the maps are written,
// after an API apply saved the config file, after the record says done.
// Each commit goes from config A to B (services, a VIP address and a
// scheduler added, tables patched, node settings changed), by reload
// (the file already rewritten: the next start commits B) or API apply
// (the file is saved after the maps: killed before, the next start
// commits A), in turns, under 20 long TCP sessions. Each time the next xlbd comes up and
// checkAfterRestart holds; no session breaks.
func TestCrashAfterEveryCommitStep(t *testing.T) {
	arm := filepath.Join(t.TempDir(), "arm")
	t.Setenv("XLB_CRASH_ARM", arm) // read by bin/xlbd-crash only
	c := setupCrash(t, crashBinary)
	sess, err := lab.StartTCPSessions(context.Background(), c.lab.Client.NS, c.echo4(), 20, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Stop()
	points := []string{controller.CrashPoints[0]}
	for _, s := range datapath.CommitSteps() {
		points = append(points, "datapath: after "+s)
	}
	points = append(points, controller.CrashPoints[1:]...)
	start := time.Now()
	for i, p := range points {
		api := i%2 == 1 || p == "controller: after the config file"
		if c.fileConfig(t) != 0 { // every kill cuts a commit from A to B
			if out, err := c.ctl(t, "apply", "-f", c.files[0]); err != nil {
				t.Fatalf("apply A: %v\n%s", err, out)
			}
		}
		killed := c.programs(t)
		if err := os.WriteFile(arm, []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
		want := 1
		if api {
			if _, err := c.ctl(t, "apply", "-f", c.files[1]); err == nil {
				t.Fatalf("%s: the API apply returned, the process did not stop", p)
			}
			if slices.Index(controller.CrashPoints, p) < 2 {
				want = 0 // killed before the file was saved
			}
		} else {
			b, _ := os.ReadFile(c.files[1])
			if err := os.WriteFile(c.config, b, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := c.xlbd.Reload(); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-c.xlbd.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: xlbd did not stop there", p)
		}
		c.xlbd.Kill() // exited: the lab does not report its status
		if _, err := os.Stat(arm); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: xlbd stopped, but not at the crash point (arm file: %v)\n%s", p, err, c.xlbd.Output())
		}
		c.restart(t)
		how := "reload"
		if api {
			how = "API apply"
		}
		c.checkAfterRestart(t, fmt.Sprintf("killed %s of a %s", p, how), want, killed)
	}
	t.Logf("%d crash points in %v", len(points), time.Since(start).Round(time.Millisecond))
	c.killedAfterAttach(t, arm)
	res := sess.Stop()
	t.Logf("TCP: %d sessions, %d messages, %d breaks", len(res.Sessions), res.Messages(), len(res.Breaks))
	if len(res.Sessions) != 20 || len(res.Breaks) > 0 {
		t.Fatalf("%d sessions, %d breaks: %v", len(res.Sessions), len(res.Breaks), res.Breaks)
	}
}

// killedAfterAttach: a start killed once it replaced the program on the
// link, before it gave its stages' pin its name: the attached entry's
// stages stay filled while no xlbd runs, and the next start comes up with
// the pins of a clean start, the killed start's programs gone.
func (c *crashEnv) killedAfterAttach(t *testing.T, arm string) {
	t.Helper()
	const p = "datapath: after attach"
	if err := c.xlbd.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(arm, []byte(p), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := c.lab.StartXLBDBinary(context.Background(), 0, c.config, c.bin)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: xlbd did not stop there:\n%s", p, d.Output())
	}
	d.Kill()
	if _, err := os.Stat(arm); !errors.Is(err, os.ErrNotExist) || !strings.Contains(d.Output(), "adopted pinned forwarder") {
		t.Fatalf("%s: xlbd stopped, but not at the crash point (arm file: %v):\n%s", p, err, d.Output())
	}
	killed := c.programs(t)
	if len(killed) != 4 {
		t.Fatalf("%s: the attached entry has %d stages while no xlbd runs, want 3", p, len(killed)-1)
	}
	want := c.fileConfig(t)
	c.restart(t)
	c.checkAfterRestart(t, "killed "+p, want, killed)
}
