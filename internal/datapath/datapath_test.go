package datapath

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/xlbproject/xlb/internal/testenv"
)

// newTestDatapath loads the forwarder with maps pinned in a private
// directory (removed at cleanup). It does not attach.
func newTestDatapath(t testing.TB, o Options) *Datapath {
	t.Helper()
	testenv.RequireRoot(t)
	if err := EnsureBPFFS(); err != nil {
		testenv.Unavailable(t, "bpffs: %v", err)
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	dir := filepath.Join("/sys/fs/bpf", "xlb-test-"+hex.EncodeToString(rnd[:]))
	if o.Interface == "" {
		o.Interface = "lo"
	}
	o.PinDir = dir
	if o.ConntrackEntries == 0 {
		o.ConntrackEntries = 1 << 14
	}
	if o.MaxServices == 0 {
		o.MaxServices = 64
	}
	if o.MaxReals == 0 {
		o.MaxReals = 1024
	}
	t.Cleanup(func() { os.RemoveAll(dir) }) // also when Load fails
	d, err := Load(o)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() { d.Close() }) // runs before the removal
	return d
}

var (
	testGW   = net.HardwareAddr{0x02, 0, 0, 0, 0, 0xfe}
	nodeV4   = netip.MustParseAddr("10.0.0.11")
	nodeV6   = netip.MustParseAddr("fd00::11")
	defaultT = Timeouts{TCPSyn: time.Minute, TCP: 15 * time.Minute, TCPFin: 2 * time.Minute, UDP: 5 * time.Minute}
)

func testNode() Node {
	return Node{Addr4: nodeV4, Addr6: nodeV6, GatewayMAC: testGW, Timeouts: defaultT}
}

// run feeds one frame through the program and returns the verdict and the
// output frame.
func run(t *testing.T, prog *ebpf.Program, frame []byte) (uint32, []byte) {
	t.Helper()
	out := make([]byte, len(frame)+256)
	opts := &ebpf.RunOptions{Data: frame, DataOut: out, Repeat: 1}
	ret, err := prog.Run(opts)
	if err != nil {
		t.Fatalf("test run: %v", err)
	}
	return ret, opts.DataOut
}

// XDP verdicts.
const (
	xdpAborted  = 0
	xdpDrop     = 1
	xdpPass     = 2
	xdpTX       = 3
	xdpRedirect = 4
)

func TestLoadAndApplyEmpty(t *testing.T) {
	d := newTestDatapath(t, Options{})
	st := &State{Node: testNode(), Services: map[VIPKey]*Service{}}
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	if len(StatNames()) == 0 || StatNames()[0] != "pass_not_ip" {
		t.Fatalf("stat names from BTF: %v", StatNames())
	}
}

// verifierBudget is the most instructions the verifier may process for
// any one program: a tenth of its limit of one million, so verification
// stays quick and features can be added. A program over it is split into
// stages (tail calls) or its rare paths into global functions.
const verifierBudget = 100_000

// TestVerifierBudget loads every program of every object xlb ships (the
// forwarder's, its upgrade variant's and the decapsulator's: the XDP
// entry, its stages, the sync and sweep programs) and checks each against
// verifierBudget; and the forwarder's programs as xlbd loads them.
func TestVerifierBudget(t *testing.T) {
	testenv.RequireRoot(t)
	for _, obj := range []string{"xlb_bpfel.o", "xlbvariant_bpfel.o", filepath.Join("..", "decap", "decap_bpfel.o")} {
		for name, n := range verifiedCounts(t, obj) {
			t.Logf("%s %s: verifier processed %d (budget %d)", obj, name, n, verifierBudget)
			if n > verifierBudget {
				t.Errorf("%s %s: verifier processed %d instructions, over %d: split the program (tail calls or global functions)", obj, name, n, verifierBudget)
			}
		}
	}
	// The forwarder as xlbd loads it (its settings written): the loader's
	// constants change what the verifier walks.
	d := newTestDatapath(t, Options{})
	progs := loadedPrograms(d)
	if len(progs) < int(xlbXlbStageXLB_STAGE__MAX)+1 {
		t.Fatalf("loaded %d programs, want the entry and its %d stages at least", len(progs), xlbXlbStageXLB_STAGE__MAX)
	}
	for name, prog := range progs {
		info, err := prog.Info()
		if err != nil {
			t.Fatal(err)
		}
		n, ok := info.VerifiedInstructions()
		if !ok {
			testenv.Unavailable(t, "kernel reports no verified instruction count")
		}
		t.Logf("%s as loaded: verifier processed %d (budget %d)", name, n, verifierBudget)
		if n > verifierBudget {
			t.Errorf("%s as loaded: verifier processed %d instructions, over %d", name, n, verifierBudget)
		}
	}
}

// loadedPrograms are the programs of d's forwarder object, by name.
func loadedPrograms(d *Datapath) map[string]*ebpf.Program {
	out := map[string]*ebpf.Program{}
	v := reflect.ValueOf(d.objs.xlbPrograms)
	for i := 0; i < v.NumField(); i++ {
		if p, ok := v.Field(i).Interface().(*ebpf.Program); ok && p != nil {
			out[v.Type().Field(i).Tag.Get("ebpf")] = p
		}
	}
	return out
}

// verifiedCounts loads the object's programs as they are and returns the
// instructions the verifier processed for each, by program name.
func verifiedCounts(t *testing.T, obj string) map[string]uint32 {
	t.Helper()
	spec, err := ebpf.LoadCollectionSpec(obj)
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Programs) == 0 {
		t.Fatalf("%s: no programs", obj)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		t.Fatalf("%s: %v", obj, err)
	}
	defer coll.Close()
	counts := map[string]uint32{}
	for name, prog := range coll.Programs {
		info, err := prog.Info()
		if err != nil {
			t.Fatal(err)
		}
		n, ok := info.VerifiedInstructions()
		if !ok {
			testenv.Unavailable(t, "kernel reports no verified instruction count")
		}
		counts[name] = n
	}
	return counts
}
