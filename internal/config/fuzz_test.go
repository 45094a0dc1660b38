package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzParse feeds arbitrary bytes to Parse. Parse must not panic; when it
// accepts the input, the Config must survive Marshal and Parse unchanged and
// Desired must not panic; when it rejects it, the error must be a non-empty
// ErrorList of well-formed errors. Without -fuzz it runs the seed corpus: the
// valid examples and testdata files.
func FuzzParse(f *testing.F) {
	var seeds []string
	for _, pattern := range []string{"testdata/*.yaml", "../../examples/*.yaml"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, m...)
	}
	if len(seeds) == 0 {
		f.Fatal("no seed files")
	}
	for _, path := range seeds {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(nested))
	f.Add([]byte(head + svc))
	f.Add([]byte(head + "  a: {include: [b]}\n  b: {include: [a]}\n"))
	f.Add([]byte(""))
	f.Add([]byte(checksConfig))
	f.Add([]byte(head + "  a: {health_check: c1, include: [p]}\n  b: {include: [a, p]}\nhealth_checks:\n  c1: {type: tcp, port: 80}\n"))
	f.Add([]byte(head + "health_checks:\n  u: {type: udp, port: 53, payload: !!binary /wABAg==, expect: \"\\t\\0\"}\n"))
	f.Add([]byte(head + "bgp: {asn: 65001, listen_port: 0, peers: [{address: \"fe80::1%eth0\", asn: 65000, hold_time: 0s}]}\n"))

	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "fuzz.yaml")
		if err != nil {
			if c != nil {
				t.Fatal("Parse returned both a Config and an error")
			}
			var list ErrorList
			if !errors.As(err, &list) || len(list) == 0 || len(list) > MaxErrors+1 {
				t.Fatalf("Parse error is not a well-formed ErrorList: %T %v", err, err)
			}
			for _, e := range list {
				if e.Msg == "" || e.Source != "fuzz.yaml" {
					t.Fatalf("malformed error %+v", e)
				}
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a Config that Validate rejects: %v", err)
		}
		out, err := c.Marshal()
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		again, err := Parse(out, "marshalled")
		if err != nil {
			t.Fatalf("Parse(Marshal(c)): %v\n%s", err, out)
		}
		if !reflect.DeepEqual(again, c) {
			t.Fatalf("Parse(Marshal(c)) != c\n got %+v\nwant %+v", again, c)
		}
		d := c.Desired()
		down := func(b Backend) bool { return b.Addr.Is6() }
		for i := range d.Services {
			d.Services[i].ActiveBackends()
			d.Services[i].UsableBackends(down)
		}
		d.AnnouncedVIPs(down)
		for _, tg := range d.HealthTargets() {
			if _, ok := d.HealthChecks[tg.Check.Name]; !ok {
				t.Fatalf("target %v has a check Desired lacks", tg.Key())
			}
		}
	})
}
