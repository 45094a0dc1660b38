package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckConfig runs the built daemon as an operator would: `xlbd
// --check-config FILE` (and the --config form) exits 0 for the example
// config, and 2 with the field and line for a bad one, touching nothing.
func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "xlbd")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	example, err := filepath.Abs("../../examples/xlb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(strings.Replace(string(good), "conntrack_entries:", "conntrack_entries: -1 #", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--check-config", example}, 0, "ok ("},
		{[]string{"--check-config", "--config", example}, 0, "ok ("},
		{[]string{"--check-config", bad}, 2, "bad.yaml:"},
		{[]string{"--check-config", filepath.Join(dir, "missing.yaml")}, 2, "no such file"},
		{[]string{"--check-config", example, example}, 2, "unexpected arguments"},
		{[]string{example}, 2, "unexpected arguments"},
	} {
		out, err := exec.Command(bin, tc.args...).CombinedOutput()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.code || !strings.Contains(string(out), tc.want) {
			t.Errorf("xlbd %s: exit %d, output %q; want exit %d and %q", strings.Join(tc.args, " "), code, out, tc.code, tc.want)
		}
	}
	out, _ := exec.Command(bin, "--check-config", bad).CombinedOutput()
	if !strings.Contains(string(out), "node.conntrack_entries") {
		t.Errorf("bad config: %q does not name the field", out)
	}
}
