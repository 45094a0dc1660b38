package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/xlbproject/xlb/api/xlb/v1"
	"github.com/xlbproject/xlb/internal/maglev"
	"github.com/xlbproject/xlb/internal/testenv"
	"github.com/xlbproject/xlb/lab"
)

// variantBinary is the variant xlbd that make test builds beside the
// others (bin/xlbd-variant), so that the tests do not build it each.
const variantBinary = "xlbd-variant"

// buildVariantXLBD returns xlbd with the upgrade variant of the forwarder
// (go build -tags xlb_variant: bpf/xlb_variant.c, other instructions, the
// same maps): bin/xlbd-variant if make built it, else one built into a
// temporary directory.
func buildVariantXLBD(t *testing.T) string {
	t.Helper()
	if dir, err := lab.FindBinDir(); err == nil {
		if bin := filepath.Join(dir, variantBinary); fileExists(bin) {
			return bin
		}
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		testenv.Unavailable(t, "the go command is needed to build the variant xlbd: %v", err)
	}
	gomod, err := exec.Command(gobin, "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(gomod)) == "" {
		t.Fatalf("go env GOMOD: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "xlbd")
	cmd := exec.Command(gobin, "build", "-tags", "xlb_variant", "-o", bin, "./cmd/xlbd")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the variant xlbd: %v\n%s", err, out)
	}
	return bin
}

// program is the forwarder the node's pinned XDP link runs.
type program struct {
	ID  ebpf.ProgramID
	Tag string
}

// runningProgram reads the program attached through the node's pinned
// link, and checks that the API's status reports the same one.
func (e *env) runningProgram(t *testing.T) program {
	t.Helper()
	p := e.linkProgram(t)
	out, err := e.ctl(t, "-o", "json", "status")
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	var st pb.StatusResponse
	if err := protojson.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status json: %v\n%s", err, out)
	}
	if ebpf.ProgramID(st.ProgramId) != p.ID {
		t.Fatalf("status says program %d, the link runs %d", st.ProgramId, p.ID)
	}
	return p
}

// linkProgram reads the program attached through the node's pinned link.
func (e *env) linkProgram(t *testing.T) program {
	t.Helper()
	l, err := link.LoadPinnedLink(filepath.Join(lab.PinDir, e.lab.NodeName(0), "link"), nil)
	if err != nil {
		t.Fatalf("pinned link: %v", err)
	}
	defer l.Close()
	li, err := l.Info()
	if err != nil {
		t.Fatal(err)
	}
	if li.XDP() == nil || li.XDP().Ifindex == 0 {
		t.Fatalf("the pinned link is not an attached XDP link: %+v", li)
	}
	p, err := ebpf.NewProgramFromID(li.Program)
	if err != nil {
		t.Fatalf("program %d of the link: %v", li.Program, err)
	}
	defer p.Close()
	pi, err := p.Info()
	if err != nil {
		t.Fatal(err)
	}
	return program{ID: li.Program, Tag: pi.Tag}
}

// ctKey is one conntrack entry: a way of one bucket of one CPU's slice,
// with the flow's tag and its backend.
type ctKey struct {
	CPU, Bucket, Way, Tag, RealID uint32
}

// testFlow is one flow of the test, by its 5-tuple.
type testFlow struct {
	tuple         maglev.Tuple
	bucket, ctTag uint32
	name          string
}

// clientFlows lists the client's connected sockets to target (ss in the
// client's namespace): the flows whose conntrack entries the test follows.
func (e *env) clientFlows(t *testing.T, proto string, target netip.AddrPort) []maglev.Tuple {
	t.Helper()
	flag, num := "-t", uint8(6)
	if proto == "udp" {
		flag, num = "-u", 17
	}
	out, err := e.lab.Client.Run(context.Background(), "ss", "-H", "-n", flag, "state", "established", "dst", target.String())
	if err != nil {
		t.Fatal(err)
	}
	var flows []maglev.Tuple
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		// Recv-Q Send-Q Local Peer (state filtered, so no state column).
		local, err1 := netip.ParseAddrPort(f[len(f)-2])
		peer, err2 := netip.ParseAddrPort(f[len(f)-1])
		if err1 != nil || err2 != nil || peer != target {
			t.Fatalf("ss line %q: %v %v", line, err1, err2)
		}
		flows = append(flows, maglev.Tuple{Src: local.Addr().Unmap(), Dst: target.Addr(), SrcPort: local.Port(), DstPort: target.Port(), Proto: num})
	}
	return flows
}

