package ctl

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/api"
)

// TestStatusExternal: with bgp.mode external, status says where the VIP
// routes are kept and which are there, none, or why they cannot be read.
func TestStatusExternal(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		ext  api.ExternalRoutes
		want string
	}{
		{api.ExternalRoutes{Where: "table 100", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.100/32"), netip.MustParsePrefix("2001:db8::100/128")}},
			"bgp         external: 2 VIP routes in table 100 for the routing daemon: 10.0.0.100/32 2001:db8::100/128\n"},
		{api.ExternalRoutes{Where: "dummy interface xlbvips"}, "bgp         external: no VIP route in dummy interface xlbvips (the routing daemon announces nothing)\n"},
		{api.ExternalRoutes{Where: "table 100", Err: errors.New("permission denied")}, "bgp         external: routes in table 100 unreadable: permission denied\n"},
	} {
		e.fake.Lock()
		e.fake.Info.BGP, e.fake.Info.External = nil, &tc.ext
		e.fake.Unlock()
		if out := e.ok("status"); !strings.Contains(out, tc.want) {
			t.Errorf("status lacks %q:\n%s", tc.want, out)
		}
	}
	if out := e.ok("-o", "json", "status"); !strings.Contains(out, `"external_routes": {`) {
		t.Errorf("status -o json has no external_routes:\n%s", out)
	}
}
