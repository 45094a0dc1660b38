package datapath

import (
	"net/netip"
	"runtime"
	"sync"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/state"
)

// TestMoveAcrossCPUsNeverMisses: the packets of one established flow run
// on two CPUs at once, so that its entry moves from one CPU's slice to
// the other's again and again while the other CPU forwards the flow too.
// No packet may find no entry (it would be a new flow, and round-robin
// sends a new flow to the next backend): every packet goes to the flow's
// backend, and in the end each of the flow's entries counts once. Freeing
// the entry there before storing it here missed a few times in 20,000.
func TestMoveAcrossCPUsNeverMisses(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU")
	}
	d := newTestDatapath(t, Options{})
	st, _ := schedState(state.Sched{Kind: state.SchedRR, Proto: 6, List: ents(1, 1, 1)})
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	var first netip.Addr
	onCPU(t, 0, func() { first = sendTCP(t, d, 4100, packet.SYN); sendTCP(t, d, 4100, packet.ACK) })
	rid := uint32(slicesIndexOf(first) + 1)
	before, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	f := packet.Flow{Src: client4, Dst: vip4, SrcPort: 4100, DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: packet.ACK}
	const perCPU = 20000
	var wg sync.WaitGroup
	others := make([]int, 2)
	errs := make([]error, 2)
	for cpu := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			restore, err := pinThread(cpu)
			if err != nil {
				errs[cpu] = err
				return
			}
			defer restore()
			frame, out := f.Frame(), make([]byte, 512)
			for range perCPU {
				opts := &ebpf.RunOptions{Data: frame, DataOut: out, Repeat: 1}
				ret, err := d.Program().Run(opts)
				if err != nil {
					errs[cpu] = err
					return
				}
				if ret != xdpTX || len(opts.DataOut) < 34 || netip.AddrFrom4([4]byte(opts.DataOut[30:34])) != first {
					others[cpu]++
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	after, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	moves := after["ct_remote_hit"] - before["ct_remote_hit"]
	misses := after["ct_miss"] - before["ct_miss"]
	t.Logf("%d packets on each CPU: %d moves between the slices, %d misses, %d packets to another backend",
		perCPU, moves, misses, others[0]+others[1])
	if others[0]+others[1] > 0 || misses > 0 {
		t.Errorf("%d conntrack misses, %d packets not to the flow's backend %s; want none", misses, others[0]+others[1], first)
	}
	if moves < 100 {
		t.Errorf("only %d moves between the CPUs' slices: the CPUs did not interleave", moves)
	}
	n := len(flowEntries(t, d, f))
	wantConns(t, d, rid, int64(n), 0)
	if n == 0 || n > 2 {
		t.Errorf("%d entries of the flow, want 1 (2 while one CPU could not free the other's)", n)
	}
}
