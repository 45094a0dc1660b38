package config

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// methodsHead has a node and, on lines 4-7, a pool with one IPv4 backend
// of each kind the route lookup below knows.
const methodsHead = `node: {name: lb1, interface: eth0, address: 10.0.0.11, address6: fd00::11}
pools:
  web:
    backends:
      - {address: 10.0.0.21, weight: 1}
      - {address: 10.0.0.22, weight: 2, method: gre}
      - {address: 10.0.0.23, port: 8080}
`

// kernelRoutes answers like the kernel of a node on 10.0.0.0/24 and
// fd00::/64 with a gateway 10.0.0.1 to everything else.
func kernelRoutes(a netip.Addr) (Route, error) {
	switch {
	case a == netip.MustParseAddr("10.0.0.11"):
		return Route{Local: true, Dev: "lo"}, nil
	case netip.MustParsePrefix("10.0.0.0/24").Contains(a), netip.MustParsePrefix("fd00::/64").Contains(a):
		return Route{Dev: "eth0"}, nil
	case a.Is4():
		return Route{Gateway: netip.MustParseAddr("10.0.0.1"), Dev: "eth0"}, nil
	}
	return Route{}, errors.New("network is unreachable")
}

func withRoutes(t *testing.T) {
	UseRoutes(kernelRoutes)
	t.Cleanup(func() { UseRoutes(nil) })
}

func TestMethodsParse(t *testing.T) {
	withRoutes(t)
	cfg, err := Parse([]byte(strings.Replace(methodsHead, "pools:\n", "pools:\n  old:\n    backends: [{address: 192.0.2.5}]\n  dr:\n    backends: [{address: 10.0.0.31}, {address: 10.0.0.11}, {address: 198.51.100.7, method: gue}]\n", 1)+`services:
  - {name: web, vip: 10.0.100.1, port: 80, protocol: tcp, pools: [web], method: nat}
  - {name: old, vip: 10.0.100.2, port: 80, protocol: tcp, pools: [old], encap: ipip}
  - {name: dr, vip: 10.0.100.3, port: 80, protocol: tcp, pools: [dr], method: dr}
  - {name: gue, vip: 10.0.100.4, port: 53, protocol: udp, pools: [old], method: gue}
`), "c.yaml")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if cfg.Node.GUEPort != DefaultGUEPort {
		t.Errorf("node.gue_port = %d, want the default %d", cfg.Node.GUEPort, DefaultGUEPort)
	}
	for i, want := range []Encap{EncapNAT, EncapIPIP, EncapDR, EncapGUE} {
		if got := cfg.Services[i].Encap; got != want {
			t.Errorf("services[%d] method %s, want %s", i, got, want)
		}
	}
	web := cfg.Pools[2]
	if web.Name != "web" || web.Backends[1].Encap != EncapGRE || web.Backends[2].Port != 8080 || web.Backends[0].Port != 0 {
		t.Errorf("pool web decoded as %+v", web)
	}
	// The written form reads back the same.
	out, err := cfg.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(out, "marshalled")
	if err != nil {
		t.Fatalf("marshalled config does not parse: %v\n%s", err, out)
	}
	if back.Pools[2].Backends[2].Port != 8080 || back.Services[0].Encap != EncapNAT || back.Node.GUEPort != DefaultGUEPort {
		t.Errorf("marshalled config lost the method or port:\n%s", out)
	}
}

// methodRejection is a config the methods' checks refuse, the error kind
// and the message they give.
type methodRejection struct {
	name string
	in   string
	kind error
	want string
}

