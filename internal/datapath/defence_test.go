package datapath

import (
	"io"
	"log/slog"
	"math"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/internal/maglev"
	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/state"
)

var testDefence = state.Defence{SecureTCP: 0.5, DropEntry: 0.75, DropPacket: 0.9, Hysteresis: 0.1,
	SynTimeout: 5 * time.Second, FinTimeout: 10 * time.Second, EntryIdle: time.Minute}

// TestDefenceStep: each mode goes on at its threshold and off only once
// the fill has stayed below it less the hysteresis for defenceCalm sweeps
// in a row; threshold 0 keeps a mode off.
func TestDefenceStep(t *testing.T) {
	type on = [len(DefenceModes)]bool
	var cur modeState
	for _, c := range []struct {
		fill   float64
		sweeps int // the fill found this many sweeps in a row
		want   on
	}{
		{0.3, 1, on{}},
		{0.5, 1, on{true, false, false}},
		{0.45, 10, on{true, false, false}}, // within the hysteresis
		{0.8, 1, on{true, true, false}},
		{0.95, 1, on{true, true, true}},
		{0.81, 10, on{true, true, true}},
		{0.79, defenceCalm - 1, on{true, true, true}}, // not calm long enough
		{0.85, 1, on{true, true, true}},               // the count starts again
		{0.79, defenceCalm - 1, on{true, true, true}},
		{0.79, 1, on{true, true, false}},
		{0.64, defenceCalm, on{true, false, false}},
		{0.39, defenceCalm - 1, on{true, false, false}},
		{0.39, 1, on{}},
	} {
		for range c.sweeps {
			cur = defenceStep(testDefence, cur, c.fill)
		}
		if cur.on != c.want {
			t.Fatalf("fill %v for %d sweeps: on %v, want %v", c.fill, c.sweeps, cur.on, c.want)
		}
	}
	off := testDefence
	off.DropEntry = 0
	if got := defenceStep(off, modeState{on: on{true, true, true}}, 1); got.on != (on{true, false, true}) {
		t.Fatalf("drop_entry 0 at a full table: on %v", got.on)
	}
}

// TestUntrackShare: drop_packet's share rises from its floor where the
// mode goes off to all flows at a full table.
func TestUntrackShare(t *testing.T) {
	for _, c := range []struct{ fill, want float64 }{
		{0.8, minUntrack}, {0.85, 0.25}, {0.9, 0.5}, {0.95, 0.75}, {1, 1},
	} {
		if got := untrackShare(testDefence, c.fill); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("fill %v: share %v, want %v", c.fill, got, c.want)
		}
	}
	full := testDefence
	full.DropPacket, full.Hysteresis = 1, 0
	if got := untrackShare(full, 1); got != 1 {
		t.Errorf("threshold 1: share %v at a full table", got)
	}
}

// TestDefenceValue: the map's value carries the modes on, the shorter of
// each mode's timeout and the normal one, and the share as a u32.
func TestDefenceValue(t *testing.T) {
	s := defenceSettings{def: testDefence, timeouts: defaultT}
	v := defenceValue(s, Defence{On: [3]bool{true, true, true}, Untracked: 1})
	if v.Modes != 7 || v.SynTimeout != Ticks(5*time.Second) || v.FinTimeout != Ticks(10*time.Second) ||
		v.Idle != Ticks(time.Minute) || v.Untrack != math.MaxUint32 {
		t.Fatalf("all on: %+v", v)
	}
	s.timeouts.TCPSyn = 2 * time.Second // shorter than secure_tcp's
	s.def.FinTimeout = 0                // 0: the normal one
	v = defenceValue(s, Defence{On: [3]bool{true, false, false}})
	if v.Modes != xlbXlbDefenceModeXLB_DEFENCE_SECURE_TCP || v.SynTimeout != Ticks(2*time.Second) ||
		v.FinTimeout != Ticks(defaultT.TCPFin) || v.Untrack != 0 || v.Idle != 0 {
		t.Fatalf("secure_tcp only: %+v", v)
	}
	if got := defenceFrom(defenceValue(s, Defence{On: [3]bool{false, true, true}, Untracked: 0.5})); got != [3]bool{false, true, true} {
		t.Fatalf("read back %v", got)
	}
}

// setDefence writes xlb_defence as xlbd's sweeper does.
func setDefence(t *testing.T, d *Datapath, v xlbDefenceState) {
	t.Helper()
	if err := d.objs.XlbDefence.Put(uint32(0), &v); err != nil {
		t.Fatal(err)
	}
}

