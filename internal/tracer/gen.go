package tracer

// The marker's constants come from bpf/types.h (enum xlb_trace_const)
// and its address families (enum xlb_family)
// through the forwarder's object, without linking that object into xlbctl.
//go:generate go run ../btfconst -obj ../datapath/xlb_bpfel.o -pkg tracer -prefix abi -out abi_gen.go xlb_trace_const xlb_family
