package kernelcheck

import (
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// mapSince is the first Linux version of each map type xlb's programs
// may declare (a type not listed here is named as unknown by Forwarder).
var mapSince = map[ebpf.MapType]string{
	ebpf.Hash:         "3.19",
	ebpf.Array:        "3.19",
	ebpf.ProgramArray: "4.2",
	ebpf.PerCPUHash:   "4.6",
	ebpf.PerCPUArray:  "4.6",
	ebpf.LRUHash:      "4.10",
	ebpf.LRUCPUHash:   "4.10",
	ebpf.LPMTrie:      "4.11",
	ebpf.ArrayOfMaps:  "4.12",
	ebpf.HashOfMaps:   "4.12",
	ebpf.DevMap:       "4.14",
	ebpf.DevMapHash:   "5.4",
	ebpf.RingBuf:      "5.8",
}

// helperSince is the first Linux version in which XDP programs may call
// each helper xlb's programs use.
var helperSince = map[asm.BuiltinFunc]string{
	asm.FnMapLookupElem:     "4.8",
	asm.FnMapUpdateElem:     "4.8",
	asm.FnMapDeleteElem:     "4.8",
	asm.FnKtimeGetNs:        "4.8",
	asm.FnGetSmpProcessorId: "4.8",
	asm.FnGetPrandomU32:     "4.8",
	asm.FnCsumDiff:          "4.8",
	asm.FnTailCall:          "4.8",
	asm.FnXdpAdjustHead:     "4.10",
	asm.FnRedirect:          "4.14",
	asm.FnRedirectMap:       "4.14",
	asm.FnXdpAdjustMeta:     "4.15",
	asm.FnXdpAdjustTail:     "4.18",
	asm.FnFibLookup:         "4.18",
	asm.FnJiffies64:         "5.5",
	asm.FnRingbufOutput:     "5.8",
	asm.FnRingbufReserve:    "5.8",
	asm.FnRingbufSubmit:     "5.8",
	asm.FnRingbufDiscard:    "5.8",
	asm.FnKtimeGetCoarseNs:  "5.11",
	asm.FnCheckMtu:          "5.12",
	asm.FnLoop:              "5.17",
	asm.FnXdpGetBuffLen:     "5.18",
	asm.FnXdpLoadBytes:      "5.18",
	asm.FnXdpStoreBytes:     "5.18",
}
