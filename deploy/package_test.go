package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/testenv"
)

func runOut(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestPackageInstallsIntoAFreshRoot builds the package (make deb, with the
// Go module proxy off: no network), installs it with dpkg into an empty
// root, starts nothing, and checks the files, the conffile, the units
// (systemd-analyze verify), the man pages (man -l, no warnings), the
// bash completion, and `--version` of each binary run inside the root.
func TestPackageInstallsIntoAFreshRoot(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package")
	}
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "make", "dpkg", "dpkg-deb", "systemd-analyze", "man", "bash", "unshare", "chroot")
	out := t.TempDir()
	cmd := exec.Command("make", "-C", "..", "--no-print-directory", "deb", "DEBOUT="+out)
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=readonly")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make deb: %v\n%s", err, b)
	}
	debs, _ := filepath.Glob(filepath.Join(out, "xlb_*.deb"))
	if len(debs) != 1 {
		t.Fatalf("make deb wrote %v", debs)
	}
	root := t.TempDir()
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates", "proc", "sys"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	os.WriteFile(filepath.Join(root, "var/lib/dpkg/status"), nil, 0o644)
	runOut(t, "dpkg", "--root="+root, "-i", debs[0])

	for _, f := range []string{"usr/bin/xlbd", "usr/bin/xlbctl", "usr/bin/xlb-decap",
		"usr/lib/systemd/system/xlbd.service", "usr/lib/systemd/system/xlb-decap@.service",
		"etc/xlb/xlb.yaml", "usr/share/bash-completion/completions/xlbctl",
		"usr/share/man/man8/xlbd.8.gz", "usr/share/man/man8/xlbctl.8.gz", "usr/share/man/man8/xlb-decap.8.gz",
		"usr/share/doc/xlb/OPERATIONS.md", "usr/share/doc/xlb/examples/xlb.yaml"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("not installed: /%s", f)
		}
	}
	if st := runOut(t, "dpkg", "--root="+root, "-s", "xlb"); !strings.Contains(st, "Conffiles:\n /etc/xlb/xlb.yaml ") {
		t.Errorf("/etc/xlb/xlb.yaml is not a conffile:\n%s", st)
	}
	checkUnits(t, root)
	checkManPages(t, root)
	checkCompletion(t, root)
	checkVersions(t, root)
}

// checkUnits verifies the installed units inside the root (a misspelt
// key or a bad value is reported; a missing ExecStart binary fails). The root holds
// only this package, so it is given what any systemd host has and
// systemd-analyze looks for: systemd's own units (sysinit.target, ...) and
// /bin/kill (ExecReload), copied from this host. --man=no: the man check
// asks the host's man database, which does not hold the root's pages
// (checkManPages reads them).
func checkUnits(t *testing.T, root string) {
	units := filepath.Join(root, "usr/lib/systemd/system")
	runOut(t, "cp", "-rn", "/usr/lib/systemd/system/.", units)
	os.MkdirAll(filepath.Join(root, "bin"), 0o755)
	runOut(t, "cp", "/bin/kill", filepath.Join(root, "bin/kill"))
	// verify exits 0 on lines it ignores (an unknown key, a bad value):
	// any output is a failure.
	if out := runOut(t, "systemd-analyze", "verify", "--man=no", "--root="+root, "xlbd.service", "xlb-decap@eth0.service"); out != "" {
		t.Errorf("systemd-analyze verify:\n%s", out)
	}
}

func checkManPages(t *testing.T, root string) {
	for _, m := range []string{"xlbd", "xlbctl", "xlb-decap"} {
		cmd := exec.Command("man", "--warnings", "-l", filepath.Join(root, "usr/share/man/man8", m+".8.gz"))
		cmd.Env = append(os.Environ(), "MANWIDTH=100", "MANPAGER=cat")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		page, err := cmd.Output()
		if err != nil || stderr.Len() > 0 {
			t.Errorf("man %s: %v\n%s", m, err, stderr.String())
		}
		if !strings.Contains(string(page), "NAME") || !strings.Contains(string(page), m+" - ") {
			t.Errorf("man %s has no NAME section:\n%s", m, page)
		}
	}
	if page := runOut(t, "man", "-l", filepath.Join(root, "usr/share/man/man8/xlbd.8.gz")); !strings.Contains(page, "--check-kernel") {
		t.Errorf("xlbd(8) does not list --check-kernel:\n%s", page)
	}
}

func checkCompletion(t *testing.T, root string) {
	script := filepath.Join(root, "usr/share/bash-completion/completions/xlbctl")
	for line, want := range map[string]string{
		"xlbctl -s /run/xlb/n1.sock dr": "drain",
		"xlbctl -o ":                    "table json",
		"xlbctl node un":                "undrain",
		"xlbctl apply --dry":            "--dry-run",
		"xlbctl --vers":                 "--version",
	} {
		words := strings.Split(line, " ")
		prog := `source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _xlbctl; echo "${COMPREPLY[*]}"`
		got := strings.TrimSpace(runOut(t, "bash", append([]string{"-c", prog, "bash", script}, words...)...))
		if got != want {
			t.Errorf("completion of %q: %q, want %q", line, got, want)
		}
	}
}

// checkVersions runs each binary in the root (chroot, /proc and /sys bound
// in a private mount namespace): the binaries need nothing else from it.
func checkVersions(t *testing.T, root string) {
	tag := regexp.MustCompile(`bpf program (xlb_forward|xlb_decap): tag [0-9a-f]{16}\n`)
	for _, c := range []struct{ bin, want string }{
		{"xlbd", "xlb_forward"}, {"xlb-decap", "xlb_decap"}, {"xlbctl", "embeds no BPF program"},
	} {
		sh := `mount --bind /proc "$1/proc" && mount --bind /sys "$1/sys" && exec chroot "$1" "/usr/bin/$2" --version`
		out := runOut(t, "unshare", "--mount", "--propagation", "private", "sh", "-c", sh, "sh", root, c.bin)
		if !strings.HasPrefix(out, c.bin+" ") || strings.Contains(out, "unknown (") || !strings.Contains(out, c.want) {
			t.Errorf("%s --version:\n%s", c.bin, out)
		}
		if c.bin != "xlbctl" && !tag.MatchString(out) {
			t.Errorf("%s --version has no program tag:\n%s", c.bin, out)
		}
		t.Logf("%s", out)
	}
	if out := runOut(t, "chroot", root, "/usr/bin/xlbd", "--check-config", "/etc/xlb/xlb.yaml"); !strings.Contains(out, ": ok") {
		t.Errorf("the shipped config does not check: %s", out)
	}
}
