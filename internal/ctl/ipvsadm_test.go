package ctl

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/config"
)

// importNode is the node section an operator adds to the import.
const importNode = "node: {name: lb1, interface: eth0, address: 10.0.0.11, address6: fd00::11}\n"

// withoutMethods drops the method keys (dr, nat): the forwarding-method
// settings are not part of this version's config.
var methodKey = regexp.MustCompile(`, method: (dr|nat)`)

func TestImportIPVSadm(t *testing.T) {
	in, err := os.ReadFile("testdata/ipvsadm-save.txt")
	if err != nil {
		t.Fatal(err)
	}
	out, err := ImportIPVSadm(bytes.NewReader(in), "rules")
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out)
	pers := func(p string) string { return "    " + p + "\n" }
	fwPers := "  #   persistence: {timeout: 600s, group: fwm7}\n"
	for _, want := range []string{
		"  - name: tcp_10.10.0.1_80\n    vip: 10.10.0.1\n    port: 80\n    protocol: tcp\n    pools: [tcp_10.10.0.1_80]\n    scheduler: wlc\n",
		"      - {address: 192.168.10.11, weight: 1, method: dr}\n      - {address: 192.168.10.12, weight: 3, method: dr}\n",
		"    scheduler: rr\n" + pers("persistence: {timeout: 300s, netmask: 24}"),
		"      - {address: 192.168.10.12, weight: 0, encap: ipip}\n",
		"  # ipvsadm -b sh-port: scheduler flags have no xlb equivalent\n",
		"    pools: [udp_10.10.0.2_53]\n    scheduler: sh\n",
		"      # ipvsadm -x 1000: connection thresholds have no xlb equivalent\n",
		"      # ipvsadm -r 192.168.10.21:5353 -m: port 5353; xlb does not translate ports",
		"  - name: tcp_2001-db8--10_80\n    vip: 2001:db8::10\n    port: 80\n    protocol: tcp\n",
		"    scheduler: wrr\n" + pers("persistence: {timeout: 1800s, netmask6: 64}"),
		"      - {address: 2001:db8:1::12, weight: 10, encap: ipip}\n",
		// fwmark: its pool, and the services as a commented template in the group.
		"  fwm7:\n    backends:\n      - {address: 192.168.10.31, weight: 1, method: dr}\n",
		"  # ipvsadm -A -f 7 (line 12): a firewall-mark service.",
		"  #   pools: [fwm7]\n  #   scheduler: rr\n" + fwPers,
		// mh is Maglev on the source address; --pe has no equivalent.
		"  # ipvsadm --pe sip: persistence engines have no xlb equivalent\n  - name: tcp_10.10.0.3_0\n    vip: 10.10.0.3\n    port: 0\n",
		"    scheduler: maglev-source\n" + pers("persistence: {timeout: 120s}"),
		"  # ipvsadm -s twos: no xlb equivalent; maglev instead\n  # ipvsadm -o (one-packet scheduling)",
		"    scheduler: dh\n" + pers("persistence: {timeout: 300s}"),
		// lblc is IPVS's lblc.
		"  - name: tcp_10.10.0.6_25\n    vip: 10.10.0.6\n    port: 25\n    protocol: tcp\n    pools: [tcp_10.10.0.6_25]\n    scheduler: lblc\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks\n%s", want)
		}
	}
	// With a node section the output is a config xlbd accepts, once the
	// method keys (dr, nat) are understood.
	cfg := importNode + methodKey.ReplaceAllString(out, "")
	c, err := config.Parse([]byte(cfg), "imported.yaml")
	if err != nil {
		t.Fatalf("the import is not a valid config:\n%v", err)
	}
	if len(c.Services) != 8 || len(c.Pools) != 9 {
		t.Errorf("%d services, %d pools; want 8 (the fwmark one is the operator's to write), 9", len(c.Services), len(c.Pools))
	}
	if _, err := config.Parse([]byte(importNode+out), "imported.yaml"); err != nil {
		// What is left is only the method keys.
		for _, line := range strings.Split(err.Error(), "\n") {
			if line != "" && !strings.Contains(line, `unknown field "method"`) && !strings.Contains(line, "errors") {
				t.Errorf("unexpected error besides method: %s", line)
			}
		}
	}
}

func TestImportIPVSadmRejects(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"-a -t 10.0.0.1:80 -r 10.1.1.1:80 -g -w 1\n", "rules:1: real server of tcp 10.0.0.1:80 before its service (-A)"},
		{"-A -t 10.0.0.1:80 -s rr\n-A -t 10.0.0.1:80 -s wrr\n", "rules:2: tcp 10.0.0.1:80 defined again (first on line 1)"},
		{"-A -t web.example:80 -s rr\n", "rules:1: -t web.example:80: not ADDR:PORT"},
		{"-A --sctp-service 10.0.0.1:80\n", "rules:1: SCTP services have no xlb equivalent"},
		{"-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.1:80 -r 10.1.1.1 -w 70000\n", "rules:2: -w 70000: not a weight 0..65535"},
		{"-E -t 10.0.0.1:80 -s rr\n", `rules:1: "-E" is not an ipvsadm-save rule`},
		{"-A -t 10.0.0.1:80 -z\n", "rules:1: service option -z is not known"},
	} {
		_, err := ImportIPVSadm(strings.NewReader(tc.in), "rules")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %s", tc.in, err, tc.want)
		}
	}
}

// The command reads a file or stdin and prints the YAML.
func TestImportCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	c := New(&out, &errOut)
	if rc := c.Run(context.Background(), []string{"import", "ipvsadm", "testdata/ipvsadm-save.txt"}); rc != 0 {
		t.Fatalf("exit %d: %s", rc, errOut.String())
	}
	if !strings.Contains(out.String(), "services:\n  - name: tcp_10.10.0.1_80\n") {
		t.Errorf("output:\n%s", out.String())
	}
	out.Reset()
	if rc := c.Run(context.Background(), []string{"import", "nginx"}); rc == 0 {
		t.Error("import nginx accepted")
	}
}
