package lab

import (
	"fmt"
	"net/netip"
)

// writeStaticVIPs writes the stand-in speaker's static blackhole routes of
// the VIPs.
func writeStaticVIPs(w func(string, ...any), o NodeBIRDOptions, v4, v6 bool) {
	for _, f := range []struct {
		on   bool
		fam  string
		is4  bool
		name string
	}{{v4, "4", true, "vips4"}, {v6, "6", false, "vips6"}} {
		if !f.on {
			continue
		}
		w("protocol static %s {\n\tipv%s;\n", f.name, f.fam)
		for _, v := range o.VIPs {
			if v.Is4() == f.is4 {
				w("\troute %s blackhole;\n", netip.PrefixFrom(v, v.BitLen()))
			}
		}
		w("}\n")
	}
}

// writeLearnedVIPs writes, for xlbd's bgp.mode external, the protocols
// that learn the VIP routes xlbd keeps: from kernel table o.KernelTable
// (routes of other daemons: "learn"), or the host addresses of dummy
// interface o.Dummy. It returns the routes' source for the export filter.
// BIRD sees kernel changes at once (netlink notifications); the scan is a
// backstop.
func writeLearnedVIPs(w func(string, ...any), o NodeBIRDOptions, v4, v6 bool) string {
	if o.Dummy != "" {
		w("protocol direct vips {\n")
		if v4 {
			w("\tipv4;\n")
		}
		if v6 {
			w("\tipv6;\n")
		}
		w("\tinterface %s;\n}\n", birdString(o.Dummy))
		return "RTS_DEVICE"
	}
	for _, f := range []struct {
		on  bool
		fam string
	}{{v4, "4"}, {v6, "6"}} {
		if f.on {
			w("protocol kernel vips%s {\n\tipv%s { import all; export none; };\n\tkernel table %d;\n\tlearn;\n\tscan time 10;\n}\n", f.fam, f.fam, o.KernelTable)
		}
	}
	return "RTS_INHERIT"
}

// checkLearned checks the options of writeLearnedVIPs.
func checkLearned(o NodeBIRDOptions) error {
	if o.KernelTable != 0 && o.Dummy != "" {
		return fmt.Errorf("bird: a kernel table or a dummy interface, not both")
	}
	return checkBIRDString("dummy interface", o.Dummy)
}
