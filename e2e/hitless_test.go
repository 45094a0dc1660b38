package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/lab"
)

// ctEntries counts the node's tracked flows (the connection table).
func (e *env) ctEntries(t *testing.T) int {
	t.Helper()
	out, err := e.ctl(t, "-o", "json", "conntrack", "--limit", "1")
	if err != nil {
		t.Fatalf("conntrack: %v\n%s", err, out)
	}
	var n int
	if i := strings.Index(out, `"in_use":`); i >= 0 {
		fmt.Sscanf(strings.TrimLeft(out[i+len(`"in_use":`):], ` "`), "%d", &n)
	}
	return n
}

// TestRestartsAndLiveUpdatesUnderLoad (F-CTL6, F-CFG4): with 200,000
// sequence-numbered UDP datagrams in flight (20 flows) and 100 long-lived
// TCP connections, xlbd is restarted 5 times and 100 config commits add
// and remove services and backends the measured flows do not use: no
// datagram is lost, every datagram of a flow reaches one backend, no
// connection breaks, and the tracked flows survive the restarts.
func TestRestartsAndLiveUpdatesUnderLoad(t *testing.T) {
	e := setup(t, []int{1, 1, 1})
	ctx := context.Background()
	sess, err := lab.StartTCPSessions(ctx, e.lab.Client.NS, e.echo4(), 100, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg     sync.WaitGroup
		udp    lab.UDPResult
		udpErr error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		udp, udpErr = lab.UDPFlows(ctx, e.lab.Client.NS, e.udp4(), 20, 10000)
	}()
	time.Sleep(500 * time.Millisecond)
	ctBefore := e.ctEntries(t)

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

	// 5 restarts.
	for i := 0; i < 5; i++ {
		if err := e.xlbd.Stop(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		d, err := e.lab.StartXLBD(ctx, 0, e.config)
		if err != nil {
			t.Fatal(err)
		}
		e.xlbd = d
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err = d.WaitOutput(wctx, "config committed", 1, 20*time.Second)
		cancel()
		if err != nil {
			t.Fatalf("restart %d: %v\n%s", i, err, d.Output())
		}
		if !strings.Contains(d.Output(), "adopted pinned forwarder") {
			t.Fatalf("restart %d did not adopt the pinned forwarder", i)
		}
	}
	ctAfter := e.ctEntries(t)
	wg.Wait()
	res := sess.Stop()
	if udpErr != nil {
		t.Fatal(udpErr)
	}
	sent := 0
	for _, f := range udp.Flows {
		sent += f.Sent
	}
	t.Logf("UDP: %d datagrams sent, %d lost, per backend %v; TCP: %d sessions, %d messages, %d breaks; tracked flows %d before, %d after",
		sent, udp.Lost(), udp.Counts(), len(res.Sessions), res.Messages(), len(res.Breaks), ctBefore, ctAfter)
	if sent < 200000 || udp.Lost() != 0 {
		t.Errorf("UDP: %d sent, %d lost", sent, udp.Lost())
	}
	if split := udp.Split(); len(split) > 0 {
		t.Errorf("%d UDP flows reached more than one backend", len(split))
	}
	if len(res.Breaks) > 0 {
		t.Errorf("%d TCP breaks, first: %v", len(res.Breaks), res.Breaks[0])
	}
	if ctAfter < ctBefore {
		t.Errorf("tracked flows %d -> %d across restarts", ctBefore, ctAfter)
	}
}

var _ = netip.Addr{}
