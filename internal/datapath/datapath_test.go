package datapath

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"path/filepath"
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

// TestVerifierBudget keeps the forwarder far from the verifier's limit of
// one million processed instructions, so features can be added.
func TestVerifierBudget(t *testing.T) {
	d := newTestDatapath(t, Options{})
	info, err := d.Program().Info()
	if err != nil {
		t.Fatal(err)
	}
	n, ok := info.VerifiedInstructions()
	if !ok {
		testenv.Unavailable(t, "kernel reports no verified instruction count")
	}
	insns, _ := info.Instructions()
	t.Logf("forwarder: %d instructions, verifier processed %d (limit 1000000)", len(insns), n)
	if n > 200_000 {
		t.Fatalf("verifier processed %d instructions: split the program (BPF-to-BPF calls or tail calls)", n)
	}
}
