package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xlbproject/xlb/deploy"
	"github.com/xlbproject/xlb/internal/testenv"
	"github.com/xlbproject/xlb/lab"
)

// unitSandbox writes into dir a script that runs its arguments with the
// file system the unit (a file of deploy/) gives its daemon: everything
// read-only (ProtectSystem=strict) but the unit's ReadWritePaths and
// RuntimeDirectory, each mapped to the test's stand-in: standIn maps a
// ReadWritePaths entry (/sys/fs/bpf stands for itself), runDir stands for
// /run/xlb. /proc, /sys (bpffs included) and /dev stay writable as under
// systemd. It runs in a private mount namespace: the host is untouched.
func unitSandbox(t *testing.T, dir, unit string, standIn map[string]string, runDir string) string {
	t.Helper()
	u, err := deploy.ReadUnit(filepath.Join(deploy.Dir(), unit))
	if err != nil {
		t.Fatal(err)
	}
	if ps := strings.Join(u["ProtectSystem"], " "); ps != "strict" {
		t.Fatalf("the sandbox emulates ProtectSystem=strict; %s has %q", unit, ps)
	}
	rw := []string{}
	for _, p := range u["ReadWritePaths"] {
		p = strings.TrimPrefix(p, "-")
		s, ok := standIn[p]
		if p == "/sys/fs/bpf" {
			s, ok = p, true
		}
		if !ok {
			t.Fatalf("%s: ReadWritePaths %s has no stand-in in this test (add one)", unit, p)
		}
		rw = append(rw, s)
	}
	switch rd := strings.Join(u["RuntimeDirectory"], " "); {
	case rd == "xlb" && runDir != "":
		rw = append(rw, runDir)
	case rd != "":
		t.Fatalf("%s: RuntimeDirectory=%s has no stand-in in this test", unit, rd)
	}
	script := fmt.Sprintf(`#!/bin/sh
# The file system of deploy/%s: read-only but %s.
exec unshare --mount --propagation private /bin/sh -ec '
for p in %s; do mount --bind "$p" "$p"; done
mount -o remount,bind,ro /
exec "$@"' sh "$@"
`, unit, strings.Join(rw, " "), strings.Join(rw, " "))
	path := filepath.Join(dir, strings.TrimSuffix(unit, ".service")+"-sandbox")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	// The sandbox is real: the runtime directory (else bpffs) is
	// writable, the rest of the root is not (whether the config's
	// directory is, is the unit's to say, and the test's to find out).
	probe := filepath.Join(runDir, "xlb-sandbox-probe")
	if runDir == "" {
		probe = fmt.Sprintf("/sys/fs/bpf/xlb-sandbox-probe-%d", os.Getpid()) // bpffs: no dots in names
	}
	if out, err := exec.Command(path, "sh", "-c", `mkdir "$1" && rmdir "$1"`, "sh", probe).CombinedOutput(); err != nil {
		t.Fatalf("sandbox: cannot write %s: %v\n%s", probe, err, out)
	}
	if out, err := exec.Command(path, "touch", "/var/tmp/.xlb-sandbox-probe").CombinedOutput(); err == nil || !strings.Contains(string(out), "Read-only") {
		os.Remove("/var/tmp/.xlb-sandbox-probe")
		t.Fatalf("sandbox: /var/tmp is writable (%v): %s", err, out)
	}
	return path
}

// sandboxedXLBD writes an xlbd that runs in unitSandbox.
func sandboxedXLBD(t *testing.T, sandbox, xlbd string) string {
	t.Helper()
	path := filepath.Join(filepath.Dir(sandbox), "xlbd")
	script := fmt.Sprintf("#!/bin/sh\nexec %s %s \"$@\"\n", sandbox, xlbd)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestDecapUnderItsUnitsSandbox: xlb-decap attaches, syncs, follows the
// backend's address changes and detaches with the file system
// xlb-decap@.service gives it (it writes nothing but its pins), and the
// backend answers through the decapsulator so attached.
func TestDecapUnderItsUnitsSandbox(t *testing.T) {
	e := setup(t, []int{1, 1, 1})
	testenv.RequireCommands(t, "unshare", "mount")
	sandbox := unitSandbox(t, t.TempDir(), "xlb-decap@.service", nil, "")
	bin, err := e.lab.Binary(lab.DecapBinary)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b1 := e.lab.Backends[0]
	if out, err := b1.Run(ctx, bin, "detach", b1.Iface); err != nil {
		t.Fatalf("detach: %v\n%s", err, out)
	}
	for _, cmd := range []string{"attach", "sync"} {
		if out, err := b1.Run(ctx, sandbox, bin, cmd, b1.Iface); err != nil {
			t.Fatalf("xlb-decap %s under the unit's sandbox: %v\n%s", cmd, err, out)
		}
	}
	follow := followUnderSandbox(ctx, t, b1, sandbox, bin)
	if c := sessionsOn(t, e, 30).Counts(); c["b1"] == 0 {
		t.Fatalf("no connection reached b1 through the decapsulator attached under the sandbox: %v", c)
	}
	if err := follow.Stop(5 * time.Second); err != nil {
		t.Fatalf("xlb-decap follow on SIGTERM: %v\n%s", err, follow.Output())
	}
	if out, err := b1.Run(ctx, sandbox, bin, "detach", b1.Iface); err != nil {
		t.Fatalf("xlb-decap detach under the unit's sandbox: %v\n%s", err, out)
	}
	// Attached again for the lab's own detach at the end.
	if out, err := b1.Run(ctx, bin, "attach", b1.Iface); err != nil {
		t.Fatalf("attach: %v\n%s", err, out)
	}
}

// followUnderSandbox starts `xlb-decap follow` on b1 under the sandbox, as
// the unit does, and checks that an address added to b1 reaches the
// program's addresses within a second, and one removed leaves them.
func followUnderSandbox(ctx context.Context, t *testing.T, b1 *lab.Host, sandbox, bin string) *lab.Proc {
	t.Helper()
	p, err := b1.Start(ctx, nil, sandbox, bin, "follow", b1.Iface)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(5 * time.Second) })
	lastLine := func() string {
		lines := strings.Split(strings.TrimSpace(p.Output()), "\n")
		for i := len(lines) - 1; i >= 0; i-- {
			if strings.Contains(lines[i], " local addresses: ") && !strings.Contains(lines[i], "level=") {
				return lines[i]
			}
		}
		return ""
	}
	waitFor := func(what string, ok func(string) bool) {
		t.Helper()
		start := time.Now()
		deadline := start.Add(time.Second)
		defer func() { t.Logf("xlb-decap follow: %s after %v", what, time.Since(start).Round(time.Millisecond)) }()
		for !ok(lastLine()) {
			if p.Exited() || time.Now().After(deadline) {
				t.Fatalf("xlb-decap follow: %s not seen within 1s (exited: %v)\n%s", what, p.Exited(), p.Output())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	const extra = "203.0.113.99"
	has := func(l string) bool { return strings.Contains(l, extra+" ") || strings.Contains(l, extra+"]") }
	waitFor("the first sync", func(l string) bool { return l != "" && !has(l) })
	lo, err := b1.Netlink().LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	addr, err := netlink.ParseAddr(extra + "/32")
	if err != nil {
		t.Fatal(err)
	}
	if err := b1.Netlink().AddrAdd(lo, addr); err != nil {
		t.Fatal(err)
	}
	waitFor(extra+" added", has)
	if err := b1.Netlink().AddrDel(lo, addr); err != nil {
		t.Fatal(err)
	}
	waitFor(extra+" removed", func(l string) bool { return !has(l) })
	return p
}
