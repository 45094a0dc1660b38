package config

import (
	"strings"
	"testing"
)

// TestStatusPage: node.status_page is off by default, read, written back,
// and refused with the metrics listener off (the page has nowhere to be
// served) or with a value other than true/false.
func TestStatusPage(t *testing.T) {
	c, err := Parse([]byte("node: {name: n1, interface: eth0}\n"), "t.yaml")
	if err != nil || c.Node.StatusPage {
		t.Fatalf("default: status_page %v, err %v; want off", c.Node.StatusPage, err)
	}
	c, err = Parse([]byte("node: {name: n1, interface: eth0, status_page: true}\n"), "t.yaml")
	if err != nil || !c.Node.StatusPage {
		t.Fatalf("status_page: true read as %v, err %v", c.Node.StatusPage, err)
	}
	roundTrip(t, c)
	for _, tc := range []struct{ yaml, want string }{
		{"status_page: true, metrics_addr: off", "t.yaml:1: node.status_page: the status page is served by the metrics listener"},
		{"status_page: yes", `t.yaml:1:`},
		{"status_page: \"true\"", `node.status_page: must be true or false`},
	} {
		_, err := Parse([]byte("node: {name: n1, interface: eth0, "+tc.yaml+"}\n"), "t.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.yaml, err, tc.want)
		}
	}
}