// ageWays sets the time of every used way to age ago, as age(way) gives
// it (negative: leave the way alone).
func ageWays(t *testing.T, d *Datapath, age func(e uint64) time.Duration) {
	t.Helper()
	now, err := ctNow()
	if err != nil {
		t.Fatal(err)
	}
	var (
		idx uint32
		b   xlbCtBucket
	)
	it := d.objs.XlbCt.Iterate()
	for it.Next(&idx, &b) {
		changed := false
		for w, e := range b.Way {
			if e>>ctStateShift&3 == 0 {
				continue
			}
			if a := age(e); a >= 0 {
				b.Way[w] = e&^ctTimeMask | (now-uint64(a>>ctTickShift))&ctTimeMask
				changed = true
			}
		}
		if changed {
			if err := d.objs.XlbCt.Update(idx, &b, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
}

func flowTag(f packet.Flow) uint64 {
	return uint64(maglev.CTTag(maglev.FlowHash(maglev.Tuple{Src: f.Src, Dst: f.Dst, SrcPort: f.SrcPort, DstPort: f.DstPort, Proto: f.Proto})))
}

func tcpFlow(sport uint16, flags uint8) packet.Flow {
	return packet.Flow{Src: client4, Dst: vip4, SrcPort: sport, DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: flags}
}

// TestDefenceDropPacket: while drop_packet is on at a share of all, new
// flows are forwarded to the backend the Maglev table gives, untracked
// and counted; tracked flows still hit. At half, about half are
// untracked; off, none.
func TestDefenceDropPacket(t *testing.T) {
	d := newTestDatapath(t, Options{})
	pinCPU(t)
	st, _ := schedState(state.Sched{Kind: state.SchedMaglev, Proto: 6})
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	est := map[uint16]netip.Addr{}
	for p := uint16(1000); p < 1020; p++ {
		est[p] = sendTCP(t, d, p, packet.SYN)
		sendTCP(t, d, p, packet.ACK)
	}
	setDefence(t, d, xlbDefenceState{Modes: xlbXlbDefenceModeXLB_DEFENCE_DROP_PACKET, Untrack: math.MaxUint32})
	before, _ := d.Stats()
	untracked := map[uint16]netip.Addr{}
	for p := uint16(2000); p < 2100; p++ {
		untracked[p] = sendTCP(t, d, p, packet.SYN)
		if e := flowEntries(t, d, tcpFlow(p, packet.SYN)); len(e) != 0 {
			t.Fatalf("port %d tracked while drop_packet takes all: %+v", p, e)
		}
	}
	for p, b := range est {
		if got := sendTCP(t, d, p, packet.ACK); got != b {
			t.Fatalf("established port %d went to %s, its entry says %s", p, got, b)
		}
	}
	after, _ := d.Stats()
	if n := after["flood_untracked"] - before["flood_untracked"]; n != 100 {
		t.Errorf("flood_untracked +%d, want 100", n)
	}
	if n := after["ct_hit"] - before["ct_hit"]; n != uint64(len(est)) {
		t.Errorf("ct_hit +%d, want %d (the established flows)", n, len(est))
	}
	// Half: about half of 2000 new flows untracked.
	setDefence(t, d, xlbDefenceState{Modes: xlbXlbDefenceModeXLB_DEFENCE_DROP_PACKET, Untrack: 1 << 31})
	before, _ = d.Stats()
	for p := uint16(3000); p < 5000; p++ {
		sendTCP(t, d, p, packet.SYN)
	}
	after, _ = d.Stats()
	if n := after["flood_untracked"] - before["flood_untracked"]; n < 800 || n > 1200 {
		t.Errorf("share 1/2: %d of 2000 new flows untracked, want about 1000", n)
	}
	// Off: the flows left untracked are tracked now, on the backend they had.
	setDefence(t, d, xlbDefenceState{})
	before, _ = d.Stats()
	for p, b := range untracked {
		if got := sendTCP(t, d, p, packet.ACK); got != b {
			t.Fatalf("port %d went to %s untracked, to %s tracked", p, b, got)
		}
		if e := flowEntries(t, d, tcpFlow(p, packet.ACK)); len(e) != 1 {
			t.Fatalf("port %d: %d entries with drop_packet off, want 1", p, len(e))
		}
	}
	after, _ = d.Stats()
	if n := after["flood_untracked"] - before["flood_untracked"]; n != 0 {
		t.Errorf("drop_packet off: flood_untracked +%d", n)
	}
}

// TestDefenceSecureTCP: SYN and closing entries idle 12 s outlive their
// normal timeouts (1 m, 2 m); with secure_tcp on (5 s, 10 s) the sweep
// frees them, and established ones stay.
func TestDefenceSecureTCP(t *testing.T) {
	d := newTestDatapath(t, Options{})
	pinCPU(t)
	st, _ := schedState(state.Sched{Kind: state.SchedMaglev, Proto: 6})
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	for i := range uint16(10) {
		sendTCP(t, d, 100+i, packet.SYN)
		sendTCP(t, d, 200+i, packet.SYN)
		sendTCP(t, d, 200+i, packet.ACK)
		sendTCP(t, d, 200+i, packet.FIN|packet.ACK)
		sendTCP(t, d, 300+i, packet.SYN)
		sendTCP(t, d, 300+i, packet.ACK)
	}
	ageWays(t, d, func(uint64) time.Duration { return 12 * time.Second })
	if freed, live, err := d.SweepConntrack(); err != nil || freed != 0 || live != 30 {
		t.Fatalf("secure_tcp off: freed %d, live %d (%v); want 0, 30", freed, live, err)
	}
	setDefence(t, d, defenceValue(defenceSettings{def: testDefence, timeouts: defaultT}, Defence{On: [3]bool{true, false, false}}))
	if freed, live, err := d.SweepConntrack(); err != nil || freed != 20 || live != 10 {
		t.Fatalf("secure_tcp on: freed %d, live %d (%v); want 20, 10", freed, live, err)
	}
	for i := range uint16(10) {
		if e := flowEntries(t, d, tcpFlow(300+i, packet.ACK)); len(e) != 1 || e[0].State != uint8(xlbXlbCtStateXLB_CT_ESTABLISHED) {
			t.Fatalf("established port %d: %+v", 300+i, e)
		}
	}
}

// TestDefenceDropEntrySweep: with drop_entry on (idle 1 m) the sweep
// frees established entries idle 90 s and SYN entries idle 2 s, and keeps
// established ones idle 10 s; off, it frees none of them.
func TestDefenceDropEntrySweep(t *testing.T) {
	d := newTestDatapath(t, Options{})
	pinCPU(t)
	st, _ := schedState(state.Sched{Kind: state.SchedMaglev, Proto: 6})
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	ages := map[uint64]time.Duration{}
	for i := range uint16(10) {
		sendTCP(t, d, 100+i, packet.SYN)
		ages[flowTag(tcpFlow(100+i, 0))] = 2 * time.Second
		for _, p := range []uint16{200 + i, 300 + i} {
			sendTCP(t, d, p, packet.SYN)
			sendTCP(t, d, p, packet.ACK)
		}
		ages[flowTag(tcpFlow(200+i, 0))] = 90 * time.Second
		ages[flowTag(tcpFlow(300+i, 0))] = 10 * time.Second
	}
	ageWays(t, d, func(e uint64) time.Duration { return ages[e>>ctTagShift] })
	if freed, live, err := d.SweepConntrack(); err != nil || freed != 0 || live != 30 {
		t.Fatalf("drop_entry off: freed %d, live %d (%v); want 0, 30", freed, live, err)
	}
	setDefence(t, d, defenceValue(defenceSettings{def: testDefence, timeouts: defaultT}, Defence{On: [3]bool{false, true, false}}))
	if freed, live, err := d.SweepConntrack(); err != nil || freed != 20 || live != 10 {
		t.Fatalf("drop_entry on: freed %d, live %d (%v); want 20, 10", freed, live, err)
	}
	for i := range uint16(10) {
		if e := flowEntries(t, d, tcpFlow(300+i, packet.ACK)); len(e) != 1 {
			t.Fatalf("established port %d idle 10 s: %+v", 300+i, e)
		}
	}
}

// TestDefenceDropEntryVictim: a new flow into a full bucket of one fresh
// SYN entry and seven established entries idle 10..16 ticks replaces the
// one idle longest; with drop_entry on, the SYN entry.
func TestDefenceDropEntryVictim(t *testing.T) {
	for _, on := range []bool{false, true} {
		d := newTestDatapath(t, Options{})
		pinCPU(t)
		st, _ := schedState(state.Sched{Kind: state.SchedMaglev, Proto: 6})
		if _, err := d.Apply(st); err != nil {
			t.Fatal(err)
		}
		if on {
			setDefence(t, d, xlbDefenceState{Modes: xlbXlbDefenceModeXLB_DEFENCE_DROP_ENTRY, Idle: Ticks(time.Minute)})
		}
		f := tcpFlow(7000, packet.SYN)
		h := maglev.FlowHash(maglev.Tuple{Src: f.Src, Dst: f.Dst, SrcPort: f.SrcPort, DstPort: f.DstPort, Proto: f.Proto})
		shift := CTGeometry(d.opts.ConntrackEntries)
		idx := uint32(thisCPU(t))<<shift | maglev.CTBucket(h, 1<<shift)
		now, err := ctNow()
		if err != nil {
			t.Fatal(err)
		}
		way := func(k int, st uint64, age uint64) uint64 {
			tag := (uint64(maglev.CTTag(h)) ^ uint64(k+1)) & (1<<(64-ctTagShift) - 1)
			return tag<<ctTagShift | uint64(k%3+1)<<ctRealShift | st<<ctStateShift | (now-age)&ctTimeMask
		}
		var b xlbCtBucket
		b.Way[0] = way(0, uint64(xlbXlbCtStateXLB_CT_SYN), 0)
		for k := 1; k < len(b.Way); k++ {
			b.Way[k] = way(k, uint64(xlbXlbCtStateXLB_CT_ESTABLISHED), uint64(9+k))
		}
		if err := d.objs.XlbCt.Update(idx, &b, 0); err != nil {
			t.Fatal(err)
		}
		orig := b
		sendTCP(t, d, 7000, packet.SYN)
		if err := d.objs.XlbCt.Lookup(idx, &b); err != nil {
			t.Fatal(err)
		}
		gone := -1
		for k := range b.Way {
			if b.Way[k]>>ctTagShift == uint64(maglev.CTTag(h)) {
				gone = k
			} else if b.Way[k] != orig.Way[k] {
				t.Fatalf("drop_entry %v: way %d changed and is not the new flow's", on, k)
			}
		}
		want := len(b.Way) - 1 // the established way idle longest
		if on {
			want = 0 // the SYN way
		}
		if gone != want {
			t.Errorf("drop_entry %v: the new flow took way %d, want %d", on, gone, want)
		}
	}
}

// thisCPU is the CPU pinCPU pinned the test to.
func thisCPU(t *testing.T) int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	for cpu := range 1024 {
		if set.IsSet(cpu) {
			return cpu
		}
	}
	t.Fatal("no CPU")
	return 0
}

// TestDefenceSweeperSwitches: the sweep measures the fill of the fullest
// slice, and defend switches the modes by it, with hysteresis, into the
// map.
func TestDefenceSweeperSwitches(t *testing.T) {
	d := newTestDatapath(t, Options{ConntrackEntries: 1024}) // 128 buckets of 8 ways per CPU
	pinCPU(t)
	st, _ := schedState(state.Sched{Kind: state.SchedMaglev, Proto: 6})
	st.Node.Defence = testDefence
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	for p := range uint16(1000) {
		sendTCP(t, d, 10000+p, packet.SYN)
	}
	_, live, fill, err := d.sweepConntrack()
	if err != nil {
		t.Fatal(err)
	}
	if want := float64(live) / 1024; fill != want || fill < 0.75 {
		t.Fatalf("fill %v of %d live ways on one CPU, want %v (> 0.75)", fill, live, want)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	def, ms, err := d.defend(modeState{}, fill, log)
	if err != nil {
		t.Fatal(err)
	}
	var v xlbDefenceState
	if err := d.objs.XlbDefence.Lookup(uint32(0), &v); err != nil {
		t.Fatal(err)
	}
	if defenceFrom(v) != def.On || !def.Active(SecureTCP) || !def.Active(DropEntry) {
		t.Fatalf("fill %v: on %v, map %+v", fill, def.On, v)
	}
	for range defenceCalm {
		def, ms, _ = d.defend(ms, 0.45, log)
	}
	if def.On != [3]bool{true, false, false} {
		t.Fatalf("fill 0.45 for %d sweeps after %v: on %v", defenceCalm, fill, def.On)
	}
	for range defenceCalm {
		def, ms, _ = d.defend(ms, 0.1, log)
	}
	if err := d.objs.XlbDefence.Lookup(uint32(0), &v); err != nil {
		t.Fatal(err)
	}
	if def.On != [3]bool{} || v != (xlbDefenceState{}) {
		t.Fatalf("fill 0.1 for %d sweeps: on %v, map %+v", defenceCalm, def.On, v)
	}
}
