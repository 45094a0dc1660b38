package datapath

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/testenv"
)

// TestEveryPinnedMapHasAPolicy: each pinned map of the forwarder has a
// decided policy for an incompatible pin (compat.go), so a new map is not
// refused or recreated by accident.
func TestEveryPinnedMapHasAPolicy(t *testing.T) {
	spec, err := LoadSpec(Options{Interface: "lo", PinDir: "/nonexistent"})
	if err != nil {
		t.Fatal(err)
	}
	for name, ms := range spec.Maps {
		if _, ok := pinnedMapPolicy[name]; ms.Pinning == ebpf.PinByName && !ok {
			t.Errorf("pinned map %s has no entry in pinnedMapPolicy", name)
		}
	}
	for name := range pinnedMapPolicy {
		if ms := spec.Maps[name]; ms == nil || ms.Pinning != ebpf.PinByName {
			t.Errorf("pinnedMapPolicy names %s, not a pinned map of the forwarder", name)
		}
	}
}

// compatOptions returns load options on a private pin directory.
func compatOptions(t *testing.T) Options {
	t.Helper()
	testenv.RequireRoot(t)
	if err := EnsureBPFFS(); err != nil {
		testenv.Unavailable(t, "bpffs: %v", err)
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	dir := filepath.Join("/sys/fs/bpf", "xlb-test-"+hex.EncodeToString(rnd[:]))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return Options{Interface: "lo", PinDir: dir, ConntrackEntries: 1 << 14, MaxServices: 64, MaxReals: 1024}
}

// pinWrong pins a map of the given layout as name under dir and returns
// its id.
func pinWrong(t *testing.T, dir, name string, l MapLayout) ebpf.MapID {
	t.Helper()
	os.Remove(filepath.Join(dir, name))
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: name, Type: l.Type, KeySize: l.KeySize, ValueSize: l.ValueSize, MaxEntries: l.MaxEntries})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Pin(filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
	return pinnedID(t, dir, name)
}

func pinnedID(t *testing.T, dir, name string) ebpf.MapID {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	info, err := m.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := info.ID()
	return id
}

func pinnedLayout(t *testing.T, dir, name string) MapLayout {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	return layoutOfMap(m)
}

