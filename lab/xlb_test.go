package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeBin writes stand-ins for xlbd and xlb-decap into a new directory.
// Each appends "<name> <args> <netns>" to calls.log there; the fake xlbd
// stays up (logging SIGHUP as "reload" and exiting on SIGTERM) unless its
// config file contains "exit", or it is run with --cleanup.
func fakeBin(t *testing.T) (dir string, calls func() string) {
	t.Helper()
	dir = t.TempDir()
	log := filepath.Join(dir, "calls.log")
	xlbd := `#!/bin/sh
log="` + log + `"
echo "xlbd $* $(readlink /proc/self/ns/net)" >> "$log"
[ "$1" = --cleanup ] && exit 0
grep -q exit "$2" && { echo "level=ERROR msg=\"bad config\"" >&2; exit 3; }
trap 'echo reload >> "$log"' HUP
trap 'echo term >> "$log"; exit 0' TERM
echo "level=INFO msg=started" >&2
while :; do sleep 0.02; done
`
	decap := `#!/bin/sh
echo "xlb-decap $* $(readlink /proc/self/ns/net)" >> "` + log + `"
`
	for name, body := range map[string]string{XLBDBinary: xlbd, DecapBinary: decap} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir, func() string {
		b, _ := os.ReadFile(log)
		return string(b)
	}
}

func netnsID(t *testing.T, ns *NS) string {
	t.Helper()
	var id string
	if err := ns.Do(func() (err error) { id, err = os.Readlink("/proc/thread-self/ns/net"); return err }); err != nil {
		t.Fatal(err)
	}
	return id
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestXLBProcesses runs the xlbd / xlb-decap plumbing against stand-ins:
// the commands, their arguments, their namespaces, reload, and what
// Destroy runs.
func TestXLBProcesses(t *testing.T) {
	bin, calls := fakeBin(t)
	l := newTestLab(t, Config{Backends: 2, Routing: RouteToBackend, BinDir: bin})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := l.StartServers(Ports{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := l.WriteXLBDConfig(0, XLBDOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.AttachDecap(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := l.StartXLBD(ctx, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.WaitOutput(ctx, "started", 1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.WaitForwarding(ctx, netip.AddrPortFrom(l.VIP4(), 80), 5*time.Second, d); err != nil {
		t.Fatal(err)
	}
	if err := d.Reload(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "reload", func() bool { return strings.Contains(calls(), "reload") })
	b, err := os.ReadFile(d.LogPath)
	if err != nil || !strings.Contains(string(b), "started") {
		t.Errorf("log file %s: %q, %v", d.LogPath, b, err)
	}
	// A restart: the second daemon is stopped by Destroy, and the data
	// plane cleaned up once, after both.
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	d2, err := l.StartXLBD(ctx, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "second xlbd start", func() bool { return strings.Contains(d2.Output(), "started") })

	nodeNS, b1NS, b2NS := netnsID(t, l.Nodes[0].NS), netnsID(t, l.Backends[0].NS), netnsID(t, l.Backends[1].NS)
	sock := l.APISocket(0)
	if err := l.Destroy(); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if !d2.Exited() {
		t.Errorf("xlbd still running after Destroy")
	}
	want := []string{
		fmt.Sprintf("xlb-decap attach eth0 %s", b1NS),
		fmt.Sprintf("xlb-decap attach eth0 %s", b2NS),
		fmt.Sprintf("xlbd --config %s --api-socket %s %s", cfg, sock, nodeNS),
		"reload",
		"term",
		fmt.Sprintf("xlbd --config %s --api-socket %s %s", cfg, sock, nodeNS),
		"term",
		fmt.Sprintf("xlbd --cleanup --config %s %s", filepath.Join(l.Dir, "xlbd-n1-started.yaml"), nodeNS),
		fmt.Sprintf("xlb-decap detach eth0 %s", b2NS),
		fmt.Sprintf("xlb-decap detach eth0 %s", b1NS),
	}
	if got := strings.Split(strings.TrimSpace(calls()), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestXLBDExitReported checks that WaitForwarding gives up as soon as the
// daemon exits, with its log in the error.
func TestXLBDExitReported(t *testing.T) {
	bin, _ := fakeBin(t)
	l := newTestLab(t, Config{Backends: 1, BinDir: bin})
	cfg := filepath.Join(l.Dir, "bad.yaml")
	if err := os.WriteFile(cfg, []byte("exit\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := l.StartXLBD(context.Background(), 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.WaitOutput(context.Background(), "never printed", 1, 5*time.Second); err == nil || !strings.Contains(err.Error(), "bad config") {
		t.Errorf("WaitOutput on an exiting process: %v", err)
	}
	start := time.Now()
	err = l.WaitForwarding(context.Background(), netip.AddrPortFrom(l.VIP4(), 80), 20*time.Second, d)
	if err == nil || !strings.Contains(err.Error(), "bad config") || time.Since(start) > time.Second {
		t.Fatalf("WaitForwarding after xlbd exit: %v (after %v)", err, time.Since(start))
	}
	// Destroy reports the daemon's failure.
	if err := l.Destroy(); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("Destroy after a failed xlbd: %v", err)
	}
}

func TestMissingBinary(t *testing.T) {
	l := fakeLab(1, 1)
	l.cfg.BinDir = t.TempDir()
	_, err := l.Binary(XLBDBinary)
	if err == nil || !strings.Contains(err.Error(), "make build") {
		t.Errorf("missing xlbd: %v", err)
	}
}

func TestFindBinDir(t *testing.T) {
	t.Setenv("XLB_BIN_DIR", "")
	if exe, err := os.Executable(); err == nil {
		if _, err := os.Stat(filepath.Join(filepath.Dir(exe), XLBDBinary)); err == nil {
			t.Skipf("xlbd next to the test binary %s: FindBinDir picks that directory", exe)
		}
	}
	d, err := FindBinDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(d), "go.mod")); err != nil || filepath.Base(d) != "bin" {
		t.Errorf("FindBinDir() = %s (%v), want <repo>/bin", d, err)
	}
	t.Setenv("XLB_BIN_DIR", "/opt/xlb")
	if d, _ := FindBinDir(); d != "/opt/xlb" {
		t.Errorf("with XLB_BIN_DIR: %s", d)
	}
}
