package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/bench/throughput"
	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/testenv"
	"github.com/xlbproject/xlb/lab"
)

// The defence acceptance's parameters.
const (
	defenceSessions = 20
	// defenceCTEntries is node.conntrack_entries: 128 buckets of 8 ways
	// per CPU, so that a flood of 20 times the table is quick.
	defenceCTEntries = 1024
	defenceFloodX    = 20
)

// defenceModes are the gauge's mode labels.
var defenceModes = []string{"secure_tcp", "drop_entry", "drop_packet"}

// TestDefenceModesUnderFlood is the end-to-end test of the defence modes
// (node.defence at its defaults: secure_tcp at 50% fill, drop_entry at
// 75%, drop_packet at 90%, each off 10 points below): a spoofed SYN
// flood of at least 20 times the connection table's capacity (a small
// table, node.conntrack_entries 1024 per CPU), with no flood rate limit,
// at one node carrying 20 established TCP sessions (a message every
// 100 ms each).
//
// Checked: none of the 20 sessions breaks; every mode is seen on while
// the flood runs (xlb_defence_active{mode} 1 and xlbd's log "defence
// mode on") and off again within 20 s of its end (5 s below its off
// level, the gauge 0 and "defence mode off"), each switched on once (no
// flapping while the modes themselves empty the table); drop_packet left new flows untracked (flood_untracked), and
// >= 99% of the SYNs were still forwarded to a backend.
func TestDefenceModesUnderFlood(t *testing.T) {
	testenv.RequireNetns(t)
	testenv.RequireCommands(t, "nsenter", "ip", "cat")
	if runtime.NumCPU() < 2 {
		testenv.Unavailable(t, "the defence test needs 2 CPUs (the flood takes one), have %d", runtime.NumCPU())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l := newLab(ctx, t, lab.Config{})
	cfgPath := filepath.Join(l.Dir, "xlbd-defence.yaml")
	if err := os.WriteFile(cfgPath, l.XLBDConfig(0, lab.XLBDOptions{ConntrackEntries: defenceCTEntries}), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := l.StartXLBD(ctx, 0, cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.WaitForwarding(ctx, netip.AddrPortFrom(l.VIP4(), lab.DefaultPorts.HTTP), 20*time.Second, d); err != nil {
		t.Fatal(err)
	}
	pinned, err := datapath.OpenPinned(filepath.Join(datapath.BPFFSRoot, l.NodeName(0)))
	if err != nil {
		t.Fatal(err)
	}
	defer pinned.Close()
	node := l.Nodes[0]
	capacity := uint64(metric(t, l, 0, "xlb_conntrack_capacity_entries"))
	echo := netip.AddrPortFrom(l.VIP4(), lab.DefaultPorts.TCP)
	flood := newDefenceFlood(t, l, node, echo)
	defer l.Switch.Do(flood.Close)

	sess, err := lab.StartTCPSessions(ctx, l.Client.NS, echo, defenceSessions, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Stop()
	time.Sleep(2 * time.Second)
	if on := defenceGauges(t, l); on["secure_tcp"]+on["drop_entry"]+on["drop_packet"] != 0 {
		t.Fatalf("modes on before the flood: %v", on)
	}
	st0, err := pinned.Stats()
	if err != nil {
		t.Fatal(err)
	}

	// The flood, in runs of 3 s until it reached 20 times the capacity,
	// the gauges read every 250 ms meanwhile.
	seen := map[string]bool{}
	var frames, sunk uint64
	start := time.Now()
	for frames < defenceFloodX*capacity && time.Since(start) < time.Minute {
		done := make(chan error, 1)
		var fr throughput.FloodResult
		go func() {
			done <- l.Switch.Do(func() (err error) { fr, err = flood.Run(ctx, 3*time.Second); return err })
		}()
		for waiting := true; waiting; {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("flood: %v", err)
				}
				waiting = false
			case <-time.After(250 * time.Millisecond):
				for m, v := range defenceGauges(t, l) {
					seen[m] = seen[m] || v == 1
				}
			}
		}
		frames, sunk = frames+fr.Frames, sunk+fr.Sunk
	}
	end := time.Now()
	t.Logf("flood: %d SYNs in %v (%.0f pps), %d came back encapsulated; capacity %d entries: %.1f times",
		frames, end.Sub(start).Round(time.Millisecond), float64(frames)/end.Sub(start).Seconds(), sunk, capacity,
		float64(frames)/float64(capacity))

	// Off again once the flood's half-open entries are gone.
	var off time.Duration
	for {
		on := defenceGauges(t, l)
		if on["secure_tcp"]+on["drop_entry"]+on["drop_packet"] == 0 {
			off = time.Since(end)
			break
		}
		if time.Since(end) > 20*time.Second {
			t.Fatalf("modes still on 20 s after the flood: %v", on)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("every mode off %v after the flood", off.Round(time.Millisecond))
	time.Sleep(time.Second)
	res := sess.Stop()
	st1, err := pinned.Stats()
	if err != nil {
		t.Fatal(err)
	}
	untracked := st1["flood_untracked"] - st0["flood_untracked"]
	t.Logf("node: ct_miss +%d, flood_untracked +%d (drop_packet), ct_hit +%d; sessions: %d messages, %d breaks",
		st1["ct_miss"]-st0["ct_miss"], untracked, st1["ct_hit"]-st0["ct_hit"], res.Messages(), len(res.Breaks))

	if frames < defenceFloodX*capacity {
		t.Errorf("flood of %d SYNs, want >= %d (%d times the capacity)", frames, defenceFloodX*capacity, defenceFloodX)
	}
	for _, b := range res.Breaks[:min(5, len(res.Breaks))] {
		t.Errorf("break: %v", b)
	}
	if len(res.Breaks) > 0 {
		t.Errorf("%d of %d sessions' breaks, want 0", len(res.Breaks), defenceSessions)
	}
	for _, m := range defenceModes {
		if !seen[m] {
			t.Errorf("xlb_defence_active{mode=%q} never 1 during the flood", m)
		}
	}
	if untracked == 0 {
		t.Errorf("drop_packet left no new flow untracked")
	}
	if sunk < frames*99/100 {
		t.Errorf("%d of %d SYNs came back from the node encapsulated toward a backend, want >= 99%%", sunk, frames)
	}
	checkDefenceLog(t, d)
}

// newDefenceFlood makes the SYN flood generator toward echo on the node's
// switch port, from the last CPU, its output sunk (as in the SYN flood
// acceptance, synflood_test.go).
func newDefenceFlood(t *testing.T, l *lab.Lab, node *lab.Host, echo netip.AddrPort) *throughput.SYNFlood {
	t.Helper()
	nodeMAC, err := node.MAC(node.Iface)
	if err != nil {
		t.Fatal(err)
	}
	routerMAC, err := l.Router.MAC(l.Router.Iface)
	if err != nil {
		t.Fatal(err)
	}
	fo := throughput.FloodOptions{Kind: throughput.FloodSYN, Device: node.Short, DstMAC: nodeMAC, SrcMAC: routerMAC,
		VIP: echo.Addr(), Port: echo.Port(), Sources: netip.MustParseAddr("198.18.0.0"), CPU: runtime.NumCPU() - 1, Sink: true}
	var flood *throughput.SYNFlood
	if err := l.Switch.Do(func() (err error) {
		flood, err = throughput.NewSYNFlood(fo)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return flood
}

// defenceGauges reads xlb_defence_active of every mode of node 0; a mode
// missing from the metrics fails the test.
func defenceGauges(t *testing.T, l *lab.Lab) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, m := range defenceModes {
		name := fmt.Sprintf(`xlb_defence_active{mode=%q}`, m)
		out[m] = scrapeNode(t, l, 0, name, func(line string) bool { return strings.HasPrefix(line, name+" ") })
	}
	return out
}

// checkDefenceLog: xlbd logged each mode's switch on and, later, off.
func checkDefenceLog(t *testing.T, d *lab.Daemon) {
	t.Helper()
	b, err := os.ReadFile(d.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	find := func(from int, what, mode string) int {
		for i := from; i < len(lines); i++ {
			if strings.Contains(lines[i], what) && strings.Contains(lines[i], "mode="+mode) {
				return i
			}
		}
		return -1
	}
	for _, m := range defenceModes {
		on, n := find(0, "defence mode on", m), 0
		for i := on; i >= 0; i = find(i+1, "defence mode on", m) {
			n++
		}
		if n > 1 {
			t.Errorf("%s went on %d times: it flapped", m, n)
		}
		switch {
		case on < 0:
			t.Errorf("xlbd did not log %q for %s", "defence mode on", m)
		case find(on+1, "defence mode off", m) < 0:
			t.Errorf("xlbd did not log %q for %s after it went on", "defence mode off", m)
		default:
			t.Logf("xlbd: %s", lines[on])
		}
	}
}
