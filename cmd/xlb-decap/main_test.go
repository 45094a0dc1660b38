package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/xlbproject/xlb/internal/decap"
	"github.com/xlbproject/xlb/internal/testenv"
)

func runCLI(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		err  string
	}{
		{"no command", nil, 2, "missing command"},
		{"unknown command", []string{"frob"}, 2, `unknown command "frob"`},
		{"attach without interface", []string{"attach"}, 2, "attach needs an interface"},
		{"bad mode", []string{"attach", "eth0", "--mode", "offload"}, 2, `unknown xdp mode "offload"`},
		{"mode on detach", []string{"detach", "eth0", "--mode", "native"}, 2, "detach takes no such option"},
		{"two interfaces", []string{"status", "eth0", "eth1"}, 2, `unexpected "eth1"`},
		{"bad output", []string{"status", "eth0", "-o", "yaml"}, 2, "-o yaml"},
		{"unknown flag", []string{"attach", "eth0", "--force"}, 2, "flag provided but not defined"},
		{"bad interface name", []string{"attach", "../x"}, 1, `invalid interface name "../x"`},
		{"prune with arguments", []string{"prune", "eth0"}, 2, "prune takes no arguments"},
		{"follow without interface", []string{"follow"}, 2, "follow needs an interface"},
		{"gue port on follow", []string{"follow", "eth0", "--gue-port", "1"}, 2, "follow takes no such option"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.err) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr, tc.code, tc.err)
			}
			if code == 2 && !strings.Contains(stderr, "usage:") {
				t.Errorf("no usage text on stderr: %q", stderr)
			}
		})
	}
	if code, stdout, _ := runCLI("help"); code != 0 || !strings.Contains(stdout, "xlb-decap attach IFACE") {
		t.Errorf("help: exit %d, %q", code, stdout)
	}
}

// TestCLI attaches, inspects and detaches through the command line in a
// fresh network namespace holding a veth pair.
func TestCLI(t *testing.T) {
	testenv.RequireRoot(t)
	b := make([]byte, 4)
	rand.Read(b)
	ifname := "xdcc" + hex.EncodeToString(b)

	// The whole test runs on this thread, switched to the new namespace.
	testenv.InNewNetns(t)
	t.Cleanup(func() { runCLI("detach", ifname) })
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: ifname}, PeerName: ifname + "p"}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	addr, _ := netlink.ParseAddr("192.0.2.2/24")
	if err := netlink.AddrAdd(veth, addr); err != nil {
		t.Fatal(err)
	}

	code, stdout, stderr := runCLI("attach", ifname, "--mode", "generic")
	if code != 0 || !strings.Contains(stdout, "attached to "+ifname+" (generic)") {
		t.Fatalf("attach: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, _, stderr := runCLI("attach", ifname); code != 1 || !strings.Contains(stderr, "already attached") {
		t.Errorf("second attach: exit %d, %q", code, stderr)
	}
	code, stdout, stderr = runCLI("status", ifname)
	if code != 0 || !strings.Contains(stdout, "attached (generic)") || !strings.Contains(stdout, "rx_gre_4in4") ||
		!strings.Contains(stdout, "192.0.2.2") {
		t.Errorf("status: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, _ = runCLI("status", "-o", "json", ifname)
	var st decap.State
	if err := json.Unmarshal([]byte(stdout), &st); code != 0 || err != nil || !st.Attached || len(st.Counters) == 0 {
		t.Errorf("status -o json: exit %d, %v\n%s", code, err, stdout)
	}
	if !strings.Contains(stdout, `"mode": "generic"`) {
		t.Errorf("status -o json does not name the mode:\n%s", stdout)
	}
	if code, stdout, stderr := runCLI("sync", ifname); code != 0 || !strings.Contains(stdout, "192.0.2.2") {
		t.Errorf("sync: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := runCLI("detach", ifname); code != 0 || !strings.Contains(stdout, "detached") {
		t.Errorf("detach: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, _, stderr := runCLI("detach", ifname); code != 1 || !strings.Contains(stderr, "not attached") {
		t.Errorf("second detach: exit %d, %q", code, stderr)
	}
	if code, stdout, _ := runCLI("status", ifname); code != 0 || !strings.Contains(stdout, "not attached") {
		t.Errorf("status after detach: exit %d, %q", code, stdout)
	}
}
