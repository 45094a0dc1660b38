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
		for i := range d.Services {
			d.Services[i].ActiveBackends()
		}
	})
}
