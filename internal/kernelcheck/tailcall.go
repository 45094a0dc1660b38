package kernelcheck

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// tailCallFeature is what the forwarder's stages need: a program that
// calls functions of its own (BPF-to-BPF calls) may also tail-call
// another (Linux 5.10 on x86-64: before, the verifier refused the mix).
var tailCallFeature = Feature{
	Name: "tail calls in programs with BPF-to-BPF calls", Since: "5.10",
	Use: "the forwarder's stages (ICMP, fragments, probes)", Probe: probeTailCallWithCalls,
}

// usesTailCalls reports whether a program of spec tail-calls.
func usesTailCalls(spec *ebpf.CollectionSpec) bool {
	for _, p := range spec.Programs {
		for _, ins := range p.Instructions {
			if ins.IsBuiltinCall() && asm.BuiltinFunc(ins.Constant) == asm.FnTailCall {
				return true
			}
		}
	}
	return false
}

// probeTailCallWithCalls loads an XDP program that calls a subprogram
// and tail-calls through an empty program array.
func probeTailCallWithCalls() error {
	pa, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.ProgramArray, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		return conclusive(err)
	}
	defer pa.Close()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{
			asm.Mov.Reg(asm.R6, asm.R1),
			asm.Call.Label("sub"),
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.LoadMapPtr(asm.R2, pa.FD()),
			asm.Mov.Imm(asm.R3, 0),
			asm.FnTailCall.Call(),
			asm.Mov.Imm(asm.R0, 2), // XDP_PASS
			asm.Return(),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("sub"),
			asm.Return(),
		},
	})
	if err != nil {
		return fmt.Errorf("%w (%v)", ErrMissing, err)
	}
	return prog.Close()
}
