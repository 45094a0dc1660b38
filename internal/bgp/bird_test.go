package bgp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/xlbproject/xlb/internal/testenv"
)

// TestBIRDGracefulRestart runs BIRD 2 as the router in one network namespace
// and the speaker in another (a helper process: this test binary re-executed
// under nsenter --net, since GoBGP opens its sockets from its own goroutines,
// which a setns(2) on one locked thread would not reach). It checks that
// BIRD learns the VIPs, keeps them in its kernel FIB through a Stop(true)
// restart and a SIGKILL restart, removes them after GracefulShutdown, at
// once on Stop(false), and after the hold time when the speaker hangs.
func TestBIRDGracefulRestart(t *testing.T) {
	testenv.RequireNetns(t)
	testenv.RequireCommands(t, "ip", "nsenter", "bird", "birdc")

	tag := fmt.Sprintf("%d", os.Getpid()%100000)
	rns, nns := "xlbbgp-r"+tag, "xlbbgp-n"+tag
	setupNetns(t, rns, nns)
	dir := t.TempDir()
	sock := startBIRD(t, rns, dir)

	vip4, vip6 := netip.MustParsePrefix("192.0.2.10/32"), netip.MustParsePrefix("2001:db8:1::10/128")
	cfg := Config{
		ASN: 65001, RouterID: netip.MustParseAddr("10.99.0.2"), ListenPort: 179,
		GracefulRestartTime: 10 * time.Second, ShutdownWait: time.Second,
		NextHop6: netip.MustParseAddr("fd00:99::2"),
		Peers:    []Peer{{Addr: netip.MustParseAddr("10.99.0.1"), ASN: 65000, HoldTime: 3 * time.Second, Keepalive: time.Second}},
	}
	announce := []netip.Prefix{vip4, vip6}
	fib := newFIBWatch(t, rns, vip4, vip6)

	// 1. A first speaker: BIRD learns both VIPs and installs them.
	h1 := startHelper(t, nns, cfg, announce)
	waitBIRDEstablished(t, sock, 10*time.Second)
	for _, p := range announce {
		out := birdc(t, sock, "show", "route", "all", "for", p.String())
		if !strings.Contains(out, p.String()) || !strings.Contains(out, "xlb1") || !strings.Contains(out, "BGP.origin: IGP") {
			t.Fatalf("BIRD did not learn %v from the speaker with origin IGP:\n%s", p, out)
		}
	}
	out := birdc(t, sock, "show", "route", "all", "for", vip6.String())
	if !strings.Contains(out, "fd00:99::2") {
		t.Errorf("IPv6 VIP over the IPv4 session: next hop fd00:99::2 missing:\n%s", out)
	}
	fib.waitPresent(t, 5*time.Second)
	fib.start()

	// 2. Stop(true): no NOTIFICATION; BIRD keeps the routes (stale).
	h1.command(t, "stop-graceful")
	h1.wait(t)
	waitFor(t, 5*time.Second, "BIRD in graceful restart for the speaker", func() (bool, string) {
		out := birdc(t, sock, "show", "protocols", "all", "xlb1")
		return strings.Contains(out, "Neighbor graceful restart active"), out
	})
	time.Sleep(time.Second) // the routes stay while the speaker is away
	if out := birdc(t, sock, "show", "route", "for", vip4.String()); !strings.Contains(out, vip4.String()) {
		t.Fatalf("BIRD dropped %v during the graceful restart:\n%s", vip4, out)
	}

	// 3. A restarting speaker re-establishes and refreshes the routes.
	cfg.Restarting = true
	h2 := startHelper(t, nns, cfg, announce)
	waitBIRDEstablished(t, sock, 10*time.Second)
	waitFor(t, 5*time.Second, "graceful restart finished at BIRD", func() (bool, string) {
		out := birdc(t, sock, "show", "protocols", "all", "xlb1")
		return !strings.Contains(out, "graceful restart active"), out
	})
	if st := h2.status(t); st[0].State != "established" || !st[0].GracefulRestart || st[0].Advertised != 2 {
		t.Errorf("restarted speaker status = %+v", st)
	}

	// 4. SIGKILL: the kernel closes the socket, again without NOTIFICATION.
	h2.kill(t)
	waitFor(t, 5*time.Second, "BIRD in graceful restart after SIGKILL", func() (bool, string) {
		out := birdc(t, sock, "show", "protocols", "all", "xlb1")
		return strings.Contains(out, "Neighbor graceful restart active"), out
	})
	// 4b. Restarted and stopped again soon after: before its session is
	// opened, while it is opening, and once established but before the
	// deferred table went out. A session closed in the last two windows
	// carried no table and BIRD would drop the routes at once; the stop
	// waits for it, so the routes stay through all three.
	for _, after := range []time.Duration{0, time.Second, 2 * time.Second} {
		hq := startHelper(t, nns, cfg, announce)
		time.Sleep(after)
		hq.command(t, "stop-graceful")
		hq.wait(t)
		waitFor(t, 5*time.Second, "BIRD in graceful restart after a quick second restart", func() (bool, string) {
			out := birdc(t, sock, "show", "protocols", "all", "xlb1")
			return strings.Contains(out, "Neighbor graceful restart active"), out
		})
		if out := birdc(t, sock, "show", "route", "for", vip4.String()); !strings.Contains(out, vip4.String()) {
			t.Fatalf("BIRD dropped %v after a restart stopped %v after its start:\n%s", vip4, after, out)
		}
	}
	h3 := startHelper(t, nns, cfg, announce)
	waitBIRDEstablished(t, sock, 10*time.Second)
	waitFor(t, 5*time.Second, "graceful restart finished at BIRD", func() (bool, string) {
		out := birdc(t, sock, "show", "protocols", "all", "xlb1")
		return !strings.Contains(out, "graceful restart active"), out
	})
	if n, of := fib.stop(); n > 0 {
		t.Fatalf("a VIP was missing from the router's kernel FIB in %d of %d samples during the restarts", n, of)
	} else {
		t.Logf("both VIPs in the router's kernel FIB in all %d samples (10 ms apart) across two restarts", of)
	}

	// 5. GracefulShutdown: the community, then the withdrawal after the wait.
	start := time.Now()
	h3.send(t, "drain")
	waitFor(t, 900*time.Millisecond, "GRACEFUL_SHUTDOWN community at BIRD", func() (bool, string) {
		out := birdc(t, sock, "show", "route", "all", "for", vip4.String())
		return strings.Contains(out, "(65535,0)") && strings.Contains(out, "BGP.local_pref: 0"), out
	})
	fib.waitAbsent(t, 3*time.Second)
	if el := time.Since(start); el < time.Second {
		t.Errorf("VIPs left the FIB after %v, before ShutdownWait (1s)", el)
	}
	h3.reply(t)
	if out := birdc(t, sock, "show", "route", "protocol", "xlb1"); strings.Contains(out, "192.0.2.10") || strings.Contains(out, "2001:db8:1::10") {
		t.Errorf("BIRD still has routes after the graceful shutdown:\n%s", out)
	}
	h3.command(t, "stop")
	h3.wait(t)

	// 6. Stop(false) without a drain: the routes go at once.
	cfg.Restarting = false
	h4 := startHelper(t, nns, cfg, announce)
	waitBIRDEstablished(t, sock, 10*time.Second)
	fib.waitPresent(t, 5*time.Second)
	start = time.Now()
	h4.command(t, "stop")
	fib.waitAbsent(t, time.Second)
	t.Logf("Stop(false): VIPs left the FIB after %v", time.Since(start).Round(10*time.Millisecond))
	h4.wait(t)

	// 7. A hung node (SIGSTOP: no FIN, no KEEPALIVE) is no restart: BIRD's
	// hold timer (3 s) expires and the routes go, graceful restart or not.
	h5 := startHelper(t, nns, cfg, announce)
	waitBIRDEstablished(t, sock, 10*time.Second)
	fib.waitPresent(t, 5*time.Second)
	if err := h5.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	fib.waitAbsent(t, 6*time.Second)
	if el := time.Since(start); el < 2*time.Second {
		t.Errorf("VIPs of a hung speaker left the FIB after %v, before the hold time", el)
	} else {
		t.Logf("VIPs of a hung speaker left the FIB after %v (hold time 3s)", el.Round(100*time.Millisecond))
	}
	h5.kill(t)
}