func pins(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// wantedLayout is the layout this build wants for name with o.
func wantedLayout(t *testing.T, o Options, name string) MapLayout {
	t.Helper()
	spec, err := LoadSpec(o)
	if err != nil {
		t.Fatal(err)
	}
	return layoutOfSpec(spec.Maps[name])
}

// TestIncompatibleConntrackRefused: a pinned connection table of another
// layout is refused, naming the map, both layouts and the choices, before
// anything is created or changed; with DiscardConntrack it is replaced by
// an empty table of the wanted layout.
func TestIncompatibleConntrackRefused(t *testing.T) {
	o := compatOptions(t)
	wrong := MapLayout{Type: ebpf.Array, KeySize: 4, ValueSize: 64, MaxEntries: 16}
	id := pinWrong(t, o.PinDir, "xlb_ct", wrong)
	wanted := wantedLayout(t, o, "xlb_ct")

	_, err := Load(o)
	var ie *IncompatibleMapError
	if !errors.As(err, &ie) || !errors.Is(err, ErrIncompatible) {
		t.Fatalf("load over a wrong xlb_ct: %v, want IncompatibleMapError", err)
	}
	path := filepath.Join(o.PinDir, "xlb_ct")
	if ie.Name != "xlb_ct" || ie.Path != path || ie.Pinned != wrong || ie.Wanted != wanted || !ie.Conntrack {
		t.Fatalf("error %+v", ie)
	}
	want := "pinned map xlb_ct (" + path + ") does not fit this build: pinned Array key 4 B value 64 B max_entries 16 flags 0x0, wanted " +
		wanted.String() + "; it holds the tracked connections. Nothing was changed"
	msg := err.Error()
	if !strings.HasPrefix(msg, want) || !strings.Contains(msg, "--discard-conntrack") || !strings.Contains(msg, "'xlbd --cleanup'") ||
		!strings.Contains(msg, "node.conntrack_entries") {
		t.Fatalf("message:\n%s\nwant it to start with:\n%s\nand name --discard-conntrack, 'xlbd --cleanup', node.conntrack_entries", msg, want)
	}
	t.Logf("refused: %s", msg)
	if got := pins(t, o.PinDir); !slices.Equal(got, []string{"xlb_ct"}) {
		t.Fatalf("pins after the refusal: %v, want only the old xlb_ct (nothing created, nothing attached)", got)
	}
	if pinnedID(t, o.PinDir, "xlb_ct") != id {
		t.Fatal("the refused xlb_ct pin was replaced")
	}

	o.DiscardConntrack = true
	d, err := Load(o)
	if err != nil {
		t.Fatalf("load with DiscardConntrack: %v", err)
	}
	defer d.Close()
	if got := pinnedLayout(t, o.PinDir, "xlb_ct"); got != wanted || pinnedID(t, o.PinDir, "xlb_ct") == id {
		t.Fatalf("xlb_ct after DiscardConntrack: %s (id kept: %v), want a new %s", got, pinnedID(t, o.PinDir, "xlb_ct") == id, wanted)
	}
}

// TestIncompatibleStateMapRefused: a committed-state map (here the
// backends) of another layout is refused even with DiscardConntrack, and
// the message offers only the cold start.
func TestIncompatibleStateMapRefused(t *testing.T) {
	o := compatOptions(t)
	o.DiscardConntrack = true
	wrong := MapLayout{Type: ebpf.Array, KeySize: 4, ValueSize: 40, MaxEntries: 1024}
	id := pinWrong(t, o.PinDir, "xlb_reals", wrong)
	_, err := Load(o)
	var ie *IncompatibleMapError
	if !errors.As(err, &ie) || ie.Name != "xlb_reals" || ie.Pinned != wrong || ie.Conntrack {
		t.Fatalf("load over a wrong xlb_reals: %v", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "it holds the committed backends") || !strings.Contains(msg, "'xlbd --cleanup'") || strings.Contains(msg, "--discard-conntrack") {
		t.Fatalf("message: %s", msg)
	}
	if got := pins(t, o.PinDir); !slices.Equal(got, []string{"xlb_reals"}) || pinnedID(t, o.PinDir, "xlb_reals") != id {
		t.Fatalf("pins after the refusal: %v", got)
	}
}

// TestIncompatibleCountersRecreated: a counters map of another layout (a
// build whose counters grew) is replaced by an empty one of the wanted
// layout; the connection table and the committed state are adopted as
// they are, so a tracked flow keeps its entry.
func TestIncompatibleCountersRecreated(t *testing.T) {
	o := compatOptions(t)
	d, err := Load(o)
	if err != nil {
		t.Fatal(err)
	}
	st := fixtureState()
	if _, err := d.Apply(st); err != nil {
		d.Close()
		t.Fatal(err)
	}
	f := packet.Flow{Src: client4, Dst: vip4, SrcPort: 4242, DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: packet.SYN}
	run(t, d.Program(), f.Frame())
	var before []CTEntry
	d.ScanConntrack(func(e CTEntry) bool { before = append(before, e); return true })
	d.Close()
	if len(before) != 1 {
		t.Fatalf("%d conntrack entries after one flow, want 1", len(before))
	}
	ctID := pinnedID(t, o.PinDir, "xlb_ct")
	oldStats := pinWrong(t, o.PinDir, "xlb_stats", MapLayout{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1})

	d2, err := Load(o)
	if err != nil {
		t.Fatalf("load over a wrong xlb_stats: %v", err)
	}
	defer d2.Close()
	if got, want := pinnedLayout(t, o.PinDir, "xlb_stats"), wantedLayout(t, o, "xlb_stats"); got != want || pinnedID(t, o.PinDir, "xlb_stats") == oldStats {
		t.Fatalf("xlb_stats pinned as %s, want a new %s", got, want)
	}
	if pinnedID(t, o.PinDir, "xlb_ct") != ctID {
		t.Fatal("the connection table was not adopted")
	}
	var after []CTEntry
	d2.ScanConntrack(func(e CTEntry) bool { after = append(after, e); return true })
	if len(after) != 1 || after[0].Bucket != before[0].Bucket || after[0].Tag != before[0].Tag || after[0].RealID != before[0].RealID {
		t.Fatalf("conntrack after the recreation %+v, before %+v", after, before)
	}
	if got := d2.Snapshot(); len(got.Services) != len(st.Services) {
		t.Fatalf("adopted %d services, want %d", len(got.Services), len(st.Services))
	}
	stats, err := d2.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if stats["ct_miss"] != 0 {
		t.Fatalf("recreated counters start at %v", stats)
	}
	// An ACK: a SYN that misses on its own CPU does not look at the other
	// CPUs' slices, and the run may land on another CPU than the first.
	f.TCPFlags = packet.ACK
	ret, _ := run(t, d2.Program(), f.Frame())
	if stats, _ = d2.Stats(); ret != xdpTX || stats["ct_hit"]+stats["ct_remote_hit"] != 1 {
		t.Fatalf("the tracked flow after the recreation: verdict %d, counters %v", ret, stats)
	}
}

// TestNodeSettingsMigrated: a pinned node map of an older, shorter layout
// (a build before fields were appended to node_info) is carried into the
// new layout: its bytes kept (the probe cookie and every setting), the
// appended fields zero until the next commit; a node map whose value
// shrank is refused.
func TestNodeSettingsMigrated(t *testing.T) {
	o := compatOptions(t)
	want := wantedLayout(t, o, "xlb_node")
	old := want
	old.ValueSize -= 8
	pinWrong(t, o.PinDir, "xlb_node", old)
	m, err := ebpf.LoadPinnedMap(filepath.Join(o.PinDir, "xlb_node"), nil)
	if err != nil {
		t.Fatal(err)
	}
	val := make([]byte, old.ValueSize)
	for i := range val {
		val[i] = byte(i + 1)
	}
	if err := m.Put(uint32(0), val); err != nil {
		t.Fatal(err)
	}
	m.Close()
	d, err := Load(o)
	if err != nil {
		t.Fatalf("load over an older node map: %v", err)
	}
	defer d.Close()
	if got := pinnedLayout(t, o.PinDir, "xlb_node"); got != want {
		t.Fatalf("xlb_node pinned as %s, want %s", got, want)
	}
	got := make([]byte, want.ValueSize)
	if err := d.objs.XlbNode.Lookup(uint32(0), &got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got[:old.ValueSize], val) || slices.ContainsFunc(got[old.ValueSize:], func(b byte) bool { return b != 0 }) {
		t.Fatalf("migrated value % x, want % x then zeros", got, val)
	}
	if d.probeCookie != d.cur.node.ProbeCookie || d.probeCookie == 0 {
		t.Fatal("the probe cookie was not kept")
	}

	o2 := compatOptions(t)
	longer := want
	longer.ValueSize += 8
	pinWrong(t, o2.PinDir, "xlb_node", longer)
	var ie *IncompatibleMapError
	if _, err := Load(o2); !errors.As(err, &ie) || ie.Name != "xlb_node" {
		t.Fatalf("load over a longer node map: %v", err)
	}
}
