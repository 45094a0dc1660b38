package datapath

import (
	"math/rand/v2"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/maglev"
	"github.com/xlbproject/xlb/internal/packet"
	"golang.org/x/sys/unix"
)

// pinThread keeps the calling goroutine on its thread and that thread on
// cpu until restore is called: test runs then use that CPU's slices and
// counters.
func pinThread(cpu int) (restore func(), err error) {
	runtime.LockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	return func() {
		unix.SchedSetaffinity(0, &old)
		runtime.UnlockOSThread()
	}, nil
}

// flowEntries returns the connection table's entries of flow f (every
// CPU's slice).
func flowEntries(t *testing.T, d *Datapath, f packet.Flow) []CTEntry {
	t.Helper()
	h := maglev.FlowHash(maglev.Tuple{Src: f.Src, Dst: f.Dst, SrcPort: f.SrcPort, DstPort: f.DstPort, Proto: f.Proto})
	bucket, tag := maglev.CTBucket(h, 1<<CTGeometry(d.opts.ConntrackEntries)), maglev.CTTag(h)
	var out []CTEntry
	if err := d.ScanConntrack(func(e CTEntry) bool {
		if e.Bucket == bucket && e.Tag == tag {
			out = append(out, e)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// ctTick is a conntrack tick and a little more.
const ctTick = time.Duration(1)<<ctTickShift + 20*time.Millisecond

// randomFlood is n packets of random tuples from 198.18.0.0/15: TCP ACKs
// to vip4:80, or UDP to vip4:53.
func randomFlood(rng *rand.Rand, n int, proto uint8) []packet.Flow {
	out := make([]packet.Flow, n)
	for i := range out {
		a := 198<<24 | 18<<16 | rng.Uint32N(1<<17)
		f := packet.Flow{Src: netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}),
			Dst: vip4, SrcPort: uint16(1024 + rng.UintN(60000)), DstPort: 80, Proto: proto}
		if proto == packet.ProtoTCP {
			f.TCPFlags = packet.ACK
		} else {
			f.DstPort = 53
		}
		out[i] = f
	}
	return out
}

// lostEntries counts the flows of est without an entry.
func lostEntries(t *testing.T, d *Datapath, est []packet.Flow) int {
	lost := 0
	for _, f := range est {
		if len(flowEntries(t, d, f)) == 0 {
			lost++
		}
	}
	return lost
}

// TestFloodDefenceNewFlows: over the per-CPU limit for new flows whose
// packet is not a SYN (node.flood_new_flow_rate), a flood of TCP ACKs or of
// UDP datagrams from random tuples is forwarded untracked and evicts no
// established entry; without the limit the same flood does.
func TestFloodDefenceNewFlows(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out conntrack ticks, tens of seconds: make test runs it, -short (make check) does not")
	}
	d := newTestDatapath(t, Options{ConntrackEntries: 1024}) // 128 buckets per CPU, 8 ways
	pinCPU(t)
	st := fixtureState()
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	var est []packet.Flow
	for i := range 48 {
		est = append(est,
			packet.Flow{Src: client4, Dst: vip4, SrcPort: uint16(1000 + i), DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: packet.ACK},
			packet.Flow{Src: client4, Dst: vip4, SrcPort: uint16(1000 + i), DstPort: 53, Proto: packet.ProtoUDP})
	}
	for _, f := range est {
		if ret, _ := run(t, d.Program(), f.Frame()); ret != xdpTX {
			t.Fatalf("established flow %v: verdict %d", f, ret)
		}
	}
	if n := lostEntries(t, d, est); n != 0 {
		t.Fatalf("%d of %d flows not tracked before the flood", n, len(est))
	}
	st.Node.FloodSynRate, st.Node.FloodNewFlowRate = 4, 4 // one new flow per tick each
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, kind := range []struct {
		name  string
		proto uint8
	}{{"ACK", packet.ProtoTCP}, {"UDP", packet.ProtoUDP}} {
		time.Sleep(ctTick) // the established entries are older than the flood's: first to go
		before, _ := d.Stats()
		for i, f := range randomFlood(rng, 5000, kind.proto) {
			if ret, _ := run(t, d.Program(), f.Frame()); ret != xdpTX {
				t.Fatalf("%s flood packet %d: verdict %d, want forwarded", kind.name, i, ret)
			}
		}
		after, _ := d.Stats()
		untracked := after["flood_untracked"] - before["flood_untracked"]
		// Both floods share the budget of non-SYN flows: the second may
		// find flood mode still on (one activation for both).
		if after["flood_activations"] == 0 || untracked < 4900 {
			t.Fatalf("%s flood: activations %d, untracked +%d of 5000", kind.name,
				after["flood_activations"], untracked)
		}
		if n := lostEntries(t, d, est); n != 0 {
			t.Fatalf("%s flood: %d of %d established flows lost their entry", kind.name, n, len(est))
		}
		t.Logf("%s flood of 5000 random tuples: %d untracked, no established entry lost", kind.name, untracked)
	}
	before, _ := d.Stats()
	for _, f := range est {
		run(t, d.Program(), f.Frame())
	}
	after, _ := d.Stats()
	if hits := after["ct_hit"] - before["ct_hit"]; hits != uint64(len(est)) {
		t.Fatalf("after the floods %d of %d established flows hit", hits, len(est))
	}
	// Control: without the limit the same flood evicts.
	st.Node.FloodSynRate, st.Node.FloodNewFlowRate = 0, 0
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	time.Sleep(ctTick)
	for _, f := range randomFlood(rng, 5000, packet.ProtoUDP) {
		run(t, d.Program(), f.Frame())
	}
	lost := lostEntries(t, d, est)
	if lost == 0 {
		t.Fatalf("control: an unlimited flood evicted no established entry: the test measures nothing")
	}
	t.Logf("control without a limit: the UDP flood evicted %d of %d established entries", lost, len(est))
}
