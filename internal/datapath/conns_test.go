package datapath

import (
	"net/netip"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/state"
)

// sendTCP sends one TCP packet of client4:sport -> vip4:80 with flags and
// returns its backend.
func sendTCP(t *testing.T, d *Datapath, sport uint16, flags uint8) netip.Addr {
	t.Helper()
	f := packet.Flow{Src: client4, Dst: vip4, SrcPort: sport, DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: flags}
	verdict, out := run(t, d.Program(), f.Frame())
	if verdict != xdpTX || len(out) < 34 {
		t.Fatalf("port %d flags %#x: verdict %d", sport, flags, verdict)
	}
	return netip.AddrFrom4([4]byte(out[30:34]))
}

func wantConns(t *testing.T, d *Datapath, rid uint32, active, inactive int64) {
	t.Helper()
	c, err := d.RealConns(rid)
	if err != nil {
		t.Fatal(err)
	}
	if c.Active != active || c.Inactive != inactive {
		t.Fatalf("real %d: %d active, %d inactive; want %d, %d", rid, c.Active, c.Inactive, active, inactive)
	}
}

// The counts follow each flow's state (SYN and closing inactive,
// established active) and a sweep frees the flows idle past their
// timeout, uncounting them; lc sends new flows to the least loaded.
func TestConnCounts(t *testing.T) {
	d := newTestDatapath(t, Options{})
	st, _ := schedState(state.Sched{Kind: state.SchedLC, Proto: 6, List: ents(1, 1, 1)})
	st.Node.Timeouts = Timeouts{TCPSyn: time.Second, TCP: time.Hour, TCPFin: time.Hour, UDP: time.Hour}
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	// lc over three idle backends: each new flow to the least loaded, so
	// 30 connections (SYN then ACK) are 10 each, all active.
	on := map[netip.Addr][]uint16{}
	for i := range 30 {
		port := uint16(1000 + i)
		b := sendTCP(t, d, port, packet.SYN)
		if again := sendTCP(t, d, port, packet.ACK); again != b {
			t.Fatalf("ACK went to %s, SYN to %s", again, b)
		}
		on[b] = append(on[b], port)
	}
	for rid := uint32(1); rid <= 3; rid++ {
		wantConns(t, d, rid, 10, 0)
	}
	// Close the connections of backend 1: closing counts inactive.
	for _, port := range on[schedBackends[0]] {
		sendTCP(t, d, port, packet.FIN|packet.ACK)
	}
	wantConns(t, d, 1, 0, 10)
	// 10 new connections: all to backend 1, overhead 10 + k against 2560.
	for i := range 10 {
		if b := sendTCP(t, d, uint16(2000+i), packet.SYN); b != schedBackends[0] {
			t.Fatalf("new connection %d went to %s, want %s (least connections)", i, b, schedBackends[0])
		}
	}
	wantConns(t, d, 1, 0, 20)
	// The SYN-only flows time out (1 s): the sweep frees and uncounts them.
	time.Sleep(1600 * time.Millisecond)
	freed, live, err := d.SweepConntrack()
	if err != nil {
		t.Fatal(err)
	}
	if freed != 10 || live != 30 {
		t.Errorf("sweep freed %d, left %d live; want 10, 30", freed, live)
	}
	wantConns(t, d, 1, 0, 10)
	wantConns(t, d, 2, 10, 0)
}

// onCPU runs fn on CPU cpu (the test-run program sees that CPU).
func onCPU(t *testing.T, cpu int, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		t.Fatal(err)
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	defer unix.SchedSetaffinity(0, &old)
	fn()
}

// A flow whose packets move to another CPU moves its entry: one entry,
// counted once, in its new state.
func TestConnCountsAcrossCPUs(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU")
	}
	d := newTestDatapath(t, Options{})
	st, _ := schedState(state.Sched{Kind: state.SchedRR, Proto: 6, List: ents(1, 1, 1)})
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	var first, second netip.Addr
	onCPU(t, 0, func() { first = sendTCP(t, d, 4000, packet.SYN) })
	rid := uint32(slicesIndexOf(first) + 1)
	wantConns(t, d, rid, 0, 1)
	onCPU(t, 1, func() { second = sendTCP(t, d, 4000, packet.ACK) })
	if second != first {
		t.Fatalf("ACK on CPU 1 went to %s, SYN on CPU 0 to %s", second, first)
	}
	wantConns(t, d, rid, 1, 0)
	onCPU(t, 0, func() { second = sendTCP(t, d, 4000, packet.ACK) })
	if second != first {
		t.Fatalf("ACK back on CPU 0 went to %s, want %s", second, first)
	}
	wantConns(t, d, rid, 1, 0)
	n := 0
	if err := d.ScanConntrack(func(e CTEntry) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("%d entries for one flow, want 1", n)
	}
}

func slicesIndexOf(a netip.Addr) int {
	for i, b := range schedBackends {
		if a == b {
			return i
		}
	}
	return -1
}

// TestSweepKeepsEntriesWrittenAhead: a way whose last-seen time is a tick
// after the sweep's clock (the forwarder refreshed it while the sweep ran
// on a clock xlbd read before the run; or another CPU wrote it after this
// one read its clock) is live: neither the sweep nor the forwarder takes
// it for an entry idle for hours (the 16-bit time wrapped) and frees or
// replaces it.
func TestSweepKeepsEntriesWrittenAhead(t *testing.T) {
	d := newTestDatapath(t, Options{})
	st, _ := schedState(state.Sched{Kind: state.SchedLC, Proto: 6, List: ents(1, 1, 1)})
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	pinCPU(t) // the flows' packets hit their entries on this CPU
	backend := map[uint16]netip.Addr{}
	for i := range 12 {
		port := uint16(3000 + i)
		backend[port] = sendTCP(t, d, port, packet.SYN)
		sendTCP(t, d, port, packet.ACK)
	}
	// Every used way one tick ahead of the clock.
	now, err := ctNow()
	if err != nil {
		t.Fatal(err)
	}
	var (
		idx   uint32
		b     xlbCtBucket
		moved int
	)
	it := d.objs.XlbCt.Iterate()
	for it.Next(&idx, &b) {
		changed := false
		for w, e := range b.Way {
			if e>>ctStateShift&3 == 0 {
				continue
			}
			b.Way[w] = e&^ctTimeMask | (now+1)&ctTimeMask
			changed = true
			moved++
		}
		if changed {
			if err := d.objs.XlbCt.Update(idx, &b, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	if moved != 12 {
		t.Fatalf("%d used ways, want 12", moved)
	}
	freed, live, err := d.SweepConntrack()
	if err != nil {
		t.Fatal(err)
	}
	if freed != 0 || live != 12 {
		t.Fatalf("sweep over ways a tick ahead: freed %d, left %d live; want 0, 12", freed, live)
	}
	before, _ := d.Stats()
	for port, b := range backend {
		if got := sendTCP(t, d, port, packet.ACK); got != b {
			t.Fatalf("port %d: went to %s, its entry says %s", port, got, b)
		}
	}
	after, _ := d.Stats()
	if hits := after["ct_hit"] - before["ct_hit"]; hits != 12 {
		t.Fatalf("%d conntrack hits of 12 packets of flows tracked a tick ahead (misses %d)", hits, after["ct_miss"]-before["ct_miss"])
	}
	for rid := uint32(1); rid <= 3; rid++ {
		wantConns(t, d, rid, 4, 0)
	}
}