// flowEntries dumps the connection table through the API three times,
// 100 ms apart (up to 20 while a flow has been in none), and returns, for
// each flow, its entries seen in any of them (matched by bucket and tag,
// the flow hash's bits the table keeps). A dump reads the table CPU
// slice after CPU slice, so an entry that moves from one CPU's slice to
// another's while the dump runs (a UDP flow whose datagrams alternate
// CPUs on a veth, each moving it) can be in neither part, in about one
// dump of four; a tracked flow is not missed by 20. Other entries
// (self-check probes, other clients) are not looked at.
func (e *env) flowEntries(t *testing.T, flows []testFlow) map[string][]ctKey {
	t.Helper()
	res := map[string][]ctKey{}
	for i := 0; i < 3 || (i < 20 && !allSeen(res, flows)); i++ {
		if i > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		for name, ents := range e.flowEntriesOnce(t, flows) {
			for _, k := range ents {
				if !slices.Contains(res[name], k) {
					res[name] = append(res[name], k)
				}
			}
		}
	}
	for _, ents := range res {
		slices.SortFunc(ents, func(a, b ctKey) int { return int(a.CPU) - int(b.CPU) })
	}
	return res
}

// allSeen: every flow has an entry in res.
func allSeen(res map[string][]ctKey, flows []testFlow) bool {
	for _, f := range flows {
		if len(res[f.name]) == 0 {
			return false
		}
	}
	return true
}

// flowEntriesOnce is one dump's flowEntries.
func (e *env) flowEntriesOnce(t *testing.T, flows []testFlow) map[string][]ctKey {
	t.Helper()
	out, err := e.ctl(t, "-o", "json", "conntrack", "--limit", "100000")
	if err != nil {
		t.Fatalf("conntrack: %v\n%s", err, out)
	}
	var dump pb.ConntrackDumpResponse
	if err := protojson.Unmarshal([]byte(out), &dump); err != nil {
		t.Fatalf("conntrack json: %v", err)
	}
	if dump.Truncated {
		t.Fatalf("conntrack dump truncated at %d entries", len(dump.Entries))
	}
	byKey := map[[2]uint32][]ctKey{}
	for _, en := range dump.Entries {
		k := [2]uint32{en.Bucket, en.Tag}
		byKey[k] = append(byKey[k], ctKey{en.Cpu, en.Bucket, en.Way, en.Tag, en.RealId})
	}
	res := map[string][]ctKey{}
	for _, f := range flows {
		ents := byKey[[2]uint32{f.bucket, f.ctTag}]
		slices.SortFunc(ents, func(a, b ctKey) int { return int(a.CPU) - int(b.CPU) })
		res[f.name] = ents
	}
	return res
}

// testFlows maps the tuples to their bucket and tag in a table of capacity
// entries over all CPUs (8 ways per bucket).
func testFlows(t *testing.T, capacity uint64, tuples []maglev.Tuple) []testFlow {
	t.Helper()
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	buckets := uint32(capacity / 8 / uint64(ncpu))
	var out []testFlow
	for _, tp := range tuples {
		h := maglev.FlowHash(tp)
		out = append(out, testFlow{tuple: tp, bucket: maglev.CTBucket(h, buckets), ctTag: maglev.CTTag(h),
			name: fmt.Sprintf("%d %s -> %s", tp.Proto, netip.AddrPortFrom(tp.Src, tp.SrcPort), netip.AddrPortFrom(tp.Dst, tp.DstPort))})
	}
	return out
}

func (e *env) ctCapacity(t *testing.T) uint64 {
	t.Helper()
	out, err := e.ctl(t, "-o", "json", "conntrack", "--limit", "1")
	if err != nil {
		t.Fatalf("conntrack: %v\n%s", err, out)
	}
	var dump pb.ConntrackDumpResponse
	if err := protojson.Unmarshal([]byte(out), &dump); err != nil {
		t.Fatal(err)
	}
	return dump.Capacity
}