// setupNetns makes the router and node namespaces joined by a veth pair:
// router r0 10.99.0.1/24 fd00:99::1/64, node n0 10.99.0.2/24 fd00:99::2/64.
func setupNetns(t *testing.T, rns, nns string) {
	t.Helper()
	for _, ns := range []string{rns, nns} {
		exec.Command("ip", "netns", "del", ns).Run() // leftovers of a killed run
		ipCmd(t, "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		ipCmd(t, "-n", ns, "link", "set", "lo", "up")
	}
	ipCmd(t, "link", "add", "r0", "netns", rns, "type", "veth", "peer", "name", "n0", "netns", nns)
	for _, c := range [][]string{
		{"-n", rns, "addr", "add", "10.99.0.1/24", "dev", "r0"},
		{"-n", rns, "addr", "add", "fd00:99::1/64", "dev", "r0", "nodad"},
		{"-n", rns, "link", "set", "r0", "up"},
		{"-n", nns, "addr", "add", "10.99.0.2/24", "dev", "n0"},
		{"-n", nns, "addr", "add", "fd00:99::2/64", "dev", "n0", "nodad"},
		{"-n", nns, "link", "set", "n0", "up"},
	} {
		ipCmd(t, c...)
	}
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// birdConfig is the router's config: graceful restart helper, the
// GRACEFUL_SHUTDOWN community honoured (RFC 8326: local preference 0), ECMP
// into the kernel. docs/BGP.md shows the same.
const birdConfig = `log "%[1]s/bird.log" all;
router id 10.99.0.1;

protocol device { scan time 10; }

protocol kernel kernel4 { ipv4 { import none; export all; }; merge paths on; }
protocol kernel kernel6 { ipv6 { import none; export all; }; merge paths on; }

filter xlb_in {
	if net.len != 32 && net.len != 128 then reject;
	if (65535, 0) ~ bgp_community then bgp_local_pref = 0;
	accept;
}

protocol bgp xlb1 {
	local 10.99.0.1 as 65000;
	neighbor 10.99.0.2 as 65001;
	hold time 3;
	keepalive time 1;
	connect delay time 1;
	connect retry time 1;
	error wait time 1, 3;
	graceful restart on;
	debug { states, events };
	ipv4 { import filter xlb_in; export none; };
	ipv6 { import filter xlb_in; export none; };
}
`

// startBIRD runs bird in the foreground in ns and returns its control
// socket.
func startBIRD(t *testing.T, ns, dir string) string {
	t.Helper()
	conf := filepath.Join(dir, "bird.conf")
	sock := filepath.Join(dir, "bird.ctl")
	if err := os.WriteFile(conf, fmt.Appendf(nil, birdConfig, dir), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command("nsenter", "--net=/run/netns/"+ns, "--", "bird", "-f", "-c", conf, "-s", sock)
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start bird: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(3 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() || testing.Verbose() {
			log, _ := os.ReadFile(filepath.Join(dir, "bird.log"))
			t.Logf("bird output:\n%s\nbird.log:\n%s", stderr.String(), log)
		}
	})
	waitFor(t, 5*time.Second, "bird control socket", func() (bool, string) {
		select {
		case <-exited:
			t.Fatalf("bird exited: %s", stderr.String())
		default:
		}
		c, err := net.Dial("unix", sock)
		if err != nil {
			return false, err.Error()
		}
		c.Close()
		return true, ""
	})
	return sock
}

func birdc(t *testing.T, sock string, args ...string) string {
	t.Helper()
	out, err := exec.Command("birdc", append([]string{"-s", sock}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("birdc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func waitBIRDEstablished(t *testing.T, sock string, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, "BIRD session with the speaker established", func() (bool, string) {
		out := birdc(t, sock, "show", "protocols", "xlb1")
		return strings.Contains(out, "Established"), out
	})
}

// fibWatch samples the router's kernel routes to the VIPs every 10 ms.
type fibWatch struct {
	nl      *netlink.Handle
	dsts    []netip.Prefix
	missing atomic.Int64
	samples atomic.Int64
	quit    chan struct{}
	done    chan struct{}
}

func newFIBWatch(t *testing.T, ns string, dsts ...netip.Prefix) *fibWatch {
	t.Helper()
	h, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nl.Close)
	return &fibWatch{nl: nl, dsts: dsts}
}

// present reports whether every VIP has a kernel route, and which do.
func (w *fibWatch) present() (all, none bool, state string) {
	all, none = true, true
	var have []string
	for _, p := range w.dsts {
		fam := netlink.FAMILY_V4
		if p.Addr().Is6() {
			fam = netlink.FAMILY_V6
		}
		dst := &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
		rs, err := w.nl.RouteListFiltered(fam, &netlink.Route{Dst: dst}, netlink.RT_FILTER_DST)
		if err == nil && len(rs) > 0 {
			none = false
			have = append(have, p.String())
		} else {
			all = false
		}
	}
	return all, none, fmt.Sprintf("kernel routes for %v", have)
}

func (w *fibWatch) waitPresent(t *testing.T, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, "VIP routes in the router's kernel FIB", func() (bool, string) {
		all, _, s := w.present()
		return all, s
	})
}

func (w *fibWatch) waitAbsent(t *testing.T, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, "VIP routes gone from the router's kernel FIB", func() (bool, string) {
		_, none, s := w.present()
		return none, s
	})
}

