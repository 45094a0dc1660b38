package kernelcheck

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
)

// Forwarder returns the features xlbd needs to run the forwarder of spec:
// the XDP program type, each map type and each helper the object uses,
// bpf_link for XDP, live-frame test runs and managed neighbours.
func Forwarder(spec *ebpf.CollectionSpec) []Feature {
	return append(Program(spec, "the forwarder"), controlFeatures()...)
}

// Decap returns the features xlb-decap needs for the decapsulator of spec:
// those of its object and bpf_link for XDP.
func Decap(spec *ebpf.CollectionSpec) []Feature {
	return append(Program(spec, "the decapsulator"), xdpLink)
}

// Program returns the features an XDP object needs: the program type,
// each map type and each helper it uses; use names the program.
func Program(spec *ebpf.CollectionSpec, use string) []Feature {
	fs := []Feature{{
		Name: "XDP programs", Since: "4.8", Use: use,
		Probe: func() error { return conclusive(features.HaveProgramType(ebpf.XDP)) },
	}}
	if hasGlobalFunctions(spec) {
		fs = append(fs, Feature{
			Name: "BTF (BPF_BTF_LOAD)", Since: "4.18", Use: use + "'s global functions, which the verifier checks one by one from their BTF (Linux 5.6)",
			Probe: probeBTF,
		})
	}
	if hasGlobalFunctions(spec) && usesTailCalls(spec) {
		fs = append(fs, tailCallFeature)
	}
	fs = append(fs, mapFeatures(spec, use)...)
	return append(fs, helperFeatures(spec, use)...)
}

// hasGlobalFunctions reports whether a program of spec calls a global
// (non-static) function: the kernel verifies those apart, from their BTF.
func hasGlobalFunctions(spec *ebpf.CollectionSpec) bool {
	for _, p := range spec.Programs {
		for i := range p.Instructions {
			if fn := btf.FuncMetadata(&p.Instructions[i]); fn != nil && fn.Linkage == btf.GlobalFunc {
				return true
			}
		}
	}
	return false
}

var xdpLink = Feature{Name: "bpf_link for XDP", Since: "5.9", Use: "attaching the program so it stays attached after the command exits and is replaced atomically", Probe: probeXDPLink}

// controlFeatures are what xlbd's control plane needs of the kernel beyond
// what the object declares.
func controlFeatures() []Feature {
	return []Feature{
		xdpLink,
		{Name: "XDP live-frame test runs (BPF_F_TEST_XDP_LIVE_FRAMES)", Since: "5.18", Use: "re-injecting held fragments and sending self-check probes", Probe: probeLiveFrames},
		{Name: "managed neighbour entries (NTF_EXT_MANAGED)", Since: "5.16", Use: "keeping backends' next hops resolved for bpf_fib_lookup", Probe: probeManagedNeighbour},
	}
}

func mapFeatures(spec *ebpf.CollectionSpec, use string) []Feature {
	types := map[ebpf.MapType]bool{}
	for _, m := range spec.Maps {
		types[m.Type] = true
	}
	var fs []Feature
	for _, t := range slices.Sorted(maps.Keys(types)) {
		fs = append(fs, Feature{
			Name: fmt.Sprintf("map type %s", t), Since: sinceOr(mapSince[t]), Use: use + "'s tables",
			Probe: func() error { return conclusive(features.HaveMapType(t)) },
		})
	}
	return fs
}

func helperFeatures(spec *ebpf.CollectionSpec, use string) []Feature {
	helpers := map[asm.BuiltinFunc]bool{}
	for _, p := range spec.Programs {
		for _, ins := range p.Instructions {
			if ins.IsBuiltinCall() {
				helpers[asm.BuiltinFunc(ins.Constant)] = true
			}
		}
	}
	var fs []Feature
	for _, fn := range slices.Sorted(maps.Keys(helpers)) {
		fs = append(fs, Feature{
			Name: fmt.Sprintf("helper bpf_%s in XDP programs", helperName(fn)), Since: sinceOr(helperSince[fn]), Use: use,
			Probe: func() error { return conclusive(features.HaveProgramHelper(ebpf.XDP, fn)) },
		})
	}
	return fs
}

// helperName is the C name of fn without "bpf_": FnXdpLoadBytes is
// xdp_load_bytes.
func helperName(fn asm.BuiltinFunc) string {
	var b strings.Builder
	for i, r := range strings.TrimPrefix(fn.String(), "Fn") {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// sinceOr is v, or a placeholder for a feature missing from the tables
// (TestTablesCoverTheForwarder keeps that from happening).
func sinceOr(v string) string {
	if v == "" {
		return "?"
	}
	return v
}

// conclusive maps the features package's answer: ErrNotSupported is
// ErrMissing, nil is present, anything else is inconclusive.
func conclusive(err error) error {
	if err != nil && errors.Is(err, ebpf.ErrNotSupported) {
		return fmt.Errorf("%w (%v)", ErrMissing, err)
	}
	return err
}
