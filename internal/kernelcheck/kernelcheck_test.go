package kernelcheck

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/decap"
	"github.com/xlbproject/xlb/internal/testenv"
)

func present() error { return nil }
func absent(why string) func() error {
	return func() error { return fmt.Errorf("%w (%s)", ErrMissing, why) }
}

// TestMissingFeaturesNamed: with an injected table, every missing
// feature is named with its Linux version and use, the minimum is the
// highest version of the table, present features are not mentioned, and
// a probe that could not tell is returned as unsure, not as missing.
func TestMissingFeaturesNamed(t *testing.T) {
	fs := []Feature{
		{Name: "XDP programs", Since: "4.8", Use: "the forwarder", Probe: present},
		{Name: "map type RingBuf", Since: "5.8", Use: "the forwarder's tables", Probe: absent("map create: invalid argument")},
		{Name: "bpf_link for XDP", Since: "5.9", Use: "attaching", Probe: present},
		{Name: "managed neighbour entries (NTF_EXT_MANAGED)", Since: "5.16", Use: "next hops", Probe: absent("the entry was added without the managed flag")},
		{Name: "helper bpf_xdp_load_bytes in XDP programs", Since: "5.18", Use: "the forwarder", Probe: func() error { return errors.New("operation not permitted") }},
	}
	unsure, err := Check(fs)
	var me *MissingError
	if !errors.As(err, &me) {
		t.Fatalf("Check: %v, want a MissingError", err)
	}
	if len(me.Missing) != 2 || me.Minimum != "5.18" {
		t.Fatalf("missing %d, minimum %s", len(me.Missing), me.Minimum)
	}
	msg := err.Error()
	for _, want := range []string{
		"lacks 2 feature(s) xlb needs:",
		"\n  map type RingBuf (Linux 5.8 and later; used for the forwarder's tables): missing (map create: invalid argument)",
		"\n  managed neighbour entries (NTF_EXT_MANAGED) (Linux 5.16 and later; used for next hops): missing (the entry was added without the managed flag)",
		"\nxlb needs Linux 5.18 or later",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "XDP programs") || strings.Contains(msg, "bpf_link") {
		t.Errorf("message names a present feature:\n%s", msg)
	}
	if len(unsure) != 1 || unsure[0].Name != "helper bpf_xdp_load_bytes in XDP programs" {
		t.Errorf("unsure: %+v", unsure)
	}
	if _, err := Check(fs[:1]); err != nil {
		t.Errorf("all present: %v", err)
	}
}

func TestVersionOrder(t *testing.T) {
	for _, c := range []struct{ a, b string }{{"4.8", "4.18"}, {"4.18", "5.1"}, {"5.9", "5.16"}, {"0.0", "3.19"}} {
		if !versionLess(c.a, c.b) || versionLess(c.b, c.a) {
			t.Errorf("%s < %s not seen", c.a, c.b)
		}
	}
}

// TestTablesCoverTheForwarder: every map type and helper the embedded
// forwarder uses has its Linux version in the tables, and the minimum
// kernel is the one the docs state.
func TestTablesCoverTheForwarder(t *testing.T) {
	spec, err := datapath.EmbeddedSpec()
	if err != nil {
		t.Fatal(err)
	}
	fs := Forwarder(spec)
	btfListed := false
	for _, f := range fs {
		if f.Since == "?" {
			t.Errorf("%s: no Linux version in the tables", f.Name)
		}
		btfListed = btfListed || f.Probe != nil && f.Name == "BTF (BPF_BTF_LOAD)"
	}
	if !btfListed {
		t.Errorf("BTF not among the features; the forwarder has global functions")
	}
	if got := Minimum(fs); got != MinimumKernel {
		t.Errorf("the forwarder needs Linux %s; MinimumKernel (stated in the docs) is %s", got, MinimumKernel)
	}
}

// TestRealProbesOnThisKernel runs every probe on the running kernel,
// which has them all (the test machine runs a kernel after 5.18).
func TestRealProbesOnThisKernel(t *testing.T) {
	testenv.RequireNetns(t) // the probes build a scratch namespace
	spec, err := datapath.EmbeddedSpec()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range Run(Forwarder(spec)) {
		if r.Err != nil {
			t.Errorf("%s (Linux %s) on %s: %v", r.Name, r.Since, Release(), r.Err)
			continue
		}
		t.Logf("%s (Linux %s): present", r.Name, r.Since)
	}
}

func TestHelperName(t *testing.T) {
	for fn, want := range map[asm.BuiltinFunc]string{asm.FnXdpLoadBytes: "xdp_load_bytes", asm.FnGetSmpProcessorId: "get_smp_processor_id", asm.FnFibLookup: "fib_lookup"} {
		if got := helperName(fn); got != want {
			t.Errorf("helperName(%v) = %q, want %q", fn, got, want)
		}
	}
}

// TestDecapProbesOnThisKernel: the decapsulator's features are in the
// tables and present on the running kernel; it needs less than the
// forwarder.
func TestDecapProbesOnThisKernel(t *testing.T) {
	spec, err := decap.EmbeddedSpec()
	if err != nil {
		t.Fatal(err)
	}
	fs := Decap(spec)
	for _, f := range fs {
		if f.Since == "?" {
			t.Errorf("%s: no Linux version in the tables", f.Name)
		}
	}
	t.Logf("xlb-decap needs Linux %s", Minimum(fs))
	if versionLess(MinimumKernel, Minimum(fs)) {
		t.Errorf("xlb-decap needs Linux %s, more than xlbd's %s", Minimum(fs), MinimumKernel)
	}
	testenv.RequireNetns(t) // the probes build a scratch namespace
	if _, err := Check(fs); err != nil {
		t.Error(err)
	}
}
