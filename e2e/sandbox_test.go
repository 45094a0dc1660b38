package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/deploy"
)

// unitSandbox writes into dir a script that runs its arguments with the file system
// deploy/xlbd.service gives xlbd: everything read-only (ProtectSystem=
// strict) but the unit's ReadWritePaths and RuntimeDirectory, each mapped
// to the test's stand-in: /etc/xlb to confDir (where the test's config
// lives), /run/xlb to runDir (where the lab puts the API socket). /proc,
// /sys (bpffs included) and /dev stay writable as under systemd. It runs
// in a private mount namespace, so the host is untouched.
func unitSandbox(t *testing.T, dir, confDir, runDir string) string {
	t.Helper()
	u, err := deploy.ReadUnit(filepath.Join(deploy.Dir(), "xlbd.service"))
	if err != nil {
		t.Fatal(err)
	}
	if ps := strings.Join(u["ProtectSystem"], " "); ps != "strict" {
		t.Fatalf("the sandbox emulates ProtectSystem=strict; the unit has %q", ps)
	}
	standIn := map[string]string{"/etc/xlb": confDir, "/sys/fs/bpf": "/sys/fs/bpf"}
	var rw []string
	for _, p := range u["ReadWritePaths"] {
		s, ok := standIn[strings.TrimPrefix(p, "-")]
		if !ok {
			t.Fatalf("ReadWritePaths %s: no stand-in in this test (add one)", p)
		}
		rw = append(rw, s)
	}
	if strings.Join(u["RuntimeDirectory"], " ") != "xlb" {
		t.Fatalf("RuntimeDirectory=%v, want xlb", u["RuntimeDirectory"])
	}
	rw = append(rw, runDir)
	script := fmt.Sprintf(`#!/bin/sh
# The file system of deploy/xlbd.service: read-only but %s.
exec unshare --mount --propagation private /bin/sh -ec '
for p in %s; do mount --bind "$p" "$p"; done
mount -o remount,bind,ro /
exec "$@"' sh "$@"
`, strings.Join(rw, " "), strings.Join(rw, " "))
	path := filepath.Join(dir, "unit-sandbox")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	// The sandbox is real: the runtime directory is writable, the rest of
	// the root is not (whether the config's directory is, is the unit's
	// to say, and the test's to find out).
	if out, err := exec.Command(path, "touch", filepath.Join(runDir, ".probe")).CombinedOutput(); err != nil {
		t.Fatalf("sandbox: the runtime directory is not writable: %v\n%s", err, out)
	}
	os.Remove(filepath.Join(runDir, ".probe"))
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
