package config

import (
	"errors"
	"strings"
	"testing"
)

// head is a valid node (line 1) and pool (lines 2-4) that rejection cases
// build on, so that line numbers are easy to count: a case's own text starts
// at line 5.
const head = `node: {name: lb1, interface: eth0, address: 10.0.0.11, address6: fd00::11}
pools:
  p:
    backends: [{address: 10.0.1.1}, {address: fd00:1::1}]
`

// svc is a valid services section on lines 5-6 (after head).
const svc = `services:
  - {name: s, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [p]}
`

func TestReject(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		kind error
		// want are texts that must each appear in one error, normally
		// "c.yaml:<line>: <field>: <start of message>".
		want []string
	}{
		// The file as a whole.
		{"empty file", "", ErrEmpty, []string{"c.yaml: file holds no YAML document"}},
		{"comments only", "# nothing\n\n", ErrEmpty, []string{"c.yaml: file holds no YAML document"}},
		{"empty document", "---\n", ErrEmpty, []string{"c.yaml:2: the document is empty"}},
		{"null document", "~\n", ErrEmpty, []string{"c.yaml:1: the document is empty"}},
		{"trailing document", head + svc + "---\nnode: {}\n", ErrSyntax,
			[]string{"c.yaml:7: a second YAML document starts here"}},
		{"trailing empty document", head + "---\n", ErrSyntax,
			[]string{"c.yaml:5: a second YAML document starts here"}},
		{"syntax error", head + "services:\n  - {name: s\n", ErrSyntax, []string{"c.yaml:6: did not find expected"}},
		{"root not a mapping", "- a\n- b\n", ErrInvalid, []string{"c.yaml:1: must be a mapping (node, health_checks, pools, services, bgp, kubernetes), not a list"}},
		{"alias", head + "services: *x\n", ErrSyntax, []string{"c.yaml: unknown anchor 'x' referenced"}},
		{"anchor and alias", head + "services:\n  - &s {name: s, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [p]}\n  - *s\n",
			ErrSyntax, []string{"c.yaml:7: services[1]: YAML aliases (*s) are not supported"}},
		{"merge key", head + "services:\n  - <<: {name: s}\n", ErrSyntax,
			[]string{"c.yaml:6: services[0]: YAML merge keys (<<) are not supported"}},

		// Unknown fields at every level.
		{"unknown top-level field", head + "servics: []\n", ErrUnknownField,
			[]string{`c.yaml:5: servics: unknown field "servics" (known fields: node, health_checks, pools, services, bgp, kubernetes)`}},
		{"unknown node field", "node: {interface: eth0, iface: eth1}\n", ErrUnknownField,
			[]string{`c.yaml:1: node.iface: unknown field "iface"`}},
		{"unknown timeouts field", "node:\n  interface: eth0\n  timeouts:\n    tcp_est: 1m\n", ErrUnknownField,
			[]string{`c.yaml:4: node.timeouts.tcp_est: unknown field "tcp_est" (known fields: tcp, tcp_syn, tcp_fin, udp)`}},
		{"unknown pool field", head + "  q:\n    backend: []\n", ErrUnknownField,
			[]string{`c.yaml:6: pools.q.backend: unknown field "backend" (known fields: backends, include, health_check)`}},
		{"unknown backend field", head + "  q:\n    backends:\n      - {address: 10.0.1.5, wieght: 2}\n", ErrUnknownField,
			[]string{`c.yaml:7: pools.q.backends[0].wieght: unknown field "wieght"`}},
		{"unknown service field", head + svc + "  - {name: t, vip: 10.200.0.2, port: 80, protocol: tcp, pools: [p], tabel_size: 7}\n",
			ErrUnknownField, []string{`c.yaml:7: services[1].tabel_size: unknown field "tabel_size"`}},

		// Duplicates.
		{"duplicate top-level key", head + svc + "node: {interface: eth1}\n", ErrDuplicate,
			[]string{`c.yaml:7: node: duplicate key "node" (first at line 1)`}},
		{"duplicate node key", "node:\n  interface: eth0\n  interface: eth1\n", ErrDuplicate,
			[]string{`c.yaml:3: node.interface: duplicate key "interface" (first at line 2)`}},
		{"duplicate pool name", head + "  p:\n    backends: [{address: 10.0.1.9}]\n", ErrDuplicate,
			[]string{`c.yaml:5: pools.p: duplicate key "p" (first at line 3)`}},
		{"duplicate service key", head + "services:\n  - name: s\n    vip: 10.200.0.1\n    port: 80\n    port: 81\n    protocol: tcp\n    pools: [p]\n",
			ErrDuplicate, []string{`c.yaml:9: services[0].port: duplicate key "port" (first at line 8)`}},
		{"duplicate service name", head + svc + "  - {name: s, vip: 10.200.0.2, port: 80, protocol: tcp, pools: [p]}\n",
			ErrDuplicate, []string{`c.yaml:7: services[1].name: duplicate service name "s" (first at services[0], line 6)`}},
		{"duplicate VIP", head + svc + "  - {name: t, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [p]}\n",
			ErrDuplicate, []string{`c.yaml:7: services[1].vip: duplicate VIP 10.200.0.1 port 80 tcp: services[0] "s" (line 6) serves it already`}},
		{"duplicate all-ports VIP", head + "services:\n" +
			"  - {name: s, vip: fd00::200, port: 0, protocol: udp, pools: [p]}\n" +
			"  - {name: t, vip: fd00::200, port: 0, protocol: udp, pools: [p]}\n",
			ErrDuplicate, []string{`c.yaml:7: services[1].vip: duplicate VIP fd00::200 all ports udp`}},
		{"duplicate backend in pool", head + "  q:\n    backends:\n      - {address: 10.0.1.5}\n      - {address: 10.0.1.5, weight: 3}\n",
			ErrDuplicate, []string{`c.yaml:8: pools.q.backends[1].address: backend 10.0.1.5 is listed twice in pool "q" (first at pools.q.backends[0], line 7)`}},
		{"duplicate include", head + "  q:\n    include: [p, p]\n", ErrDuplicate,
			[]string{`c.yaml:6: pools.q.include[1]: pool "p" is included twice`}},
		{"duplicate pool reference", head + "services:\n  - {name: s, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [p, p]}\n",
			ErrDuplicate, []string{`c.yaml:6: services[0].pools[1]: pool "p" is listed twice`}},

		// Addresses.
		{"vip not an address", head + "services:\n  - {name: s, vip: 10.200.0.256, port: 80, protocol: tcp, pools: [p]}\n",
			ErrInvalid, []string{`c.yaml:6: services[0].vip: "10.200.0.256" is not an IP address`}},
		{"vip multicast", head + "services:\n  - {name: s, vip: 239.1.1.1, port: 80, protocol: tcp, pools: [p]}\n",
			ErrInvalid, []string{`c.yaml:6: services[0].vip: 239.1.1.1 is a multicast address`}},
		{"vip unspecified", head + "services:\n  - {name: s, vip: '::', port: 80, protocol: tcp, pools: [p]}\n",
			ErrInvalid, []string{`c.yaml:6: services[0].vip: :: is the unspecified address`}},
		{"vip with zone", head + "services:\n  - {name: s, vip: 'fe80::1%eth0', port: 80, protocol: tcp, pools: [p]}\n",
			ErrInvalid, []string{`c.yaml:6: services[0].vip: fe80::1%eth0 has a zone`}},
		{"vip v4-mapped", head + "services:\n  - {name: s, vip: '::ffff:10.200.0.1', port: 80, protocol: tcp, pools: [p]}\n",
			ErrInvalid, []string{`c.yaml:6: services[0].vip: ::ffff:10.200.0.1 is an IPv4-mapped IPv6 address: write it as 10.200.0.1`}},
		{"vip missing", head + "services:\n  - {name: s, port: 80, protocol: tcp, pools: [p]}\n",
			ErrRequired, []string{`c.yaml:6: services[0].vip: required`}},
		{"backend loopback", head + "  q:\n    backends: [{address: 127.0.0.1}]\n", ErrInvalid,
			[]string{`c.yaml:6: pools.q.backends[0].address: 127.0.0.1 is a loopback address`}},
		{"backend not an address", head + "  q:\n    backends: [{address: backend1}]\n", ErrInvalid,
			[]string{`c.yaml:6: pools.q.backends[0].address: "backend1" is not an IP address`}},
		{"backend address missing", head + "  q:\n    backends: [{weight: 2}]\n", ErrRequired,
			[]string{`c.yaml:6: pools.q.backends[0].address: required`}},
		{"node address is IPv6", "node: {interface: eth0, address: fd00::1}\n", ErrInvalid,
			[]string{`c.yaml:1: node.address: fd00::1 is not an IPv4 address`}},
		{"node address6 is IPv4", "node: {interface: eth0, address6: 10.0.0.1}\n", ErrInvalid,
			[]string{`c.yaml:1: node.address6: 10.0.0.1 is not an IPv6 address`}},
		{"bad MAC", "node:\n  interface: eth0\n  gateway_mac: 02:00:00:00:00\n", ErrInvalid,
			[]string{`c.yaml:3: node.gateway_mac: "02:00:00:00:00" is not a MAC address`}},
		{"multicast MAC", "node:\n  interface: eth0\n  gateway_mac: 01:00:5e:00:00:01\n", ErrInvalid,
			[]string{`c.yaml:3: node.gateway_mac: 01:00:5e:00:00:01 is a multicast or broadcast address`}},
		{"long MAC", "node:\n  interface: eth0\n  gateway_mac: 02:00:00:00:00:00:00:01\n", ErrInvalid,
			[]string{`c.yaml:3: node.gateway_mac: 02:00:00:00:00:00:00:01 is not a 6-byte Ethernet address`}},

		// Node.
		{"node missing", head[strings.Index(head, "pools:"):], ErrRequired, []string{`c.yaml:1: node: required`}},
		{"interface missing", "node: {name: lb1}\n", ErrRequired, []string{`c.yaml:1: node.interface: required`}},
		{"interface invalid", "node: {interface: eth0/1}\n", ErrInvalid, []string{`c.yaml:1: node.interface: "eth0/1" is not a valid interface name`}},
		{"interface too long", "node: {interface: abcdefghijklmnop}\n", ErrInvalid, []string{`c.yaml:1: node.interface: "abcdefghijklmnop" is not a valid interface name`}},
		{"node name dotdot", "node:\n  name: ..\n  interface: eth0\n", ErrInvalid,
			[]string{`c.yaml:2: node.name: ".." is not a valid instance name`}},
		{"node name slash", "node:\n  name: a/b\n  interface: eth0\n", ErrInvalid,
			[]string{`c.yaml:2: node.name: "a/b" is not a valid instance name`}},
		{"node name too long", "node:\n  name: " + strings.Repeat("n", 65) + "\n  interface: eth0\n", ErrInvalid,
			[]string{`c.yaml:2: node.name: "nnnn`}},
		{"node is a list", "node: [eth0]\n", ErrInvalid, []string{`c.yaml:1: node: must be a mapping`}},
		{"address missing for IPv4 backend", "node: {interface: eth0, address6: fd00::11}\n" + head[strings.Index(head, "pools:"):] + svc,
			ErrRequired, []string{`c.yaml:1: node.address: required: the source address of packets to IPv4 backends, such as 10.0.1.1 (pools.p.backends[0], line 4) used by services[0] "s" via pool "p"`}},
		{"address6 missing for IPv6 backend", "node: {interface: eth0, address: 10.0.0.11}\n" + head[strings.Index(head, "pools:"):] + svc,
			ErrRequired, []string{`c.yaml:1: node.address6: required: the source address of packets to IPv6 backends, such as fd00:1::1 (pools.p.backends[1], line 4)`}},
		{"fragment pool without this node", "node:\n  interface: eth0\n  address: 10.0.0.11\n  fragment_pool: [10.0.0.12]\n", ErrInvalid,
			[]string{`c.yaml:4: node.fragment_pool: this node is not in the pool`}},
		{"fragment pool duplicate", "node:\n  interface: eth0\n  address: 10.0.0.11\n  fragment_pool: [10.0.0.11, 10.0.0.11]\n", ErrDuplicate,
			[]string{`c.yaml:4: node.fragment_pool[1]: 10.0.0.11 appears twice`}},
		{"fragment pool multicast", "node:\n  interface: eth0\n  address: 10.0.0.11\n  fragment_pool: [10.0.0.11, 224.0.0.1]\n", ErrInvalid,
			[]string{`c.yaml:4: node.fragment_pool[1]: 224.0.0.1`}},
		{"fragment pool family without source", "node:\n  interface: eth0\n  address: 10.0.0.11\n  fragment_pool: [10.0.0.11, fd00::12]\n", ErrInvalid,
			[]string{`c.yaml:4: node.fragment_pool[1]: fd00::12 is IPv6: redirects to it need node.address6`}},
		{"fragment pool bad address", "node:\n  interface: eth0\n  address: 10.0.0.11\n  fragment_pool: [10.0.0.11, nope]\n", ErrInvalid,
			[]string{`c.yaml:4: node.fragment_pool[1]:`}},
		{"fragment table too small", "node:\n  interface: eth0\n  fragment_table_entries: 10\n", ErrInvalid,
			[]string{`c.yaml:3: node.fragment_table_entries: 10 is out of range 1024..16777216`}},
		{"fragments not a bool", head + "services:\n  - {name: s, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [p], fragments: 3}\n", ErrInvalid,
			[]string{`c.yaml:6: services[0].fragments:`}},
		{"icmp echo rate too large", "node:\n  interface: eth0\n  icmp_echo_rate: 16777217\n", ErrInvalid,
			[]string{`c.yaml:3: node.icmp_echo_rate: 16777217 is out of range 0..16777216`}},
		{"trace rate too large", "node:\n  interface: eth0\n  trace_rate: 1048577\n", ErrInvalid,
			[]string{`c.yaml:3: node.trace_rate: 1048577 is out of range 0..1048576`}},
		{"icmp too-big rate too large", "node:\n  interface: eth0\n  icmp_too_big_rate: 16777217\n", ErrInvalid,
			[]string{`c.yaml:3: node.icmp_too_big_rate: 16777217 is out of range 0..16777216`}},
		{"icmp echo rate negative", "node:\n  interface: eth0\n  icmp_echo_rate: -1\n", ErrInvalid,
			[]string{`c.yaml:3: node.icmp_echo_rate: -1 is out of range 0..16777216`}},
		{"conntrack too small", "node:\n  interface: eth0\n  conntrack_entries: 1000\n", ErrInvalid,
			[]string{`c.yaml:3: node.conntrack_entries: 1000 is out of range 1024..67108864`}},
		{"conntrack too large", "node:\n  interface: eth0\n  conntrack_entries: 67108865\n", ErrInvalid,
			[]string{`c.yaml:3: node.conntrack_entries: 67108865 is out of range 1024..67108864`}},
		{"conntrack negative", "node:\n  interface: eth0\n  conntrack_entries: -1\n", ErrInvalid,
			[]string{`c.yaml:3: node.conntrack_entries: -1 is out of range 0..4294967295`}},
		{"max_services 0", "node:\n  interface: eth0\n  max_services: 0\n", ErrInvalid,
			[]string{`c.yaml:3: node.max_services: 0 is out of range 1..1048576`}},
		{"max_services absurd", "node:\n  interface: eth0\n  max_services: 4000000000\n", ErrInvalid,
			[]string{`c.yaml:3: node.max_services: 4000000000 is out of range 1..1048576`}},
		{"max_backends 0", "node:\n  interface: eth0\n  max_backends: 0\n", ErrInvalid,
			[]string{`c.yaml:3: node.max_backends: 0 is out of range 1..524287`}},
		{"max_backends beyond the id's bits", "node:\n  interface: eth0\n  max_backends: 524288\n", ErrInvalid,
			[]string{`c.yaml:3: node.max_backends: 524288 is out of range 1..524287`}},
		{"max_services below the services", strings.Replace(head, "address6: fd00::11}", "address6: fd00::11, max_services: 1}", 1) + svc +
			"  - {name: t, vip: 10.200.0.2, port: 80, protocol: tcp, pools: [p]}\n", ErrInvalid,
			[]string{`c.yaml:1: node.max_services: 1 is less than the 2 services of the config: raise it`}},
		{"max_backends below the pairs", strings.Replace(head, "address6: fd00::11}", "address6: fd00::11, max_backends: 5}", 1) + svc +
			"  - {name: t, vip: 10.200.0.2, port: 80, protocol: tcp, pools: [p]}\n" +
			"  - {name: u, vip: 10.200.0.3, port: 80, protocol: tcp, pools: [p]}\n", ErrInvalid,
			[]string{`c.yaml:1: node.max_backends: 5 is less than the 6 (service, backend) pairs of the config`}},
		{"conntrack hex", "node:\n  interface: eth0\n  conntrack_entries: 0x1000\n", ErrInvalid,
			[]string{`c.yaml:3: node.conntrack_entries: must be a decimal integer, not "0x1000"`}},

		// Durations.
		{"duration without unit", "node:\n  interface: eth0\n  timeouts:\n    tcp: 900\n", ErrInvalid,
			[]string{`c.yaml:4: node.timeouts.tcp: "900" is not a duration`}},
		{"duration garbage", "node:\n  interface: eth0\n  timeouts:\n    udp: five minutes\n", ErrInvalid,
			[]string{`c.yaml:4: node.timeouts.udp: "five minutes" is not a duration`}},
		{"duration too short", "node:\n  interface: eth0\n  timeouts:\n    tcp_syn: 500ms\n", ErrInvalid,
			[]string{`c.yaml:4: node.timeouts.tcp_syn: 500ms is out of range 1s..2h`}},
		{"duration too long", "node:\n  interface: eth0\n  timeouts:\n    tcp_fin: 121m\n", ErrInvalid,
			[]string{`c.yaml:4: node.timeouts.tcp_fin: 2h1m is out of range 1s..2h`}},
		{"timeouts not a mapping", "node:\n  interface: eth0\n  timeouts: 5m\n", ErrInvalid,
			[]string{`c.yaml:3: node.timeouts: must be a mapping (tcp, tcp_syn, tcp_fin, udp), not "5m"`}},

		// Enumerations.
		{"bad xdp_mode", "node:\n  interface: eth0\n  xdp_mode: offload\n", ErrInvalid,
			[]string{`c.yaml:3: node.xdp_mode: "offload" is not one of auto, native, generic`}},
		{"bad protocol", head + "services:\n  - {name: s, vip: 10.200.0.1, port: 80, protocol: sctp, pools: [p]}\n",
			ErrInvalid, []string{`c.yaml:6: services[0].protocol: "sctp" is not one of tcp, udp`}},
		{"protocol missing", head + "services:\n  - {name: s, vip: 10.200.0.1, port: 80, pools: [p]}\n",
			ErrRequired, []string{`c.yaml:6: services[0].protocol: required: tcp, udp`}},
		{"bad scheduler", head + "services:\n  - {name: s, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [p], scheduler: wcl}\n",
			ErrInvalid, []string{`c.yaml:6: services[0].scheduler: "wcl" is not one of maglev, maglev-source, rr, wrr, lc, wlc, sed, nq, sh, dh, lblc, lblcr`}},
		{"bad service encap", head + "services:\n  - {name: s, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [p], encap: vxlan}\n",
			ErrInvalid, []string{`c.yaml:6: services[0].encap: "vxlan" is not one of gre, ipip, gue, dr, nat`}},
		{"bad backend encap", head + "  q:\n    backends: [{address: 10.0.1.5, encap: ip6ip6}]\n", ErrInvalid,
			[]string{`c.yaml:6: pools.q.backends[0].encap: "ip6ip6" is not one of gre, ipip, gue, dr, nat`}},
		{"bad backend state", head + "  q:\n    backends: [{address: 10.0.1.5, state: down}]\n", ErrInvalid,
			[]string{`c.yaml:6: pools.q.backends[0].state: "down" is not one of active, drain`}},

		// Numbers.
		{"weight too large", head + "  q:\n    backends: [{address: 10.0.1.5, weight: 65536}]\n", ErrInvalid,
			[]string{`c.yaml:6: pools.q.backends[0].weight: 65536 is out of range 0..65535`}},
		{"weight quoted", head + "  q:\n    backends: [{address: 10.0.1.5, weight: \"2\"}]\n", ErrInvalid,
			[]string{`c.yaml:6: pools.q.backends[0].weight: must be a decimal integer, not "2"`}},
		{"port too large", head + "services:\n  - {name: s, vip: 10.200.0.1, port: 65536, protocol: tcp, pools: [p]}\n",
			ErrInvalid, []string{`c.yaml:6: services[0].port: 65536 is out of range 0..65535`}},
		{"port missing", head + "services:\n  - {name: s, vip: 10.200.0.1, protocol: tcp, pools: [p]}\n",
			ErrRequired, []string{`c.yaml:6: services[0].port: required (0 serves all ports)`}},
		{"port is a list", head + "services:\n  - {name: s, vip: 10.200.0.1, port: [80], protocol: tcp, pools: [p]}\n",
			ErrInvalid, []string{`c.yaml:6: services[0].port: must be an integer, not a list`}},

		// Table size.
		{"table size not prime", head + "services:\n  - name: s\n    vip: 10.200.0.1\n    port: 80\n    protocol: tcp\n    pools: [p]\n    table_size: 65536\n",
			ErrInvalid, []string{`c.yaml:11: services[0].table_size: 65536 is not prime (nearest primes: 65521, 65537)`}},
		{"table size one", head + "services:\n  - {name: s, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [p], table_size: 1}\n",
			ErrInvalid, []string{`c.yaml:6: services[0].table_size: 1 is not prime (nearest primes: 2)`}},
		{"table size too large", head + "services:\n  - {name: s, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [p], table_size: 4194319}\n",
			ErrInvalid, []string{`c.yaml:6: services[0].table_size: 4194319 exceeds the maximum table size 4194304 (largest prime allowed: 4194301)`}},
		{"table size beyond uint32", head + "services:\n  - {name: s, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [p], table_size: 99999999999}\n",
			ErrInvalid, []string{`c.yaml:6: services[0].table_size: 99999999999 is out of range 0..4294967295`}},
		{"table size below backend count", head + "  q:\n    backends: [{address: 10.0.1.1}, {address: 10.0.1.2}, {address: 10.0.1.3}]\n" +
			"services:\n  - {name: s, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [q], table_size: 2}\n",
			ErrInvalid, []string{`c.yaml:8: services[0].table_size: 2 is smaller than the 3 backends of pool "q"`}},

		// Pools and references.
		{"unknown pool in service", head + "services:\n  - {name: s, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [p, q]}\n",
			ErrUnknownPool, []string{`c.yaml:6: services[0].pools[1]: unknown pool "q" (defined: p)`}},
		{"unknown pool in include", head + "  q:\n    include: [p, r]\n", ErrUnknownPool,
			[]string{`c.yaml:6: pools.q.include[1]: unknown pool "r" (defined: p, q)`}},
		{"pools missing", head + "services:\n  - {name: s, vip: 10.200.0.1, port: 80, protocol: tcp}\n",
			ErrRequired, []string{`c.yaml:6: services[0].pools: required`}},
		{"pool with nothing", head + "  q: {}\n", ErrEmptyPool,
			[]string{`c.yaml:5: pools.q: pool has neither backends nor include`}},
		{"pool with empty lists", head + "  q:\n    backends: []\n    include: []\n", ErrEmptyPool,
			[]string{`c.yaml:5: pools.q: pool has neither backends nor include`}},
		{"pool is a list", head + "  q: [10.0.1.1]\n", ErrInvalid,
			[]string{`c.yaml:5: pools.q: must be a mapping (backends, include, health_check), not a list`}},
		{"pool name invalid", head + "  \"a b\":\n    include: [p]\n", ErrInvalid,
			[]string{`c.yaml:5: pools["a b"]: "a b" is not a valid pool name`}},
		{"empty service", head + "  q:\n    backends: []\n" + "services:\n  - {name: s, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [q]}\n",
			ErrEmptyService, []string{
				`c.yaml:5: pools.q: pool has neither backends nor include`,
				`c.yaml:8: services[0].pools: service "s" has no backend: its pools q resolve to none`,
			}},
		{"self cycle", head + "  q:\n    include: [q]\n", ErrPoolCycle,
			[]string{`c.yaml:6: pools.q.include[0]: pool cycle q -> q`}},
		{"two-pool cycle", head + "  a:\n    include: [p, b]\n  b:\n    include: [a]\n", ErrPoolCycle,
			[]string{`c.yaml:8: pools.b.include[0]: pool cycle a -> b -> a`}},
		{"three-pool cycle", head + "  a: {include: [b]}\n  b: {include: [c]}\n  c: {include: [p, a]}\n", ErrPoolCycle,
			[]string{`c.yaml:7: pools.c.include[1]: pool cycle a -> b -> c -> a`}},
		{"conflicting backend", head + "  a:\n    backends: [{address: 10.0.1.1, weight: 3}]\n    include: [p]\n", ErrConflict,
			[]string{`c.yaml:4: pools.p.backends[0]: backend 10.0.1.1 conflicts with pools.a.backends[0] (line 6), both reached from pool "a": weight 1 vs 3`}},
		{"conflicting backend state and encap", head +
			"  a:\n    include: [b, c]\n  b:\n    backends: [{address: 10.0.9.9}]\n  c:\n    backends: [{address: 10.0.9.9, encap: ipip, state: drain}]\n",
			ErrConflict, []string{`c.yaml:10: pools.c.backends[0]: backend 10.0.9.9 conflicts with pools.b.backends[0] (line 8), both reached from pool "a": encap ipip vs unset, state drain vs active`}},

		// Names.
		{"service name missing", head + "services:\n  - {vip: 10.200.0.1, port: 80, protocol: tcp, pools: [p]}\n",
			ErrRequired, []string{`c.yaml:6: services[0].name: required`}},
		{"service name invalid", head + "services:\n  - {name: 'web frontend', vip: 10.200.0.1, port: 80, protocol: tcp, pools: [p]}\n",
			ErrInvalid, []string{`c.yaml:6: services[0].name: "web frontend" is not a valid service name`}},
		{"services not a list", head + "services: {name: s}\n", ErrInvalid,
			[]string{`c.yaml:5: services: must be a list, not a mapping`}},
		{"null value", head + "services:\n  - name:\n    vip: 10.200.0.1\n", ErrInvalid,
			[]string{`c.yaml:6: services[0].name: must be a string, not an empty value`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tc.in), "c.yaml")
			if err == nil {
				t.Fatalf("Parse accepted:\n%s\nas %+v", tc.in, cfg)
			}
			if cfg != nil {
				t.Errorf("Parse returned a Config with an error")
			}
			var list ErrorList
			if !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("Parse error %T %v, want a non-empty ErrorList", err, err)
			}
			if !errors.Is(err, tc.kind) {
				t.Errorf("errors.Is(err, %v) = false", tc.kind)
			}
			if testing.Verbose() && len(list) > 1 {
				t.Logf("all errors:\n%v", err)
			}
			for _, want := range tc.want {
				if !containsError(list, want) {
					t.Errorf("no error contains\n  %s\ngot:\n%v", want, err)
				}
			}
		})
	}
}

