package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMakeInstallHonoursPrefix: make install with PREFIX and DESTDIR puts
// the files under DESTDIR/PREFIX, points the units at PREFIX's binaries,
// and leaves an existing config alone.
func TestMakeInstallHonoursPrefix(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	dest := t.TempDir()
	conf := filepath.Join(dest, "etc/xlb/xlb.yaml")
	os.MkdirAll(filepath.Dir(conf), 0o755)
	const mine = "# the operator's config\n"
	os.WriteFile(conf, []byte(mine), 0o644)
	cmd := exec.Command("make", "-C", "..", "--no-print-directory", "install", "DESTDIR="+dest, "PREFIX=/opt/xlb")
	cmd.Env = append(os.Environ(), "GOPROXY=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	for _, f := range []string{"opt/xlb/bin/xlbd", "opt/xlb/bin/xlbctl", "opt/xlb/bin/xlb-decap",
		"opt/xlb/share/man/man8/xlbd.8.gz", "opt/xlb/share/bash-completion/completions/xlbctl",
		"opt/xlb/share/doc/xlb/OPERATIONS.md"} {
		if fi, err := os.Stat(filepath.Join(dest, f)); err != nil || fi.Size() == 0 {
			t.Errorf("/%s not installed: %v", f, err)
		}
	}
	for _, u := range []string{"xlbd.service", "xlb-decap@.service"} {
		b, err := os.ReadFile(filepath.Join(dest, "opt/xlb/lib/systemd/system", u))
		if err != nil || strings.Contains(string(b), "/usr/bin/") || !strings.Contains(string(b), "ExecStart=/opt/xlb/bin/") {
			t.Errorf("%s does not run /opt/xlb/bin (%v):\n%s", u, err, b)
		}
	}
	if b, _ := os.ReadFile(conf); string(b) != mine {
		t.Errorf("make install replaced an existing config:\n%s", b)
	}
}
