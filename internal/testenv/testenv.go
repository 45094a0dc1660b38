// Package testenv gates tests that need privileges or kernel features.
//
// Outside CI a missing capability skips the test with the reason. With CI=true
// in the environment the same condition fails the test: CI runs as root on a
// kernel with XDP, so a missing capability there is a broken machine or a
// broken install step, never a reason to pass.
//
// One skip is a selection, not a missing capability: `go test -short` (make
// check, the inner loop) leaves out every test that builds network
// namespaces, devices or labs (RequireNetns), under CI=true too. make test
// runs without -short, so CI runs them all.
package testenv

import (
	"os"
	"os/exec"
	"testing"

	"github.com/xlbproject/xlb/internal/testenv/traces"
)

// InCI reports whether the CI environment variable is "true".
func InCI() bool { return os.Getenv("CI") == "true" }

// Unavailable skips t (or fails it under CI) with the formatted reason.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("required by this test under CI=true: "+format, args...)
	}
	t.Skipf("skipped: "+format, args...)
}

// RequireRoot needs effective uid 0 (netns, XDP, bpffs).
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, "root privileges (run as root)")
	}
}

// RequireNetns marks a test that builds network namespaces, veths or a
// lab of daemons: `go test -short` skips it (make check runs no
// namespace), whatever CI says; otherwise it needs root (RequireRoot).
func RequireNetns(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds network namespaces: left out of -short (make check); make test runs it")
	}
	RequireRoot(t)
}

// RequireCommands needs each named executable on PATH.
func RequireCommands(t testing.TB, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			Unavailable(t, "command %q on PATH (make deps installs it)", n)
		}
	}
}

// TracesDir returns the directory of the shared packet captures
// (traces.FindDir from the working directory), or skips t (fails it under
// CI=true) when there is none.
func TracesDir(t testing.TB) string {
	t.Helper()
	d, err := traces.FindDir(".")
	if err != nil {
		Unavailable(t, "the shared packet captures: %v", err)
	}
	return d
}