func (w *fibWatch) start() {
	w.quit, w.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(w.done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.quit:
				return
			case <-tick.C:
			}
			w.samples.Add(1)
			if all, _, _ := w.present(); !all {
				w.missing.Add(1)
			}
		}
	}()
}

// stop ends the sampling and returns how many samples missed a VIP, of
// how many.
func (w *fibWatch) stop() (missing, samples int64) {
	close(w.quit)
	<-w.done
	return w.missing.Load(), w.samples.Load()
}

// Helper process: this test binary, run in the node namespace, driving one
// Speaker from commands on stdin ("status", "drain", "stop-graceful",
// "stop"), one reply line each ("ok", "err ...", "status JSON").

const helperEnv = "XLB_BGP_TEST_HELPER"

type helperSpec struct {
	Config   Config
	Announce []netip.Prefix
}

type helper struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  *bufio.Scanner
	stderr *lockedBuffer
	exited chan struct{}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startHelper runs a speaker with cfg in ns, announcing prefixes from the
// start, and waits until it has started.
func startHelper(t *testing.T, ns string, cfg Config, prefixes []netip.Prefix) *helper {
	t.Helper()
	spec, err := json.Marshal(helperSpec{cfg, prefixes})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("nsenter", "--net=/run/netns/"+ns, "--", os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"="+string(spec))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	h := &helper{cmd: cmd, stderr: &lockedBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = h.stderr
	if h.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	h.lines = bufio.NewScanner(stdout)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start helper: %v", err)
	}
	go func() { cmd.Wait(); close(h.exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-h.exited
		if t.Failed() || testing.Verbose() {
			t.Logf("speaker helper (pid %d) log:\n%s", cmd.Process.Pid, h.stderr.String())
		}
	})
	h.reply(t) // "ok" once started
	return h
}

