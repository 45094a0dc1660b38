package config

import (
	"net"
	"path/filepath"
	"strconv"
)

// MaxSocketPath is the longest unix socket path (sun_path less its NUL).
const MaxSocketPath = 107

// MetricsOff is node.metrics_addr's value that disables the listener.
const MetricsOff = "off"

// validateEndpoints checks node.api_socket and node.metrics_addr, the
// per-instance endpoints other than the pin directory.
func validateEndpoints(n *Node, c *collector) {
	if s := n.APISocket; s != "" {
		switch {
		case !filepath.IsAbs(s):
			c.errf(join(kNode, kAPISocket), ErrInvalid, "%q is not an absolute path (absent: /run/xlb/<node.name>.sock)", s)
		case len(s) > MaxSocketPath:
			c.errf(join(kNode, kAPISocket), ErrInvalid, "%q is %d bytes; a unix socket path has at most %d", s, len(s), MaxSocketPath)
		}
	}
	if a := n.MetricsAddr; a != "" && a != MetricsOff {
		host, port, err := net.SplitHostPort(a)
		p, perr := strconv.ParseUint(port, 10, 16)
		switch {
		case err != nil:
			c.errf(join(kNode, kMetricsAddr), ErrInvalid, "%q is not HOST:PORT (%v); \"off\" disables the metrics", a, err)
		case perr != nil || p == 0:
			c.errf(join(kNode, kMetricsAddr), ErrInvalid, "%q: port %q is not 1..65535", a, port)
		case host != "" && net.ParseIP(host) == nil:
			c.errf(join(kNode, kMetricsAddr), ErrInvalid, "%q: host %q is not an IP address (empty: every address)", a, host)
		}
	}
	if n.StatusPage && n.MetricsAddr == MetricsOff {
		c.errf(join(kNode, kStatusPage), ErrInvalid, "the status page is served by the metrics listener, which node.metrics_addr: off disables: give node.metrics_addr an address, or drop status_page")
	}
}
