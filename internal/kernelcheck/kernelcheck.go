// Package kernelcheck finds out, before xlbd touches the data plane,
// whether the running kernel has every feature xlb uses, and names each
// missing one with the Linux version that brought it. The features are
// those of the forwarder this binary embeds (its map types and helper
// calls, read from the object) and of the control plane (bpf_link for XDP,
// live-frame test runs, managed neighbours); each is probed, not inferred
// from the version number, since distributions backport.
package kernelcheck

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrMissing marks a probe's answer that the kernel lacks the feature.
var ErrMissing = errors.New("missing")

// Feature is one kernel feature xlb needs.
type Feature struct {
	Name  string // e.g. "bpf_link for XDP"
	Since string // the first Linux version that has it, e.g. "5.9"
	Use   string // what xlb uses it for
	// Probe returns nil when the kernel has the feature, an error wrapping
	// ErrMissing when it has not, any other error when it could not tell.
	Probe func() error
}

// Result is the outcome of one probe.
type Result struct {
	Feature
	Err error // nil: present
}

// Missing reports whether the probe found the feature absent.
func (r Result) Missing() bool { return errors.Is(r.Err, ErrMissing) }

// Run probes every feature, in order.
func Run(fs []Feature) []Result {
	out := make([]Result, len(fs))
	for i, f := range fs {
		out[i] = Result{Feature: f, Err: f.Probe()}
	}
	return out
}

// MissingError lists the features the kernel lacks.
type MissingError struct {
	Kernel  string // the running kernel's release
	Missing []Result
	Minimum string // the least Linux version with every feature
}

func (e *MissingError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "kernel %s lacks %d feature(s) xlb needs:", e.Kernel, len(e.Missing))
	for _, r := range e.Missing {
		fmt.Fprintf(&b, "\n  %s (Linux %s and later; used for %s): %v", r.Name, r.Since, r.Use, r.Err)
	}
	fmt.Fprintf(&b, "\nxlb needs Linux %s or later (or a kernel with these features backported); see docs/OPERATIONS.md, \"Kernels\"", e.Minimum)
	return b.String()
}

// Check runs the probes and returns a *MissingError naming every missing
// feature, or nil. Probes that could not tell are returned as unsure, for
// the caller to log: the load of the forwarder then has the last word.
func Check(fs []Feature) (unsure []Result, err error) {
	var missing []Result
	for _, r := range Run(fs) {
		switch {
		case r.Err == nil:
		case r.Missing():
			missing = append(missing, r)
		default:
			unsure = append(unsure, r)
		}
	}
	if len(missing) > 0 {
		return unsure, &MissingError{Kernel: Release(), Missing: missing, Minimum: Minimum(fs)}
	}
	return unsure, nil
}

// Minimum is the least Linux version that has every feature of fs.
func Minimum(fs []Feature) string {
	best := "0.0"
	for _, f := range fs {
		if versionLess(best, f.Since) {
			best = f.Since
		}
	}
	return best
}

// versionLess compares "major.minor" versions.
func versionLess(a, b string) bool {
	am, an := splitVersion(a)
	bm, bn := splitVersion(b)
	return am < bm || am == bm && an < bn
}

func splitVersion(v string) (int, int) {
	major, minor, _ := strings.Cut(v, ".")
	m, _ := strconv.Atoi(major)
	n, _ := strconv.Atoi(minor)
	return m, n
}

// Release is the running kernel's release (uname -r).
func Release() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "(unknown)"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// MinimumKernel is the least Linux version that has every feature of the
// forwarder this tree builds (TestTablesCoverTheForwarder keeps it true;
// README.md and docs/OPERATIONS.md state it).
const MinimumKernel = "5.18"

// Require is Check that logs each probe that could not tell as a warning
// and returns only the missing features' error.
func Require(fs []Feature, log *slog.Logger) error {
	unsure, err := Check(fs)
	for _, r := range unsure {
		log.Warn("kernel feature could not be probed", "feature", r.Name, "since", "Linux "+r.Since, "error", r.Err)
	}
	return err
}
