package ctl

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/config"
)

// importNode is the node section an operator adds to the import.
const importNode = "node: {name: lb1, interface: eth0, address: 10.0.0.11, address6: fd00::11}\n"

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
		"      - {address: 192.168.10.12, weight: 0, method: ipip}\n",
		"  # ipvsadm -b sh-port: xlb's sh and maglev-source hash the client address only;",
		"    pools: [udp_10.10.0.2_53]\n    scheduler: sh\n",
		"      # ipvsadm -x 1000: connection thresholds have no xlb equivalent",
		// -m with another port: method nat rewrites the VIP's port to it.
		"      - {address: 192.168.10.21, weight: 2, method: nat, port: 5353}\n",
		"      - {address: 192.168.10.51, weight: 1, method: nat}\n",
		"  - name: tcp_2001-db8--10_80\n    vip: 2001:db8::10\n    port: 80\n    protocol: tcp\n",
		"    scheduler: wrr\n" + pers("persistence: {timeout: 1800s, netmask6: 64}"),
		"      - {address: 2001:db8:1::12, weight: 10, method: ipip}\n",
		// fwmark: its pool, and the services as a commented template in the group.
		"  fwm7:\n    backends:\n      - {address: 192.168.10.31, weight: 1, method: dr}\n",
		"  # ipvsadm -A -f 7 (line 12): a firewall-mark service.",
		"  #   pools: [fwm7]\n  #   scheduler: rr\n" + fwPers,
		// mh is Maglev on the source address; --pe has no equivalent.
		"  # ipvsadm --pe sip: persistence engines (SIP Call-ID) have no xlb equivalent; persistence is by client address\n  - name: tcp_10.10.0.3_0\n    vip: 10.10.0.3\n    port: 0\n",
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
	// With a node section the output is a config xlbd accepts as it is.
	c, err := config.Parse([]byte(importNode+out), "imported.yaml")
	if err != nil {
		t.Fatalf("the import is not a valid config:\n%v", err)
	}
	if len(c.Services) != 8 || len(c.Pools) != 9 {
		t.Errorf("%d services, %d pools; want 8 (the fwmark one is the operator's to write), 9", len(c.Services), len(c.Pools))
	}
	for _, p := range c.Pools {
		for _, b := range p.Backends {
			if b.Addr.String() == "192.168.10.21" && (b.Encap != config.EncapNAT || b.Port != 5353) {
				t.Errorf("192.168.10.21: method %v, port %d; want nat, 5353", b.Encap, b.Port)
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
		{"-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.1:80 -r 10.1.1.1 -w 70000\n", "rules:2: -w 70000: not a weight 0..65535 (xlb's range; IPVS's goes to 2147483647): divide"},
		{"-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.1:80 -r 10.1.1.1 -w 2147483648\n", "rules:2: -w 2147483648: not a weight 0..65535"},
		{"-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.1:80 -r 10.1.1.1 -x many\n", "rules:2: -x many: not a connection threshold"},
		{"-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.1:80 -r 10.1.1.1 -i --tun-type vxlan\n", "rules:2: --tun-type vxlan: not ipip, gre or gue"},
		{"-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.1:80 -r 10.1.1.1 -i --tun-type gue --tun-port 0\n", "rules:2: --tun-port 0: not a UDP port"},
		{"-A -t 10.0.0.1:80 -s rr -6\n", "rules:1: -6 belongs to firewall-mark services (-f), not tcp 10.0.0.1:80"},
		{"-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.1:80 -r 10.1.1.1 -q\n", "rules:2: real server option -q is not known"},
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

// Every option ipvsadm-save -n prints (and the long forms ipvsadm -R
// reads) gets an exact translation, or a comment that says why not. An
// exact case has no "# ipvsadm" comment at all; each output, with a node
// section, is a config xlbd accepts.
func TestImportIPVSadmOptions(t *testing.T) {
	const svc80 = "-A -t 10.0.0.1:80 -s rr\n"
	for _, tc := range []struct {
		name, in string
		want     []string
		exact    bool
	}{
		// Virtual services.
		{"-A -t", svc80, []string{"  - name: tcp_10.0.0.1_80\n    vip: 10.0.0.1\n    port: 80\n    protocol: tcp\n"}, true},
		{"-A -u", "-A -u 10.0.0.1:53 -s rr\n", []string{"    port: 53\n    protocol: udp\n"}, true},
		{"-A -t port 0", "-A -t 10.0.0.1:0 -s rr -p 60\n", []string{"    port: 0\n", "persistence: {timeout: 60s}"}, true},
		{"-A -f", "-A -f 7 -s rr\n-a -f 7 -r 10.1.1.1:0 -g -w 1\n",
			[]string{"  fwm7:\n    backends:\n      - {address: 10.1.1.1, weight: 1, method: dr}\n", "  # ipvsadm -A -f 7 (line 1): a firewall-mark service.", "  #   pools: [fwm7]\n"}, false},
		{"-A -f -6", "-A -f 9 -6 -s wrr -p 60\n-a -f 9 -6 -r [2001:db8:1::1]:0 -i -w 2\n",
			[]string{"      - {address: 2001:db8:1::1, weight: 2, method: ipip}\n", "  #   persistence: {timeout: 60s, group: fwm9}\n"}, false},
		{"-s rr", svc80, []string{"    scheduler: rr\n"}, true},
		{"-s wrr|lc|wlc|sed|nq|sh|dh|lblc|lblcr", "-A -t 10.0.0.1:1 -s wrr\n-A -t 10.0.0.1:2 -s lc\n-A -t 10.0.0.1:3 -s wlc\n" +
			"-A -t 10.0.0.1:4 -s sed\n-A -t 10.0.0.1:5 -s nq\n-A -t 10.0.0.1:6 -s sh\n-A -t 10.0.0.1:7 -s dh\n-A -t 10.0.0.1:8 -s lblc\n-A -t 10.0.0.1:9 -s lblcr\n",
			[]string{"scheduler: wrr\n", "scheduler: lc\n", "scheduler: wlc\n", "scheduler: sed\n", "scheduler: nq\n", "scheduler: sh\n",
				"scheduler: dh\n", "scheduler: lblc\n", "scheduler: lblcr\n"}, true},
		{"-s mh", "-A -t 10.0.0.1:80 -s mh\n", []string{"    scheduler: maglev-source\n"}, true},
		{"-s fo", "-A -t 10.0.0.1:80 -s fo\n", []string{"  # ipvsadm -s fo: no xlb equivalent; maglev instead\n", "    scheduler: maglev\n"}, false},
		{"-s ovf", "-A -t 10.0.0.1:80 -s ovf\n", []string{"  # ipvsadm -s ovf: no xlb equivalent; maglev instead\n"}, false},
		{"-p default", "-A -t 10.0.0.1:80 -s rr -p\n", []string{"persistence: {timeout: 300s}"}, true},
		{"-p TIMEOUT", "-A -u 10.0.0.1:53 -s rr -p 45\n", []string{"persistence: {timeout: 45s}"}, true},
		{"-M dotted", "-A -t 10.0.0.1:80 -s rr -p 300 -M 255.255.0.0\n", []string{"persistence: {timeout: 300s, netmask: 16}"}, true},
		{"-M prefix6", "-A -t [2001:db8::1]:80 -s rr -p 300 -M 56\n", []string{"persistence: {timeout: 300s, netmask6: 56}"}, true},
		{"-M not a mask", "-A -t 10.0.0.1:80 -s rr -p 300 -M 255.0.255.0\n",
			[]string{"  # ipvsadm -M 255.0.255.0: not a contiguous netmask; not imported\n", "persistence: {timeout: 300s}"}, false},
		{"-b sh-port", "-A -t 10.0.0.1:80 -s sh -b sh-port\n", []string{"  # ipvsadm -b sh-port: xlb's sh and maglev-source hash the client address only"}, false},
		{"-b sh-fallback,sh-port", "-A -t 10.0.0.1:80 -s sh -b sh-fallback,sh-port\n",
			[]string{"  # ipvsadm -b sh-fallback: xlb's hash tables hold only backends that take new flows", "  # ipvsadm -b sh-port: "}, false},
		{"-b mh-port", "-A -t 10.0.0.1:80 -s mh -b mh-port\n", []string{"  # ipvsadm -b mh-port: "}, false},
		{"-b mh-fallback", "-A -t 10.0.0.1:80 -s mh -b mh-fallback\n", []string{"  # ipvsadm -b mh-fallback: "}, false},
		{"-o", "-A -u 10.0.0.1:53 -s rr -o\n", []string{"  # ipvsadm -o (one-packet scheduling): xlb schedules each UDP flow once"}, false},
		{"-O", "-A -u 10.0.0.1:53 -s rr -O\n", []string{"  # ipvsadm -o (one-packet scheduling)"}, false},
		{"-p ops", "-A -u 10.0.0.1:53 -s rr -p ops\n", []string{"  # ipvsadm -o (one-packet scheduling)", "persistence: {timeout: 300s}"}, false},
		{"--pe", "-A -t 10.0.0.1:80 -s rr -p 60 --pe sip\n", []string{"  # ipvsadm --pe sip: persistence engines (SIP Call-ID) have no xlb equivalent"}, false},
		{"long options", "ipvsadm --add-service --tcp-service 10.0.0.1:80 --scheduler wrr --persistent 60 --netmask 255.255.255.0\n" +
			"ipvsadm --add-server --tcp-service 10.0.0.1:80 --real-server 10.1.1.1:8080 --masquerading --weight 3\n",
			[]string{"scheduler: wrr\n", "persistence: {timeout: 60s, netmask: 24}", "      - {address: 10.1.1.1, weight: 3, method: nat, port: 8080}\n"}, true},
		{"-C", "-C\n" + svc80, []string{"  - name: tcp_10.0.0.1_80\n"}, true},
		// Real servers.
		{"-r ADDR", svc80 + "-a -t 10.0.0.1:80 -r 10.1.1.1 -g -w 1\n", []string{"      - {address: 10.1.1.1, weight: 1, method: dr}\n"}, true},
		{"-g", svc80 + "-a -t 10.0.0.1:80 -r 10.1.1.1:80 -g -w 1\n", []string{"      - {address: 10.1.1.1, weight: 1, method: dr}\n"}, true},
		{"-i", svc80 + "-a -t 10.0.0.1:80 -r 10.1.1.1:80 -i -w 1\n", []string{"      - {address: 10.1.1.1, weight: 1, method: ipip}\n"}, true},
		{"-i --tun-type ipip", svc80 + "-a -t 10.0.0.1:80 -r 10.1.1.1:80 -i -w 1 --tun-type ipip\n", []string{"method: ipip}\n"}, true},
		{"-i --tun-type gre --tun-nocsum", svc80 + "-a -t 10.0.0.1:80 -r 10.1.1.1:80 -i -w 1 --tun-type gre --tun-nocsum\n",
			[]string{"      - {address: 10.1.1.1, weight: 1, method: gre}\n"}, true},
		{"-i --tun-type gre --tun-csum", svc80 + "-a -t 10.0.0.1:80 -r 10.1.1.1:80 -i -w 1 --tun-type gre --tun-csum\n",
			[]string{"      # ipvsadm --tun-csum: xlb's tunnels carry no checksum", "method: gre}\n"}, false},
		{"-i --tun-type gue --tun-port", svc80 + "-a -t 10.0.0.1:80 -r 10.1.1.1:80 -i -w 1 --tun-type gue --tun-port 5555 --tun-remcsum\n",
			[]string{"      # ipvsadm --tun-port 5555: xlb sends GUE to node.gue_port, one port for all backends (default 6080): set node.gue_port: 5555\n",
				"      # ipvsadm --tun-remcsum: xlb's tunnels carry no checksum", "      - {address: 10.1.1.1, weight: 1, method: gue}\n"}, false},
		{"-m same port", svc80 + "-a -t 10.0.0.1:80 -r 10.1.1.1:80 -m -w 1\n", []string{"      - {address: 10.1.1.1, weight: 1, method: nat}\n"}, true},
		{"-m another port", svc80 + "-a -t 10.0.0.1:80 -r 10.1.1.1:8080 -m -w 1\n", []string{"      - {address: 10.1.1.1, weight: 1, method: nat, port: 8080}\n"}, true},
		{"-m another port, IPv6", "-A -t [2001:db8::1]:443 -s rr\n-a -t [2001:db8::1]:443 -r [2001:db8:1::1]:8443 -m -w 1\n",
			[]string{"      - {address: 2001:db8:1::1, weight: 1, method: nat, port: 8443}\n"}, true},
		{"-m port on a persistent all-ports service", "-A -t 10.0.0.1:0 -s rr -p 60\n-a -t 10.0.0.1:0 -r 10.1.1.1:8080 -m -w 1\n",
			[]string{"      # ipvsadm -r 10.1.1.1:8080 -m: a persistent all-ports service keeps each packet's port, as xlb does without port:\n",
				"      - {address: 10.1.1.1, weight: 1, method: nat}\n"}, false},
		{"-m port on a firewall-mark service", "-A -f 3 -s rr\n-a -f 3 -r 10.1.1.1:8080 -m -w 1\n",
			[]string{"      - {address: 10.1.1.1, weight: 1, method: nat, port: 8080}\n"}, false},
		{"-m port on a persistent firewall-mark service", "-A -f 3 -s rr -p 60\n-a -f 3 -r 10.1.1.1:8080 -m -w 1\n",
			[]string{"      # ipvsadm -r 10.1.1.1:8080 -m: a persistent firewall-mark service keeps each packet's port", "      - {address: 10.1.1.1, weight: 1, method: nat}\n"}, false},
		{"-g with another port", svc80 + "-a -t 10.0.0.1:80 -r 10.1.1.1:8080 -g -w 1\n",
			[]string{"      # ipvsadm -r 10.1.1.1:8080 without -m: IPVS keeps the service's port (only -m rewrites it), as xlb does\n",
				"      - {address: 10.1.1.1, weight: 1, method: dr}\n"}, false},
		{"-w", svc80 + "-a -t 10.0.0.1:80 -r 10.1.1.1:80 -g -w 65535\n", []string{"weight: 65535, "}, true},
		{"-w 0", svc80 + "-a -t 10.0.0.1:80 -r 10.1.1.1:80 -g -w 0\n", []string{"weight: 0, "}, true},
		{"-x 0 -y 0", svc80 + "-a -t 10.0.0.1:80 -r 10.1.1.1:80 -g -w 1 -x 0 -y 0\n", []string{"weight: 1, method: dr}\n"}, true},
		{"-x -y", svc80 + "-a -t 10.0.0.1:80 -r 10.1.1.1:80 -g -w 1 -x 100 -y 50\n",
			[]string{"      # ipvsadm -x 100: connection thresholds have no xlb equivalent", "      # ipvsadm -y 50: connection thresholds"}, false},
		{"--tun-type without -i", svc80 + "-a -t 10.0.0.1:80 -r 10.1.1.1:80 -g -w 1 --tun-type gre\n",
			[]string{"      # ipvsadm --tun-type gre without -i: IPVS does not tunnel to this real, nor does xlb\n", "method: dr}\n"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			if !strings.Contains(in, "-a ") {
				// A real for each service, so that the config is whole.
				for _, l := range strings.Split(tc.in, "\n") {
					if f := strings.Fields(l); len(f) > 2 && f[0] == "-A" {
						in += "-a " + f[1] + " " + f[2] + " -r 10.9.9.9 -i -w 1\n"
					}
				}
			}
			out, err := ImportIPVSadm(strings.NewReader(in), "rules")
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if has := strings.Contains(out, "# ipvsadm "); has == tc.exact {
				t.Errorf("exact %v, but the output has comments %v:\n%s", tc.exact, has, out)
			}
			if _, err := config.Parse([]byte(importNode+out), "imported.yaml"); err != nil {
				t.Errorf("not a config xlbd accepts: %v\n%s", err, out)
			}
		})
	}
}
