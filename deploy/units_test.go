package deploy

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func unit(t *testing.T, name string) map[string][]string {
	t.Helper()
	u, err := ReadUnit(name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestUnitLetsXLBDSaveItsConfig: under the unit's sandbox, the directory
// of the file xlbd runs (--config) is writable, since a config applied
// through the API replaces that file (a temporary file in the same
// directory, renamed over it; TestAppliedConfigSurvivesRestart in e2e/
// shows the next xlbd runs it). The unit restarts xlbd on failure and
// stops it with SIGTERM, which leaves the forwarder running.
func TestUnitLetsXLBDSaveItsConfig(t *testing.T) {
	u := unit(t, "xlbd.service")
	exec := u["ExecStart"]
	i := slices.Index(exec, "--config")
	if i < 0 || i+1 >= len(exec) {
		t.Fatalf("ExecStart has no --config: %v", exec)
	}
	dir := filepath.Dir(exec[i+1])
	if ps := u["ProtectSystem"]; len(ps) == 0 || ps[0] != "strict" {
		t.Fatalf("ProtectSystem=%v, want strict (everything read-only but what xlbd writes)", ps)
	}
	var rw []string
	for _, p := range u["ReadWritePaths"] {
		rw = append(rw, strings.TrimPrefix(p, "-"))
	}
	if !slices.Contains(rw, dir) {
		t.Errorf("the config's directory %s is not in ReadWritePaths %v: an applied config would be lost at the next start", dir, rw)
	}
	if !slices.Contains(rw, "/sys/fs/bpf") {
		t.Errorf("ReadWritePaths %v lacks /sys/fs/bpf (the pinned forwarder)", rw)
	}
	if u["RuntimeDirectory"][0] != "xlb" {
		t.Errorf("RuntimeDirectory=%v, want xlb (the API socket)", u["RuntimeDirectory"])
	}
	if u["Restart"][0] != "on-failure" || u["KillSignal"][0] != "SIGTERM" {
		t.Errorf("Restart=%v KillSignal=%v, want on-failure and SIGTERM", u["Restart"], u["KillSignal"])
	}
	if pre := strings.Join(u["ExecStartPre"], " "); pre != exec[0]+" --check-config --config "+exec[i+1] {
		t.Errorf("ExecStartPre=%q does not check the config ExecStart runs", pre)
	}
}

// TestDecapTemplate: xlb-decap@IFACE attaches to IFACE once the device
// exists, then follows the host's address changes until stopped, detaches
// on stop, and re-reads addresses on reload.
func TestDecapTemplate(t *testing.T) {
	u := unit(t, "xlb-decap@.service")
	for key, want := range map[string]string{
		"ExecStartPre": "/usr/bin/xlb-decap attach %I",
		"ExecStart":    "/usr/bin/xlb-decap follow %I",
		"ExecStop":     "/usr/bin/xlb-decap detach %I",
		"ExecReload":   "/usr/bin/xlb-decap sync %I",
		"BindsTo":      "sys-subsystem-net-devices-%i.device",
		"Type":         "exec",
		"Restart":      "on-failure",
		"WantedBy":     "multi-user.target",
	} {
		if got := strings.Join(u[key], " "); got != want {
			t.Errorf("%s=%q, want %q", key, got, want)
		}
	}
}
