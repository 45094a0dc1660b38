package lab

import (
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/config"
)

// TestExternalConfigs: with a kernel table (or a dummy interface) the
// node's BIRD learns the VIP routes xlbd keeps instead of static ones, and
// xlbd's config says bgp.mode external and parses.
func TestExternalConfigs(t *testing.T) {
	l := fakeLab(1, 1)
	for _, tc := range []struct {
		bird NodeBIRDOptions
		xlbd XLBDOptions
		want []string
	}{
		{NodeBIRDOptions{KernelTable: 100}, XLBDOptions{RouteTable: 100}, []string{
			"protocol kernel vips4 {\n\tipv4 { import all; export none; };\n\tkernel table 100;\n\tlearn;",
			"protocol kernel vips6 {\n\tipv6 { import all; export none; };\n\tkernel table 100;\n\tlearn;",
			"if source != RTS_INHERIT then reject;"}},
		{NodeBIRDOptions{Dummy: "xlbvips"}, XLBDOptions{DummyInterface: "xlbvips"}, []string{
			"protocol direct vips {\n\tipv4;\n\tipv6;\n\tinterface \"xlbvips\";\n}",
			"if source != RTS_DEVICE then reject;"}},
	} {
		got, err := l.NodeBIRDConfig(0, tc.bird, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range tc.want {
			if !strings.Contains(string(got), w) {
				t.Errorf("node BIRD config lacks %q:\n%s", w, got)
			}
		}
		if strings.Contains(string(got), "protocol static") {
			t.Errorf("static routes with learned ones:\n%s", got)
		}
		c, err := config.Parse(l.XLBDConfig(0, tc.xlbd), "x.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if b := c.BGP; b == nil || b.Mode != config.BGPExternal || b.RouteTable != tc.xlbd.RouteTable || b.DummyInterface != tc.xlbd.DummyInterface {
			t.Fatalf("xlbd config: %+v", c.BGP)
		}
	}
	if _, err := l.NodeBIRDConfig(0, NodeBIRDOptions{KernelTable: 100, Dummy: "d"}, ""); err == nil {
		t.Fatal("a table and a dummy interface accepted")
	}
}
