package controller

import (
	"errors"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/config"
)

// TestReloadOfCapacityNeedsRestart: a reload that asks for other map
// sizes (node.max_services, node.max_backends) is refused before
// anything is planned or applied, naming the key and both values; the
// same sizes pass.
func TestReloadOfCapacityNeedsRestart(t *testing.T) {
	old := config.Node{Name: "n", Interface: "eth0", MaxServices: 20000, MaxBackends: 300000, ConntrackEntries: 65536}
	if err := immutable(old, old); err != nil {
		t.Fatalf("same sizes: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*config.Node)
		want string
	}{
		{"services", func(n *config.Node) { n.MaxServices = 40000 }, "node.max_services 20000 -> 40000"},
		{"backends", func(n *config.Node) { n.MaxBackends = 100 }, "node.max_backends 300000 -> 100"},
		// lowering the connection table's size, however full it is
		{"conntrack", func(n *config.Node) { n.ConntrackEntries = 4096 }, "node.conntrack_entries 65536 -> 4096"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := old
			tc.edit(&n)
			err := immutable(old, n)
			if !errors.Is(err, ErrRestartRequired) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("reload: %v, want ErrRestartRequired naming %q", err, tc.want)
			}
		})
	}
}