func (h *helper) send(t *testing.T, c string) {
	t.Helper()
	if _, err := fmt.Fprintln(h.stdin, c); err != nil {
		t.Fatalf("helper %q: %v", c, err)
	}
}

// reply reads one reply line and fails the test unless it is "ok" or a
// status.
func (h *helper) reply(t *testing.T) string {
	t.Helper()
	line := make(chan string, 1)
	go func() {
		if h.lines.Scan() {
			line <- h.lines.Text()
		}
		close(line)
	}()
	select {
	case l, ok := <-line:
		if !ok || strings.HasPrefix(l, "err") {
			t.Fatalf("speaker helper: %q\n%s", l, h.stderr.String())
		}
		return l
	case <-time.After(20 * time.Second):
		t.Fatalf("speaker helper: no reply\n%s", h.stderr.String())
	}
	return ""
}

func (h *helper) command(t *testing.T, c string) {
	t.Helper()
	h.send(t, c)
	h.reply(t)
}

func (h *helper) status(t *testing.T) []PeerStatus {
	t.Helper()
	h.send(t, "status")
	var st []PeerStatus
	if err := json.Unmarshal([]byte(strings.TrimPrefix(h.reply(t), "status ")), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func (h *helper) kill(t *testing.T) {
	t.Helper()
	h.cmd.Process.Kill() // nsenter exec'd the helper: same pid
	h.wait(t)
}

func (h *helper) wait(t *testing.T) {
	t.Helper()
	select {
	case <-h.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("speaker helper did not exit")
	}
}

// TestHelperProcess is the speaker side of TestBIRDGracefulRestart; it does
// nothing unless started by it.
func TestHelperProcess(t *testing.T) {
	spec := os.Getenv(helperEnv)
	if spec == "" {
		t.Skip("helper process for TestBIRDGracefulRestart")
	}
	os.Exit(runHelper(spec))
}

func runHelper(spec string) int {
	out := bufio.NewWriter(os.Stdout)
	reply := func(format string, args ...any) {
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
	}
	var hs helperSpec
	if err := json.Unmarshal([]byte(spec), &hs); err != nil {
		reply("err %v", err)
		return 1
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	sp, err := New(hs.Config, log)
	if err == nil {
		err = sp.SetAnnounced(hs.Announce)
	}
	if err == nil {
		err = sp.Start(context.Background())
	}
	if err != nil {
		reply("err %v", err)
		return 1
	}
	reply("ok")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "status":
			b, _ := json.Marshal(sp.Status())
			reply("status %s", b)
		case "drain":
			if err := sp.GracefulShutdown(context.Background()); err != nil {
				reply("err %v", err)
			} else {
				reply("ok")
			}
		case "stop-graceful":
			sp.Stop(true)
			reply("ok")
			return 0
		case "stop":
			sp.Stop(false)
			reply("ok")
			return 0
		default:
			reply("err unknown command %q", in.Text())
		}
	}
	sp.Stop(false)
	return 0
}
