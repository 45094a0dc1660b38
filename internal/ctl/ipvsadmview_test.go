package ctl

import (
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/config"
)

// services --ipvsadm: ipvsadm -Ln's layout, padding included: the
// scheduler and persistence flags on the service's line (an IPv4 mask
// dotted, an IPv6 one as a prefix length), and weight 0 for a backend
// that takes no new flows (drained, or outside the active pool).
func TestServicesIPVSAdm(t *testing.T) {
	e := newEnv(t)
	d := e.fake.Desired()
	e.fake.Lock()
	d.Services[0].Scheduler = config.SchedulerWLC
	d.Services[0].Persistence = config.Persistence{Timeout: 300 * time.Second, Netmask: 24}
	d.Services[1].Scheduler = config.SchedulerLBLC
	d.Services[1].Persistence = config.Persistence{Timeout: 30 * time.Second, Netmask6: 64}
	e.fake.Unlock()
	e.ok("drain", "2001:db8:1::2", "--service", "dns")
	want := []string{
		"xlb services (2, the layout of ipvsadm -Ln)",
		"Prot LocalAddress:Port Scheduler Flags",
		"  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn",
		"TCP  10.0.0.100:80 wlc persistent 300 mask 255.255.255.0",
		"  -> 10.0.1.1:80                  Tunnel  2      12         3         ",
		"  -> 10.0.1.2:80                  Tunnel  1      0          0         ",
		"  -> 10.0.2.1:80                  Tunnel  0      0          0         ",
		"UDP  [2001:db8::100]:53 lblc persistent 30 mask 64",
		"  -> [2001:db8:1::1]:53           Tunnel  1      0          0         ",
		"  -> [2001:db8:1::2]:53           Tunnel  0      0          0         ",
	}
	if got := e.ok("services", "--ipvsadm"); got != strings.Join(want, "\n")+"\n" {
		t.Fatalf("got:\n%q\nwant:\n%q", got, want)
	}
	// Without persistence, or under the whole address: no flags, no mask.
	e.fake.Lock()
	d.Services[0].Persistence = config.Persistence{}
	d.Services[1].Persistence.Netmask6 = 0
	e.fake.Unlock()
	out := e.ok("services", "--ipvsadm")
	for _, line := range []string{"TCP  10.0.0.100:80 wlc\n", "UDP  [2001:db8::100]:53 lblc persistent 30\n"} {
		if !strings.Contains(out, line) {
			t.Errorf("lacks %q:\n%s", line, out)
		}
	}
	if _, errOut, code := e.run("services", "--ipvsadm", "--rate"); code != 2 || !strings.Contains(errOut, "do not go together") {
		t.Errorf("--ipvsadm --rate: exit %d, %q", code, errOut)
	}
}