// compareTracked checks that every test flow is tracked and that each
// entry it had before is still there, unchanged (same CPU slice, bucket,
// way, tag and backend), or moved whole to another CPU's slice (a flow
// whose packets arrive on another CPU takes its entry along, so that the
// connection counts stay exact: same bucket, tag and backend, the way
// is the free one where it went, also when it came back). It returns the entries counted before and after.
// movedFrom matches k's entry moved to another CPU's slice (and maybe
// back: a move takes the free way of the bucket it goes to).
func movedFrom(k ctKey) func(ctKey) bool {
	return func(a ctKey) bool {
		return a.Bucket == k.Bucket && a.Tag == k.Tag && a.RealID == k.RealID
	}
}

func compareTracked(t *testing.T, step string, before, after map[string][]ctKey) (int, int) {
	t.Helper()
	nb, na := 0, 0
	for name, b := range before {
		a := after[name]
		nb += len(b)
		na += len(a)
		if len(b) == 0 {
			t.Errorf("%s: flow %s was not tracked before", step, name)
		}
		if len(a) == 0 {
			t.Errorf("%s: flow %s is not tracked after", step, name)
		}
		for _, k := range b {
			if !slices.Contains(a, k) && !slices.ContainsFunc(a, movedFrom(k)) {
				t.Errorf("%s: flow %s lost its entry %+v (after: %+v)", step, name, k, a)
			}
		}
	}
	return nb, na
}