// methodRejections are TestMethodsReject's cases, judged with
// kernelRoutes as the route lookup.
func methodRejections() []methodRejection {
	svc := func(line string) string { return methodsHead + "services:\n  - " + line + "\n" }
	return []methodRejection{
		{"port on a GRE backend", svc("{name: web, vip: 10.0.100.1, port: 80, protocol: tcp, pools: [web]}"), ErrInvalid,
			`c.yaml:7: pools.web.backends[2].port: port 8080 needs method nat, but service "web" (services[0], line 9) sends to this backend with gre: remove port`},
		{"port on a DR backend", svc("{name: web, vip: 10.0.100.1, port: 80, protocol: tcp, pools: [web], method: dr}"), ErrInvalid,
			`c.yaml:7: pools.web.backends[2].port: port 8080 needs method nat, but service "web" (services[0], line 9) sends to this backend with dr`},
		{"NAT port on an all-ports service", svc("{name: web, vip: 10.0.100.1, port: 0, protocol: tcp, pools: [web], method: nat}"), ErrInvalid,
			`c.yaml:7: pools.web.backends[2].port: port 8080 cannot be mapped from service "web" (services[0], line 9), which serves all ports`},
		{"method and encap both", svc("{name: web, vip: 10.0.100.1, port: 80, protocol: tcp, pools: [web], method: nat, encap: gre}"), ErrDuplicate,
			`c.yaml:9: services[0].encap: encap is the older name of method: give method only`},
		{"unknown method", svc("{name: web, vip: 10.0.100.1, port: 80, protocol: tcp, pools: [web], method: tun}"), ErrInvalid,
			`c.yaml:9: services[0].method: "tun" is not one of gre, ipip, gue, dr, nat`},
		{"NAT to a routed backend", strings.Replace(methodsHead, "10.0.0.21", "192.0.2.21", 1) +
			"services:\n  - {name: web, vip: 10.0.100.1, port: 80, protocol: tcp, pools: [web], method: nat}\n", ErrInvalid,
			`c.yaml:5: pools.web.backends[0].address: method nat needs backend 192.0.2.21 on a directly connected segment, so that the node can be its route back to the clients, but the kernel routes it via 10.0.0.1 (dev eth0)`},
		{"DR to a routed backend", strings.Replace(methodsHead, "10.0.0.23, port: 8080", "192.0.2.23", 1) +
			"services:\n  - {name: web, vip: 10.0.100.1, port: 80, protocol: tcp, pools: [web], method: dr}\n", ErrInvalid,
			`c.yaml:7: pools.web.backends[2].address: method dr needs backend 192.0.2.23 on a directly connected segment, but the kernel routes it via 10.0.0.1 (dev eth0): use gre, ipip or gue for it`},
		{"DR across families", strings.Replace(methodsHead, "10.0.0.23, port: 8080", "fd00::23", 1) +
			"services:\n  - {name: web, vip: 10.0.100.1, port: 80, protocol: tcp, pools: [web], method: dr}\n", ErrInvalid,
			`c.yaml:7: pools.web.backends[2]: method dr sends the client's packet without an outer header, so backend fd00::23 must be of the family of service "web"'s VIP 10.0.100.1`},
		{"GUE without a port", strings.Replace(methodsHead, "address6: fd00::11}", "address6: fd00::11, gue_port: 0}", 1) +
			"services:\n  - {name: web, vip: 10.0.100.1, port: 80, protocol: tcp, pools: [web], method: gue}\n", ErrInvalid,
			`c.yaml:1: node.gue_port: 0 is not a UDP port, and backend 10.0.0.21 of service "web" uses method gue`},
		{"GUE port clash", strings.Replace(methodsHead, "address6: fd00::11}", "address6: fd00::11, gue_port: 53}", 1) +
			"services:\n  - {name: dns, vip: 10.0.100.1, port: 53, protocol: udp, pools: [web], method: gue}\n", ErrInvalid,
			`c.yaml:9: services[0].port: UDP port 53 is node.gue_port (line 1), the port backend 10.0.0.21 receives GUE on`},
	}
}

func TestMethodsReject(t *testing.T) {
	withRoutes(t)
	for _, tc := range methodRejections() {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in), "c.yaml")
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.in)
			}
			if !errors.Is(err, tc.kind) {
				t.Errorf("error is not %v: %v", tc.kind, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error\n%v\nwants\n%s", err, tc.want)
			}
		})
	}
}

// Without a route lookup (a file checked away from its node) the
// directly-connected check is skipped; the others stay: every rejection of
// TestMethodsReject that does not come from a route is still made, with the
// same message.
func TestMethodsNoRouteLookup(t *testing.T) {
	UseRoutes(nil)
	in := strings.Replace(methodsHead, "10.0.0.21", "192.0.2.21", 1) +
		"services:\n  - {name: web, vip: 10.0.100.1, port: 80, protocol: tcp, pools: [web], method: nat}\n"
	if _, err := Parse([]byte(in), "c.yaml"); err != nil {
		t.Fatalf("Parse: %v", err)
	}
	n := 0
	for _, tc := range methodRejections() {
		if strings.Contains(tc.want, "the kernel routes it") {
			continue
		}
		n++
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in), "c.yaml")
			if !errors.Is(err, tc.kind) || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("without a route lookup: error %v, want %v with\n%s", err, tc.kind, tc.want)
			}
		})
	}
	if n < 5 {
		t.Errorf("only %d rejections checked without a route lookup", n)
	}
}
