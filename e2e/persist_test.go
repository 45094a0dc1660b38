package e2e

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/lab"
)

// TestAppliedConfigSurvivesRestart: a config applied through the API
// (xlbctl apply) is written to xlbd's --config file, so the next xlbd,
// started with the same command line as the unit's, runs it: the backend
// the applied config left out stays out after the restart.
// TestUnitLetsXLBDSaveItsConfig (deploy/) checks that the unit's sandbox
// leaves that file's directory writable.
func TestAppliedConfigSurvivesRestart(t *testing.T) {
	e := setup(t, []int{1, 1, 1})
	gone := e.lab.Backends[2].Addr4.String()
	if table, err := e.ctl(t, "services"); err != nil || !strings.Contains(table, gone) {
		t.Fatalf("services before apply: %v\n%s", err, table)
	}
	applied := e.lab.XLBDConfig(0, withoutBackend(e, 2))
	file := filepath.Join(e.lab.Dir, "applied.yaml")
	if err := os.WriteFile(file, applied, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := e.ctl(t, "apply", "-f", file); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	if table, err := e.ctl(t, "services"); err != nil || strings.Contains(table, gone) {
		t.Fatalf("services after apply still list %s: %v\n%s", gone, err, table)
	}
	saved, err := os.ReadFile(e.config)
	if err != nil || !bytes.Equal(saved, applied) {
		t.Fatalf("the config file does not hold the applied config (%v):\n%s", err, saved)
	}
	if err := e.xlbd.Stop(); err != nil {
		t.Fatalf("stop: %v\n%s", err, e.xlbd.Output())
	}
	e.start(t)
	// The pinned forwarder answered all along; wait for the new daemon.
	var table string
	deadline := time.Now().Add(20 * time.Second)
	for err = errors.New("not asked"); err != nil && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		table, err = e.ctl(t, "services")
	}
	if err != nil || strings.Contains(table, gone) || !strings.Contains(table, e.lab.Backends[0].Addr4.String()) {
		t.Fatalf("after the restart the services are not the applied ones (%s left out): %v\n%s", gone, err, table)
	}
	if c := sessionsOn(t, e, 30).Counts(); c["b3"] != 0 || c["b1"] == 0 {
		t.Fatalf("after the restart new connections reached %v (b3 was left out by the applied config)", c)
	}
}

// TestVersionNamesTheRunningProgram: the tag `xlbd --version` prints is
// the one of the forwarder a running xlbd attached (its start log line).
func TestVersionNamesTheRunningProgram(t *testing.T) {
	e := setup(t, []int{1, 1, 1})
	bin, err := e.lab.Binary(lab.XLBDBinary)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	m := regexp.MustCompile(`bpf program xlb_forward: tag ([0-9a-f]{16})\n`).FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("xlbd --version: %v\n%s", err, out)
	}
	if !strings.Contains(e.xlbd.Output(), "program_tag="+string(m[1])) {
		t.Fatalf("--version names tag %s; the running xlbd logged:\n%s", m[1], e.xlbd.Output())
	}
}
