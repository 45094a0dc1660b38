package config

import (
	"strings"
	"testing"
)

// TestEndpoints: node.api_socket and node.metrics_addr are read, absent by
// default (xlbd derives them), written back, and checked.
func TestEndpoints(t *testing.T) {
	for _, tc := range []struct {
		yaml            string
		socket, metrics string
	}{
		{"node: {name: n1, interface: eth0}\n", "", ""},
		{"node: {name: n1, interface: eth0, api_socket: /run/xlb/a.sock, metrics_addr: \"127.0.0.1:9470\"}\n", "/run/xlb/a.sock", "127.0.0.1:9470"},
		{"node: {name: n1, interface: eth0, metrics_addr: off}\n", "", "off"},
		{"node: {name: n1, interface: eth0, metrics_addr: \"[::1]:9470\"}\n", "", "[::1]:9470"},
		{"node: {name: n1, interface: eth0, metrics_addr: \":9470\"}\n", "", ":9470"},
	} {
		c, err := Parse([]byte(tc.yaml), "t.yaml")
		if err != nil {
			t.Fatalf("%q: %v", tc.yaml, err)
		}
		if c.Node.APISocket != tc.socket || c.Node.MetricsAddr != tc.metrics {
			t.Fatalf("%q: api_socket %q metrics_addr %q, want %q %q", tc.yaml, c.Node.APISocket, c.Node.MetricsAddr, tc.socket, tc.metrics)
		}
		roundTrip(t, c)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"api_socket: run/x.sock", `node.api_socket: "run/x.sock" is not an absolute path`},
		{"api_socket: /" + strings.Repeat("a", 110), "a unix socket path has at most 107"},
		{"metrics_addr: localhost", `node.metrics_addr: "localhost" is not HOST:PORT`},
		{"metrics_addr: \"127.0.0.1:0\"", `port "0" is not 1..65535`},
		{"metrics_addr: \"example.org:9469\"", `host "example.org" is not an IP address`},
	} {
		_, err := Parse([]byte("node: {name: n1, interface: eth0, "+tc.yaml+"}\n"), "t.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: error %v, want %q", tc.yaml, err, tc.want)
		}
	}
}
