package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// The refusals of scheduler, source_netmask and persistence: each names
// the file, the line and the field.
func TestRejectSched(t *testing.T) {
	line := func(extra string) string {
		return head + "services:\n  - {name: s, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [p], " + extra + "}\n"
	}
	udp := func(extra string) string {
		return head + "services:\n  - {name: s, vip: 10.200.0.1, port: 53, protocol: udp, pools: [p], " + extra + "}\n"
	}
	for _, tc := range []struct {
		name, in string
		kind     error
		want     string
	}{
		{"unknown scheduler", line("scheduler: wcl"), ErrInvalid,
			`c.yaml:6: services[0].scheduler: "wcl" is not one of maglev, maglev-source, rr, wrr, lc, wlc, sed, nq, sh, dh, lblc, lblcr`},
		{"source netmask too long", line("scheduler: sh, source_netmask: 33"), ErrInvalid,
			`c.yaml:6: services[0].source_netmask: 33 is out of range 0..32`},
		{"source netmask zero", line("scheduler: sh, source_netmask: 0"), ErrInvalid,
			`c.yaml:6: services[0].source_netmask: 0 is out of range 1..32`},
		{"source netmask6 too long", line("scheduler: maglev-source, source_netmask6: 129"), ErrInvalid,
			`c.yaml:6: services[0].source_netmask6: 129 is out of range 0..128`},
		{"source netmask unused", line("scheduler: rr, source_netmask: 24"), ErrInvalid,
			`c.yaml:6: services[0].source_netmask: only maglev-source and sh hash the source address; scheduler rr does not use it`},
		{"persistence netmask too long", line("persistence: {timeout: 60s, netmask: 40}"), ErrInvalid,
			`c.yaml:6: services[0].persistence.netmask: 40 is out of range 0..32`},
		{"persistence netmask6 zero", line("persistence: {netmask6: 0}"), ErrInvalid,
			`c.yaml:6: services[0].persistence.netmask6: 0 is out of range 1..128`},
		{"persistence on UDP without timeout", udp("persistence: {netmask: 24}"), ErrRequired,
			`c.yaml:6: services[0].persistence: persistence of a UDP service needs a timeout`},
		{"persistence timeout too long", line("persistence: {timeout: 5h}"), ErrInvalid,
			`c.yaml:6: services[0].persistence.timeout: 5h0m0s is out of range 1s..4h0m0s`},
		{"persistence unknown field", line("persistence: {timeout: 5s, mask: 24}"), ErrUnknownField,
			`c.yaml:6: services[0].persistence.mask: unknown field "mask"`},
		{"group disagrees on scheduler", head + "services:\n" +
			"  - {name: http, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [p], scheduler: rr, persistence: {group: shop}}\n" +
			"  - {name: https, vip: 10.200.0.1, port: 443, protocol: tcp, pools: [p], scheduler: wrr, persistence: {group: shop}}\n",
			ErrInvalid, `c.yaml:7: services[1].scheduler: wrr differs from rr of service http (services[0].scheduler, line 6) in persistence group shop`},
		{"group disagrees on timeout", head + "services:\n" +
			"  - {name: http, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [p], persistence: {group: shop}}\n" +
			"  - {name: https, vip: 10.200.0.1, port: 443, protocol: tcp, pools: [p], persistence: {group: shop, timeout: 10s}}\n",
			ErrInvalid, `c.yaml:7: services[1].persistence.timeout: 10s differs from 5m0s of service http`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in), "c.yaml")
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.in)
			}
			if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got\n%v\nwant (%v) %s", err, tc.kind, tc.want)
			}
		})
	}
}

func TestAcceptSched(t *testing.T) {
	in := head + "services:\n" +
		"  - name: web\n    vip: 10.200.0.1\n    port: 0\n    protocol: tcp\n    pools: [p]\n    scheduler: sh\n" +
		"    source_netmask: 24\n    source_netmask6: 64\n" +
		persistenceServices
	c, err := Parse([]byte(in), "c.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := c.Services
	if s[0].Scheduler != SchedulerSH || s[0].SourceNetmask != 24 || s[0].SourceNetmask6 != 64 || s[0].Persistence != nil {
		t.Errorf("web: %+v", s[0])
	}
	if d := c.Desired(); d.Services[0].SourceNetmask != 24 || d.Services[0].Persistence.Timeout != 0 ||
		Prefix(d.Services[0].SourceNetmask, 32) != 24 || Prefix(0, 32) != 32 {
		t.Errorf("desired: %+v", d.Services[0])
	}

	if p := s[1].Persistence; p == nil || *p != (Persistence{Timeout: DefaultPersistenceTimeout, Netmask: 24, Group: "shop"}) {
		t.Errorf("http persistence: %+v", p)
	}
	if p := s[3].Persistence; p == nil || *p != (Persistence{Timeout: 30 * time.Second, Netmask6: 48}) {
		t.Errorf("dns persistence: %+v", p)
	}
	if d := c.Desired(); d.Services[1].Persistence.Group != "shop" {
		t.Errorf("desired: %+v", d.Services[1])
	}
	roundTrip(t, c)
}

// persistenceServices are services 1..3 of TestAcceptSched, lines 6..8
// after head and "services:".
const persistenceServices = "  - {name: http, vip: 10.200.0.2, port: 80, protocol: tcp, pools: [p], scheduler: wrr, persistence: {netmask: 24, group: shop}}\n" +
	"  - {name: https, vip: 10.200.0.2, port: 443, protocol: tcp, pools: [p], scheduler: wrr, persistence: {netmask: 24, group: shop}}\n" +
	"  - {name: dns, vip: 10.200.0.3, port: 53, protocol: udp, pools: [p], scheduler: rr, persistence: {timeout: 30s, netmask6: 48}}\n"

func TestAcceptSchedulers(t *testing.T) {
	for _, tc := range []struct {
		name string
		want Scheduler
	}{
		{"maglev", SchedulerMaglev}, {"maglev-source", SchedulerMaglevSource}, {"rr", SchedulerRR},
		{"wrr", SchedulerWRR}, {"lc", SchedulerLC}, {"wlc", SchedulerWLC}, {"sed", SchedulerSED},
		{"nq", SchedulerNQ}, {"sh", SchedulerSH}, {"dh", SchedulerDH}, {"lblc", SchedulerLBLC},
		{"lblcr", SchedulerLBLCR},
	} {
		txt := strings.Replace(svc, "pools: [p]}", "pools: [p], scheduler: "+tc.name+"}", 1)
		c, err := Parse([]byte(head+txt), "c.yaml")
		if err != nil {
			t.Errorf("scheduler %s: %v", tc.name, err)
			continue
		}
		if got := c.Services[0].Scheduler; got != tc.want || got.String() != tc.name {
			t.Errorf("scheduler %s: decoded %d (%s), want %d", tc.name, got, got, tc.want)
		}
	}
}
