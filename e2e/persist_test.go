package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/testenv"
	"github.com/xlbproject/xlb/lab"
)

// TestAppliedConfigSurvivesRestart: a config applied through the API
// (xlbctl apply) is written to xlbd's --config file, so the next xlbd runs
// it: the backend the applied config left out stays out after a restart.
// xlbd runs with the file system deploy/xlbd.service gives it (read-only
// but the unit's writable paths; unitSandbox), so this also shows the unit
// lets the applied config persist and xlbd writes nowhere else.
func TestAppliedConfigSurvivesRestart(t *testing.T) {
	testenv.RequireNetns(t)
	testenv.RequireCommands(t, "nsenter", "ip", "unshare", "mount")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Made before the lab: its cleanup (xlbd --cleanup, through the
	// sandbox) runs before they are removed.
	scripts, confDir := t.TempDir(), t.TempDir()
	l := newLab(ctx, t, lab.Config{})
	e := &env{lab: l, opts: lab.XLBDOptions{Weights: []int{1, 1, 1}}}
	e.config = filepath.Join(confDir, "xlb.yaml")
	if err := os.WriteFile(e.config, l.XLBDConfig(0, e.opts), 0o644); err != nil {
		t.Fatal(err)
	}
	bin, err := l.Binary(lab.XLBDBinary)
	if err != nil {
		t.Fatal(err)
	}
	xlbd := sandboxedXLBD(t, unitSandbox(t, scripts, "xlbd.service", map[string]string{"/etc/xlb": confDir}, l.Dir), bin)
	start := func() string {
		if e.xlbd, err = l.StartXLBDBinary(ctx, 0, e.config, xlbd); err != nil {
			t.Fatal(err)
		}
		if err := l.WaitForwarding(ctx, e.http4(), 20*time.Second, e.xlbd); err != nil {
			t.Fatal(err)
		}
		// A restarted xlbd's pinned forwarder answered all along: wait for
		// the daemon's API.
		var table string
		deadline := time.Now().Add(20 * time.Second)
		for err = errors.New("not asked"); err != nil && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			table, err = e.ctl(t, "services")
		}
		if err != nil {
			t.Fatalf("xlbd's API: %v\n%s", err, e.xlbd.Output())
		}
		return table
	}
	gone := l.Backends[2].Addr4.String()
	if table := start(); !strings.Contains(table, gone) {
		t.Fatalf("services before apply lack %s:\n%s", gone, table)
	}
	applied := l.XLBDConfig(0, withoutBackend(e, 2))
	file := filepath.Join(l.Dir, "applied.yaml")
	if err := os.WriteFile(file, applied, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := e.ctl(t, "apply", "-f", file); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	if table, err := e.ctl(t, "services"); err != nil || strings.Contains(table, gone) {
		t.Fatalf("services after apply still list %s: %v\n%s", gone, err, table)
	}
	if strings.Contains(e.xlbd.Output(), "not saved") {
		t.Fatalf("xlbd could not save the applied config:\n%s", e.xlbd.Output())
	}
	saved, err := os.ReadFile(e.config)
	if err != nil || !bytes.Equal(saved, applied) {
		t.Fatalf("the config file does not hold the applied config (%v):\n%s", err, saved)
	}
	if err := e.xlbd.Stop(); err != nil {
		t.Fatalf("stop: %v\n%s", err, e.xlbd.Output())
	}
	if table := start(); strings.Contains(table, gone) || !strings.Contains(table, l.Backends[0].Addr4.String()) {
		t.Fatalf("after the restart the services are not the applied ones (%s left out):\n%s", gone, table)
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
