//go:build xlb_crashpoints

package crashpoint

import (
	"os"
	"strings"
	"syscall"
)

// ArmEnv names the environment variable that holds the path of the arm
// file. When the file holds exactly a point's name, At(that name) removes
// the file (so the next xlbd starts unarmed) and kills the process with
// SIGKILL: no deferred call, no signal handler, no flush runs, as in a
// crash or an OOM kill.
const ArmEnv = "XLB_CRASH_ARM"

// Enabled reports whether this build stops at crash points.
const Enabled = true

// At stops the process dead when the arm file names point.
func At(point string) {
	path := os.Getenv(ArmEnv)
	if path == "" {
		return
	}
	b, err := os.ReadFile(path)
	if err != nil || strings.TrimSpace(string(b)) != point {
		return
	}
	os.Remove(path)
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL is delivered before this blocks for long
}
