package config

import (
	"errors"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func mustMAC(t *testing.T, s string) net.HardwareAddr {
	t.Helper()
	m, err := net.ParseMAC(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestLoadFull(t *testing.T) {
	got, err := Load("testdata/full.yaml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	a := netip.MustParseAddr
	want := &Config{
		Node: Node{
			Name:                 "lb-test.1",
			Interface:            "enp1s0f0",
			Address:              a("192.0.2.11"),
			Address6:             a("2001:db8::11"),
			GatewayMAC:           mustMAC(t, "02:aa:bb:00:00:01"),
			XDPMode:              XDPModeNative,
			ConntrackEntries:     2048,
			MaxServices:          DefaultMaxServices,
			MaxBackends:          DefaultMaxBackends,
			ICMPEchoRate:         20,
			ICMPTooBigRate:       DefaultICMPTooBigRate,
			FragmentTableEntries: DefaultFragmentTableEntries,
			TraceRate:            5,
			GUEPort:              DefaultGUEPort,
			Timeouts: Timeouts{
				TCP: time.Hour, TCPSyn: 10 * time.Second, TCPFin: 90 * time.Second, UDP: 30 * time.Second,
			},
			Defence: Defence{SecureTCP: DefaultSecureTCPAt, DropEntry: DefaultDropEntryAt, DropPacket: DefaultDropPacketAt,
				Hysteresis: DefaultDefenceHysteresis, SecureTCPSyn: DefaultSecureTCPSynTimeout,
				SecureTCPFin: DefaultSecureTCPFinTimeout, DropEntryIdle: DefaultDropEntryIdle},
		},
		Pools: []Pool{
			{
				Name: "primary",
				Backends: []Backend{
					{Addr: a("198.51.100.1"), Weight: 10},
					{Addr: a("198.51.100.2"), Weight: 0, Encap: EncapGRE, Drain: true},
					{Addr: a("2001:db8:1::1"), Weight: 65535, Encap: EncapIPIP},
				},
				Include: []string{"shared"},
			},
			{Name: "shared", Backends: []Backend{{Addr: a("198.51.100.9"), Weight: 1}}},
			{Name: "backup", Include: []string{"shared"}},
		},
		Services: []Service{
			{
				Name: "web", VIP: a("203.0.113.1"), Port: 443, Proto: ProtoTCP,
				Pools: []string{"primary", "backup"}, Scheduler: SchedulerMaglev,
				TableSize: 251, Encap: EncapIPIP,
			},
			{
				Name: "all-udp", VIP: a("2001:db8:ffff::1"), Port: 0, Proto: ProtoUDP,
				Pools: []string{"backup"}, Scheduler: SchedulerMaglev,
				TableSize: 4194301, Encap: EncapGRE,
			},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Load(full.yaml):\n got %+v\nwant %+v", got, want)
	}
	roundTrip(t, got)
}

// roundTrip checks that Marshal writes c so that Parse reads it back equal.
func roundTrip(t *testing.T, c *Config) {
	t.Helper()
	data, err := c.Marshal()
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	again, err := Parse(data, "marshalled")
	if err != nil {
		t.Fatalf("Parse(Marshal(c)): %v\n%s", err, data)
	}
	if !reflect.DeepEqual(again, c) {
		t.Fatalf("Parse(Marshal(c)) != c\n got %+v\nwant %+v\n%s", again, c, data)
	}
}

// TestExamples keeps the shipped examples valid.
func TestExamples(t *testing.T) {
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no examples found in ../../examples")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			c, err := Load(f)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			roundTrip(t, c)
		})
	}
}

func TestDefaults(t *testing.T) {
	c, err := Load("testdata/minimal.yaml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	host, err := os.Hostname()
	if err != nil || !validName(host) {
		t.Skipf("host name %q (%v) cannot be a default node name", host, err)
	}
	n := c.Node
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"node.name", n.Name, host},
		{"node.address6", n.Address6, netip.Addr{}},
		{"node.gateway_mac", n.GatewayMAC, net.HardwareAddr(nil)},
		{"node.xdp_mode", n.XDPMode, XDPModeAuto},
		{"node.conntrack_entries", n.ConntrackEntries, uint32(1048576)},
		{"node.icmp_echo_rate", n.ICMPEchoRate, uint32(DefaultICMPEchoRate)},
		{"node.icmp_too_big_rate", n.ICMPTooBigRate, uint32(DefaultICMPTooBigRate)},
		{"node.trace_rate", n.TraceRate, uint32(DefaultTraceRate)},
		{"node.timeouts.tcp", n.Timeouts.TCP, 15 * time.Minute},
		{"node.timeouts.tcp_syn", n.Timeouts.TCPSyn, 60 * time.Second},
		{"node.timeouts.tcp_fin", n.Timeouts.TCPFin, 2 * time.Minute},
		{"node.timeouts.udp", n.Timeouts.UDP, 5 * time.Minute},
		{"backend.weight", c.Pools[0].Backends[0].Weight, uint32(1)},
		{"backend.encap", c.Pools[0].Backends[0].Encap, EncapUnset},
		{"backend.state", c.Pools[0].Backends[0].Drain, false},
		{"service.scheduler", c.Services[0].Scheduler, SchedulerMaglev},
		{"service.table_size", c.Services[0].TableSize, uint32(65537)},
		{"service.encap", c.Services[0].Encap, EncapGRE},
	} {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	roundTrip(t, c)
}

func TestPartialTimeoutsKeepDefaults(t *testing.T) {
	c, err := Parse([]byte("node: {interface: eth0, timeouts: {udp: 45s}}\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := Timeouts{TCP: DefaultTCPTimeout, TCPSyn: DefaultTCPSynTimeout, TCPFin: DefaultTCPFinTimeout, UDP: 45 * time.Second}
	if c.Node.Timeouts != want {
		t.Fatalf("timeouts = %+v, want %+v", c.Node.Timeouts, want)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "absent.yaml"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load(absent) = %v, want an error wrapping fs.ErrNotExist", err)
	}
}

func TestLoadTooLarge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, []byte(strings.Repeat("#", MaxFileSize+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Load(big) = %v, want ErrTooLarge", err)
	}
}

func TestValidateHandBuilt(t *testing.T) {
	good, err := Load("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := good.Validate(); err != nil {
		t.Fatalf("Validate(full) = %v, want nil", err)
	}

	var zero Config
	zero.Services = []Service{{Pools: []string{"nope"}}}
	err = zero.Validate()
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("Validate(zero) = %v, want an ErrorList", err)
	}
	for _, want := range []string{
		"node.name: required",
		"node.interface: required",
		"node.conntrack_entries: 0 is out of range",
		"node.timeouts.tcp: 0s is out of range 1s..2h",
		"services[0].name: required",
		"services[0].vip: required",
		"services[0].protocol: required",
		"services[0].scheduler: invalid(0) is not one of maglev",
		"services[0].table_size: 0 is not prime",
		"services[0].method: unset is not one of gre, ipip, gue, dr, nat",
		`services[0].pools[0]: unknown pool "nope" (no pools are defined)`,
	} {
		if !containsError(list, want) {
			t.Errorf("Validate(zero) lacks %q; got:\n%v", want, err)
		}
	}
	for _, e := range list {
		if e.Line != 0 || e.Source != "" {
			t.Errorf("hand-built config error has a position: %+v", e)
		}
	}
}

func TestDuplicatePoolNameHandBuilt(t *testing.T) {
	c, err := Load("testdata/minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.Pools = append(c.Pools, c.Pools[0])
	if err := c.Validate(); !errors.Is(err, ErrDuplicate) || !strings.Contains(err.Error(), `pools.p: duplicate pool name "p"`) {
		t.Fatalf("Validate = %v, want a duplicate pool name", err)
	}
}

func containsError(list ErrorList, want string) bool {
	for _, e := range list {
		if strings.Contains(e.Error(), want) {
			return true
		}
	}
	return false
}

func TestEnumStrings(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{ProtoTCP.String(), "tcp"},
		{ProtoUDP.String(), "udp"},
		{Proto(1).String(), "invalid(1)"},
		{EncapUnset.String(), "unset"},
		{EncapGRE.String(), "gre"},
		{EncapIPIP.String(), "ipip"},
		{XDPModeAuto.String(), "auto"},
		{XDPModeNative.String(), "native"},
		{XDPModeGeneric.String(), "generic"},
		{SchedulerMaglev.String(), "maglev"},
	} {
		if tc.got != tc.want {
			t.Errorf("String() = %q, want %q", tc.got, tc.want)
		}
	}
	if ProtoTCP != 6 || ProtoUDP != 17 {
		t.Errorf("protocol numbers changed: tcp=%d udp=%d", ProtoTCP, ProtoUDP)
	}
}

func TestErrorFormat(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  Error
		want string
	}{
		{"full", Error{Source: "c.yaml", Line: 14, Column: 17, Field: "services[0].table_size", Msg: "65536 is not prime"},
			"c.yaml:14: services[0].table_size: 65536 is not prime"},
		{"no line", Error{Source: "c.yaml", Msg: "file holds no YAML document"}, "c.yaml: file holds no YAML document"},
		{"no source", Error{Line: 3, Field: "node", Msg: "m"}, "line 3: node: m"},
		{"field only", Error{Field: "node.name", Msg: "required"}, "node.name: required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.want {
				t.Errorf("Error() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestErrorListCap(t *testing.T) {
	var b strings.Builder
	b.WriteString("node: {interface: eth0}\nservices:\n")
	const n = MaxErrors + 15
	for i := 0; i < n; i++ {
		b.WriteString("  - {bogus: 1, port: 1}\n")
	}
	_, err := Parse([]byte(b.String()), "c.yaml")
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("Parse = %v, want an ErrorList", err)
	}
	if len(list) != MaxErrors+1 {
		t.Fatalf("len(list) = %d, want %d", len(list), MaxErrors+1)
	}
	last := list[len(list)-1].Error()
	if !strings.HasPrefix(last, "c.yaml: too many errors: ") {
		t.Fatalf("last error = %q, want a too-many-errors note", last)
	}
	for i := 1; i < MaxErrors; i++ {
		if list[i].Line < list[i-1].Line {
			t.Fatalf("errors out of file order at %d: %v", i, err)
		}
	}
}

func TestErrorsIsAndAs(t *testing.T) {
	_, err := Parse([]byte(`node: {interface: eth0, address: 10.0.0.1}
pools:
  a: {include: [b]}
  b: {include: [a], backends: [{address: 10.0.0.2}]}
services:
  - {name: s, vip: 10.0.0.100, port: 80, protocol: tcp, pools: [a, zz]}
`), "c.yaml")
	for _, kind := range []error{ErrPoolCycle, ErrUnknownPool} {
		if !errors.Is(err, kind) {
			t.Errorf("errors.Is(err, %v) = false; err:\n%v", kind, err)
		}
	}
	if errors.Is(err, ErrDuplicate) {
		t.Errorf("errors.Is(err, ErrDuplicate) = true; err:\n%v", err)
	}
	var e *Error
	if !errors.As(err, &e) || e.Source != "c.yaml" || e.Line == 0 || e.Field == "" {
		t.Errorf("errors.As(*Error) = %+v", e)
	}
}

// TestICMPEchoRate: node.icmp_echo_rate defaults to 100, 0 (never answer)
// is kept, and both survive Marshal.
func TestICMPEchoRate(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want uint32
	}{
		{"node: {name: n1, interface: eth0}\n", DefaultICMPEchoRate},
		{"node: {name: n1, interface: eth0, icmp_echo_rate: 0}\n", 0},
		{"node: {name: n1, interface: eth0, icmp_echo_rate: 5000}\n", 5000},
	} {
		c, err := Parse([]byte(tc.yaml), "t.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if c.Node.ICMPEchoRate != tc.want {
			t.Fatalf("%q: icmp_echo_rate %d, want %d", tc.yaml, c.Node.ICMPEchoRate, tc.want)
		}
		roundTrip(t, c)
	}
	c := &Config{}
	*c = Config{}
	c.Node.ICMPEchoRate = MaxICMPEchoRate + 1
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "node.icmp_echo_rate") {
		t.Fatalf("hand-built rate over the maximum: %v", err)
	}
}

// TestFragmentSettings: node.fragment_pool, node.fragment_table_entries and
// a service's fragments flag are read, defaulted and written back.
func TestFragmentSettings(t *testing.T) {
	in := `node:
  name: lb1
  interface: eth0
  address: 10.0.0.11
  address6: fd00::11
  fragment_pool: [10.0.0.12, 10.0.0.11, fd00::13]
  fragment_table_entries: 4096
pools:
  p: {backends: [{address: 10.0.1.1}]}
services:
  - {name: s, vip: 10.200.0.1, port: 53, protocol: udp, pools: [p], fragments: true}
  - {name: t, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [p]}
`
	c, err := Parse([]byte(in), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Addr{netip.MustParseAddr("10.0.0.12"), netip.MustParseAddr("10.0.0.11"), netip.MustParseAddr("fd00::13")}
	if !slices.Equal(c.Node.FragmentPool, want) || c.Node.FragmentTableEntries != 4096 {
		t.Fatalf("node %+v", c.Node)
	}
	if !c.Services[0].Fragments || c.Services[1].Fragments {
		t.Fatalf("fragments flags %v %v, want true false", c.Services[0].Fragments, c.Services[1].Fragments)
	}
	out, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	again, err := Parse(out, "again.yaml")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !reflect.DeepEqual(again, c) {
		t.Fatalf("round trip changed the config\n%s", out)
	}
	d, err := Parse([]byte("node: {name: n1, interface: eth0}\n"), "d.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if d.Node.FragmentPool != nil || d.Node.FragmentTableEntries != DefaultFragmentTableEntries {
		t.Fatalf("defaults %+v", d.Node)
	}
}

// TestFloodRates: node.flood_syn_rate and node.flood_new_flow_rate are
// read (absent: 0), bounded and written back.
func TestFloodRates(t *testing.T) {
	for _, tc := range []struct {
		yaml     string
		syn, new uint32
	}{
		{"node: {name: n1, interface: eth0}\n", 0, 0},
		{"node: {name: n1, interface: eth0, flood_syn_rate: 1000}\n", 1000, 0},
		{"node: {name: n1, interface: eth0, flood_syn_rate: 1000, flood_new_flow_rate: 5000}\n", 1000, 5000},
	} {
		c, err := Parse([]byte(tc.yaml), "t.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if c.Node.FloodSynRate != tc.syn || c.Node.FloodNewFlowRate != tc.new {
			t.Fatalf("%q: rates %d, %d; want %d, %d", tc.yaml, c.Node.FloodSynRate, c.Node.FloodNewFlowRate, tc.syn, tc.new)
		}
		roundTrip(t, c)
	}
	_, err := Parse([]byte("node: {name: n1, interface: eth0, flood_new_flow_rate: 2000000000}\n"), "t.yaml")
	if err == nil || !strings.Contains(err.Error(), "node.flood_new_flow_rate") {
		t.Fatalf("rate over the maximum: %v", err)
	}
	c := &Config{}
	c.Node.FloodNewFlowRate = MaxFloodSynRate + 1
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "node.flood_new_flow_rate") {
		t.Fatalf("hand-built rate over the maximum: %v", err)
	}
}
