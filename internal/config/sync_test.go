package config

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func syncDoc(sync string) []byte {
	return []byte("node:\n  name: n1\n  interface: eth0\n  address: 10.0.0.11\n  sync:\n" + sync)
}

func TestSyncConfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "key")
	os.WriteFile(good, []byte(strings.Repeat("ab", 32)+"\n"), 0o600)
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte(strings.Repeat("ab", 16)), 0o600)
	nothex := filepath.Join(dir, "nothex")
	os.WriteFile(nothex, []byte(strings.Repeat("zz", 32)), 0o600)

	cfg, err := Parse(syncDoc("    listen: 10.0.0.11:7946\n    peers: [\"10.0.0.12:7946\", \"[fd00::13]:7946\"]\n    key_file: "+good+"\n"), "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Node.Sync
	if s == nil || s.Listen != netip.MustParseAddrPort("10.0.0.11:7946") || len(s.Peers) != 2 ||
		s.Peers[1] != netip.MustParseAddrPort("[fd00::13]:7946") || len(s.Key) != 32 {
		t.Fatalf("node.sync = %+v", s)
	}
	again, err := cfg.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if c2, err := Parse(again, "again"); err != nil || c2.Node.Sync.KeyFile != good || len(c2.Node.Sync.Peers) != 2 {
		t.Fatalf("round trip: %v %+v", err, c2)
	}
	for _, c := range []struct{ sync, want string }{
		{"    listen: 10.0.0.11:7946\n", "x.yaml:6: node.sync.key_file: required"},
		{"    listen: 10.0.0.11\n    key_file: " + good + "\n", "x.yaml:6: node.sync.listen: \"10.0.0.11\" is not ADDR:PORT"},
		{"    listen: 10.0.0.11:7946\n    key_file: " + short + "\n", "holds 16 bytes, at least 32"},
		{"    listen: 10.0.0.11:7946\n    key_file: " + nothex + "\n", "is not hex"},
		{"    listen: 10.0.0.11:7946\n    key_file: /nonexistent/key\n", "openssl rand -hex 32 > /nonexistent/key"},
		{"    listen: 10.0.0.11:7946\n    peers: [\"10.0.0.12\"]\n    key_file: " + good + "\n", "node.sync.peers[0]"},
		{"    listen: 10.0.0.11:7946\n    key_file: " + good + "\n    port: 3\n", "unknown field \"port\""},
	} {
		_, err := Parse(syncDoc(c.sync), "x.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want it to say %q", c.sync, err, c.want)
		}
	}
}