// TestAccept covers what must not be rejected by mistake.
func TestAccept(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
	}{
		{"all-ports and port VIP on one address", head + "services:\n" +
			"  - {name: all, vip: 10.200.0.1, port: 0, protocol: tcp, pools: [p]}\n" +
			"  - {name: web, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [p]}\n"},
		{"same VIP and port, tcp and udp", head + "services:\n" +
			"  - {name: dns-tcp, vip: fd00::53, port: 53, protocol: tcp, pools: [p]}\n" +
			"  - {name: dns-udp, vip: fd00::53, port: 53, protocol: udp, pools: [p]}\n"},
		{"same backend in two pools with different settings", head +
			"  q:\n    backends: [{address: 10.0.1.1, weight: 7, state: drain}]\n" +
			"services:\n  - {name: s, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [p, q]}\n"},
		{"diamond include with identical backend", head +
			"  a: {include: [b, c]}\n  b: {include: [p]}\n  c: {include: [p]}\n" + svc},
		{"unreferenced pool", head + "  spare:\n    backends: [{address: 10.9.9.9}]\n" + svc},
		{"no services", "node: {interface: eth0}\n"},
		{"explicit document markers", "---\n" + head + svc + "...\n"},
		{"weight zero and drained", head + "  q:\n    backends: [{address: 10.0.1.7, weight: 0, state: drain}]\n" + svc},
		{"smallest prime table", head + "services:\n  - {name: s, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [p], table_size: 2}\n"},
		{"largest prime table", head + "services:\n  - {name: s, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [p], table_size: 4194301}\n"},
		{"names that look like other types", "node: {name: \"null\", interface: \"~\", address: 10.0.0.11, address6: fd00::11}\n" +
			head[strings.Index(head, "pools:"):] + "  \"true\": {include: [p]}\n  \"0x10\": {include: [p]}\n" +
			"services:\n  - {name: 123, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [\"true\", \"0x10\"]}\n" +
			"  - {name: 1e3, vip: 10.200.0.1, port: 81, protocol: tcp, pools: [p]}\n"},
		{"timeout bounds", "node:\n  interface: eth0\n  timeouts: {tcp: 2h, tcp_syn: 1s, tcp_fin: 1h59m60s, udp: 7200s}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.in), "c.yaml")
			if err != nil {
				t.Fatalf("Parse rejected:\n%s\nwith:\n%v", tc.in, err)
			}
			roundTrip(t, c)
		})
	}
}