// TestRestartsAndLiveUpdatesUnderLoad (hitless restarts, atomic commits):
// with a stream of
// sequence-numbered UDP datagrams (20 flows, at least 200,000 datagrams in
// all, running until after the last restart) and 100 long-lived
// TCP connections, 100 config commits add and remove services and
// backends the measured flows do not use; then xlbd is restarted 5 times
// and upgraded once to a build whose forwarder differs (the xlb_variant
// build: other instructions, the same maps) and back. No datagram is lost,
// every datagram of a flow reaches one backend, no connection breaks;
// every restart and upgrade replaces the program on the pinned link (a new
// program id; the tag changes exactly when the build does) and keeps every
// conntrack entry of the test's flows as it was.
func TestRestartsAndLiveUpdatesUnderLoad(t *testing.T) {
	testenv.RequireCommands(t, "ss")
	variant := buildVariantXLBD(t)
	e := setup(t, []int{1, 1, 1})
	normal, err := e.lab.Binary(lab.XLBDBinary)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sess, err := lab.StartTCPSessions(ctx, e.lab.Client.NS, e.echo4(), 100, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg     sync.WaitGroup
		udp    lab.UDPResult
		udpErr error
		udpEnd time.Time
	)
	// The stream runs until a second after the last restart: every flow
	// until then (udpCap is never reached).
	const udpCap = 1 << 30
	udpCtx, stopUDP := context.WithCancel(ctx)
	defer stopUDP()
	wg.Add(1)
	go func() {
		defer wg.Done()
		udp, udpErr = lab.UDPFlows(udpCtx, e.lab.Client.NS, e.udp4(), 20, udpCap)
		udpEnd = time.Now()
	}()
	time.Sleep(500 * time.Millisecond)
	tuples := append(e.clientFlows(t, "tcp", e.echo4()), e.clientFlows(t, "udp", e.udp4())...)
	if len(tuples) != 120 {
		t.Fatalf("the client has %d flows to the VIP, want 100 TCP + 20 UDP", len(tuples))
	}
	flows := testFlows(t, e.ctCapacity(t), tuples)
	ctStart := e.flowEntries(t, flows)

	// 100 commits through the API: services on another port and an extra
	// backend come and go.
	base := string(e.lab.XLBDConfig(0, e.opts))
	extra := strings.Replace(base, "services:\n", "services:\n  - {name: extra, vip: "+e.lab.VIP4().String()+", port: 8080, protocol: tcp, pools: [spare]}\n", 1)
	extra = strings.Replace(extra, "pools:\n", "pools:\n  spare:\n    backends:\n      - {address: \"10.100.0.250\", weight: 1}\n", 1)
	files := []string{e.lab.Dir + "/base.yaml", e.lab.Dir + "/extra.yaml"}
	os.WriteFile(files[0], []byte(base), 0o644)
	os.WriteFile(files[1], []byte(extra), 0o644)
	start := time.Now()
	for i := 0; i < 100; i++ {
		if out, err := e.ctl(t, "apply", "-f", files[(i+1)%2]); err != nil {
			t.Fatalf("commit %d: %v\n%s", i, err, out)
		}
	}
	t.Logf("100 commits in %v (%.1f per second)", time.Since(start).Round(time.Millisecond), 100/time.Since(start).Seconds())
	nb, na := compareTracked(t, "100 commits", ctStart, e.flowEntries(t, flows))
	t.Logf("100 commits: test flows' conntrack entries %d before, %d after", nb, na)

	// 5 restarts, an upgrade to the variant build and back: the binary of
	// each xlbd in turn (the first runs the normal build).
	steps := []struct {
		what, bin string
	}{
		{"restart 1", normal}, {"restart 2", normal}, {"upgrade to the variant", variant},
		{"restart 3 (variant)", variant}, {"back to the normal build", normal}, {"restart 4", normal}, {"restart 5", normal},
	}
	cur := normal
	prog := e.runningProgram(t)
	tags := map[string]string{normal: prog.Tag}
	for _, s := range steps {
		ctBefore := e.flowEntries(t, flows)
		if err := e.xlbd.Stop(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		d, err := e.lab.StartXLBDBinary(ctx, 0, e.config, s.bin)
		if err != nil {
			t.Fatal(err)
		}
		e.xlbd = d
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err = d.WaitOutput(wctx, "config committed", 1, 20*time.Second)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v\n%s", s.what, err, d.Output())
		}
		if !strings.Contains(d.Output(), "adopted pinned forwarder") {
			t.Fatalf("%s did not adopt the pinned forwarder:\n%s", s.what, d.Output())
		}
		next := e.runningProgram(t)
		if next.ID == prog.ID {
			t.Errorf("%s: the link still runs program %d", s.what, prog.ID)
		}
		if want, ok := tags[s.bin]; ok && next.Tag != want {
			t.Errorf("%s: program tag %s, want %s (the tag of this build)", s.what, next.Tag, want)
		}
		if (next.Tag == prog.Tag) != (s.bin == cur) {
			t.Errorf("%s: program tag %s -> %s (build changed: %v)", s.what, prog.Tag, next.Tag, s.bin != cur)
		}
		tags[s.bin] = next.Tag
		nb, na := compareTracked(t, s.what, ctBefore, e.flowEntries(t, flows))
		t.Logf("%s: program %d tag %s -> program %d tag %s; test flows' conntrack entries %d before, %d after",
			s.what, prog.ID, prog.Tag, next.ID, next.Tag, nb, na)
		prog, cur = next, s.bin
	}
	stepsEnd := time.Now()
	time.Sleep(time.Second)
	stopUDP()
	wg.Wait()
	res := sess.Stop()
	if udpErr != nil {
		t.Fatal(udpErr)
	}
	if udpEnd.Before(stepsEnd) {
		t.Errorf("the UDP stream ended %v before the last restart: not all of them were under load", stepsEnd.Sub(udpEnd).Round(time.Millisecond))
	}
	sent := 0
	for _, f := range udp.Flows {
		sent += f.Sent
		if f.Sent >= udpCap || f.Err != "" {
			t.Errorf("UDP flow from %v ended before the last restart (%d sent, error %q)", f.Source, f.Sent, f.Err)
		}
	}
	t.Logf("UDP: %d datagrams sent, %d lost, per backend %v; TCP: %d sessions, %d messages, %d breaks",
		sent, udp.Lost(), udp.Counts(), len(res.Sessions), res.Messages(), len(res.Breaks))
	if sent < 200000 || udp.Lost() != 0 {
		t.Errorf("UDP: %d sent, %d lost", sent, udp.Lost())
	}
	if split := udp.Split(); len(split) > 0 {
		t.Errorf("%d UDP flows reached more than one backend", len(split))
	}
	if len(res.Breaks) > 0 {
		t.Errorf("%d TCP breaks, first: %v", len(res.Breaks), res.Breaks[0])
	}
}

// pinnedMaps returns the node's pins with, for maps, their ids.
func (e *env) pinnedMaps(t *testing.T) map[string]ebpf.MapID {
	t.Helper()
	dir := filepath.Join(lab.PinDir, e.lab.NodeName(0))
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]ebpf.MapID{}
	for _, en := range ents {
		out[en.Name()] = 0
		if m, err := ebpf.LoadPinnedMap(filepath.Join(dir, en.Name()), nil); err == nil {
			if info, err := m.Info(); err == nil {
				out[en.Name()], _ = info.ID()
			}
			m.Close()
		}
	}
	return out
}

