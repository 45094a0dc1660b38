// Package progrun issues BPF_PROG_TEST_RUN for XDP programs directly, for
// the benchmarks: cilium/ebpf's Program.Run returns no duration, and its
// Benchmark takes no context (ingress device) nor live-frames flags.
package progrun

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// FlagLiveFrames is BPF_F_TEST_XDP_LIVE_FRAMES: XDP_TX and XDP_REDIRECT
// really transmit, on the ingress device.
const FlagLiveFrames = 1 << 1

// attr is the BPF_PROG_TEST_RUN part of union bpf_attr (uapi, stable).
type attr struct {
	progFd      uint32
	retval      uint32
	dataSizeIn  uint32
	dataSizeOut uint32
	dataIn      uint64
	dataOut     uint64
	repeat      uint32
	duration    uint32
	ctxSizeIn   uint32
	ctxSizeOut  uint32
	ctxIn       uint64
	ctxOut      uint64
	flags       uint32
	cpu         uint32
	batchSize   uint32
	_           uint32
}

// xdpMD is struct xdp_md as BPF_PROG_TEST_RUN takes it.
type xdpMD struct {
	data, dataEnd, dataMeta, ingressIfindex, rxQueueIndex, egressIfindex uint32
}

// XDP describes one run of an XDP program.
type XDP struct {
	Prog    *ebpf.Program
	Data    []byte // the input frame (not changed)
	Out     []byte // receives the last output frame; nil: not wanted
	Ifindex int    // ingress device (0: none)
	Repeat  uint32
	Flags   uint32 // e.g. FlagLiveFrames
	// Retry reruns the call when a signal interrupts it (EINTR); without
	// it an interrupted run returns what it did.
	Retry bool
}

// Result is what the kernel reports of a run.
type Result struct {
	Verdict  uint32
	Duration uint32 // ns per run, rounded down (0 in live-frames mode)
	Out      []byte // the last output frame, within XDP.Out
}

// Run issues the test run.
func Run(x XDP) (Result, error) {
	in := append([]byte(nil), x.Data...)
	md := &xdpMD{dataEnd: uint32(len(in)), ingressIfindex: uint32(x.Ifindex)}
	var pin runtime.Pinner
	pin.Pin(&in[0])
	pin.Pin(md)
	a := attr{
		progFd:     uint32(x.Prog.FD()),
		dataSizeIn: uint32(len(in)),
		dataIn:     uint64(uintptr(unsafe.Pointer(&in[0]))),
		repeat:     x.Repeat,
		ctxSizeIn:  uint32(unsafe.Sizeof(*md)),
		ctxIn:      uint64(uintptr(unsafe.Pointer(md))),
		flags:      x.Flags,
	}
	if len(x.Out) > 0 {
		pin.Pin(&x.Out[0])
		a.dataSizeOut = uint32(len(x.Out))
		a.dataOut = uint64(uintptr(unsafe.Pointer(&x.Out[0])))
	}
	defer pin.Unpin()
	for {
		_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_TEST_RUN, uintptr(unsafe.Pointer(&a)), unsafe.Sizeof(a))
		if errno == unix.EINTR && x.Retry {
			continue
		}
		if errno != 0 && errno != unix.EINTR {
			return Result{}, fmt.Errorf("BPF_PROG_TEST_RUN: %w", errno)
		}
		break
	}
	runtime.KeepAlive(x.Prog)
	r := Result{Verdict: a.retval, Duration: a.duration}
	if len(x.Out) > 0 {
		if a.dataSizeOut > uint32(len(x.Out)) {
			return r, errors.New("BPF_PROG_TEST_RUN: output larger than the buffer")
		}
		r.Out = x.Out[:a.dataSizeOut]
	}
	return r, nil
}