// TestUpgradeRefusesIncompatibleConntrack (hitless upgrades): an xlbd whose
// connection table would not fit the pinned one (here node.conntrack_entries
// doubled) refuses to start, naming the map, both layouts and the choices,
// and changes nothing: the same program stays on the link, every pin is
// the same map, and the tracked connections go on. The xlbd started again
// with the old setting adopts everything as usual.
func TestUpgradeRefusesIncompatibleConntrack(t *testing.T) {
	testenv.RequireCommands(t, "ss")
	e := setup(t, []int{1, 1, 1})
	ctx := context.Background()
	sess, err := lab.StartTCPSessions(ctx, e.lab.Client.NS, e.echo4(), 20, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	flows := testFlows(t, e.ctCapacity(t), e.clientFlows(t, "tcp", e.echo4()))
	if len(flows) != 20 {
		t.Fatalf("%d client flows, want 20", len(flows))
	}
	time.Sleep(300 * time.Millisecond)
	ctBefore := e.flowEntries(t, flows)
	prog := e.runningProgram(t)
	pins := e.pinnedMaps(t)
	if err := e.xlbd.Stop(); err != nil {
		t.Fatal(err)
	}

	bigger := e.opts
	bigger.ConntrackEntries = 2 * 65536 // the lab's default doubled
	if e.opts.ConntrackEntries != 0 {
		bigger.ConntrackEntries = 2 * e.opts.ConntrackEntries
	}
	cfg := filepath.Join(e.lab.Dir, "bigger-ct.yaml")
	if err := os.WriteFile(cfg, e.lab.XLBDConfig(0, bigger), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := e.lab.StartXLBD(ctx, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("xlbd with a bigger connection table did not stop:\n%s", d.Output())
	}
	d.Kill() // exited: mark it so that the lab does not report its exit status
	out := d.Output()
	path := filepath.Join(lab.PinDir, e.lab.NodeName(0), "xlb_ct")
	for _, want := range []string{"pinned map xlb_ct (" + path + ") does not fit this build: pinned Array key 4 B value 64 B max_entries ",
		"it holds the tracked connections. Nothing was changed", "--discard-conntrack", "'xlbd --cleanup'"} {
		if !strings.Contains(out, want) {
			t.Fatalf("xlbd output does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "adopted pinned forwarder") || strings.Contains(out, "attached forwarder") {
		t.Fatalf("the refusing xlbd touched the link:\n%s", out)
	}
	if got := e.linkProgram(t); got != prog {
		t.Fatalf("after the refusal the link runs %+v, before %+v", got, prog)
	}
	if got := e.pinnedMaps(t); !maps.Equal(got, pins) {
		t.Fatalf("pins after the refusal %v, before %v", got, pins)
	}
	time.Sleep(time.Second) // the sessions go on with no xlbd
	if b := sess.Breaks(); len(b) > 0 {
		t.Fatalf("%d TCP breaks while xlbd was refused, first: %v", len(b), b[0])
	}

	d, err = e.lab.StartXLBD(ctx, 0, e.config)
	if err != nil {
		t.Fatal(err)
	}
	e.xlbd = d
	if err := d.WaitOutput(ctx, "config committed", 1, 20*time.Second); err != nil {
		t.Fatalf("restart with the old setting: %v\n%s", err, d.Output())
	}
	next := e.runningProgram(t)
	if next.ID == prog.ID || next.Tag != prog.Tag {
		t.Errorf("restart with the old setting: program %+v, before %+v", next, prog)
	}
	nb, na := compareTracked(t, "refusal and restart", ctBefore, e.flowEntries(t, flows))
	res := sess.Stop()
	t.Logf("refused: %s", lastLine(out, "does not fit"))
	t.Logf("program %d tag %s kept through the refusal, then %d; test flows' conntrack entries %d before, %d after; TCP: %d sessions, %d messages, %d breaks",
		prog.ID, prog.Tag, next.ID, nb, na, len(res.Sessions), res.Messages(), len(res.Breaks))
	if len(res.Breaks) > 0 {
		t.Errorf("%d TCP breaks, first: %v", len(res.Breaks), res.Breaks[0])
	}
}

func lastLine(out, substr string) string {
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], substr) {
			return lines[i]
		}
	}
	return ""
}

// fileExists reports whether path names an existing file.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
