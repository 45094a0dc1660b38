package throughput

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/progrun"
	"golang.org/x/sys/unix"
)

// FloodKind is what a flood's packets are.
type FloodKind int

// Flood kinds: each packet a new flow (5-tuple) of the kind.
const (
	FloodSYN FloodKind = iota // TCP SYN with MSS and SACK-permitted options
	FloodACK                  // TCP ACK without payload, as of a connection the node never saw
	FloodUDP                  // UDP with 18 bytes of payload (a 64-byte frame)
)

func (k FloodKind) String() string {
	return [...]string{"SYN", "ACK", "UDP"}[k]
}

// FloodOptions describe a spoofed flood (NewSYNFlood).
type FloodOptions struct {
	// Kind is what the flood sends (default FloodSYN).
	Kind FloodKind
	// Device is the veth end the flood is transmitted on, in the calling
	// thread's network namespace: its peer (a node's interface, where the
	// forwarder runs) receives it.
	Device string
	// DstMAC and SrcMAC are the frames' Ethernet addresses (the node's, and
	// the router's as if the router had forwarded them).
	DstMAC, SrcMAC net.HardwareAddr
	// VIP and Port are the target (IPv4; TCP, or UDP for FloodUDP).
	VIP  netip.Addr
	Port uint16
	// Sources is the first spoofed source address (IPv4): SYN i comes from
	// Sources + i/32768, port 32768 + i%32768, so no two SYNs of a run
	// share a 5-tuple.
	Sources netip.Addr
	// CPU is the CPU the generating thread is pinned to while it runs.
	CPU int
	// Sink attaches gen_sink to Device in place of its XDP program: the
	// receiving node's XDP_TX of each flood SYN (GRE/IPv4 toward a
	// backend, inner source in SinkPrefix) comes back to Device, where it
	// is dropped and counted; everything else passes, as it did. The
	// flood is then closed-loop on that count: at most Window frames
	// outstanding (generated, not yet back). Without Sink the generator
	// runs open-loop, as fast as it can, and frames the peer cannot take
	// in time are dropped in its ring.
	Sink bool
	// SinkPrefix is the sources the sink drops (default Sources/15).
	SinkPrefix netip.Prefix
	// Window is the closed loop's bound on outstanding frames (default
	// 192: under the 256 slots of a veth ring, so that other traffic into
	// the same rings always finds room).
	Window uint64
}

// FloodResult is what a SYNFlood run did.
type FloodResult struct {
	Frames  uint64        // SYNs generated (each transmitted on Device, or dropped there if its peer's ring was full)
	Elapsed time.Duration // from the first to the last test run
	PPS     float64       // Frames / Elapsed
	// Sunk is the frames the sink dropped (Sink). Waits counts the closed
	// loop's waits for them; Stalls the waits given up after 20 ms (the
	// outstanding frames then count as lost and the loop goes on).
	Sunk, Waits, Stalls uint64
}

// SYNFlood is a spoofed flood made by this package's generator (gen_tx,
// bpf/gen_tput.c) with BPF_PROG_TEST_RUN in live-frames mode: every frame
// is a new flow from a new source address and port (GEN_NEW_FLOWS): by
// default a SYN (with MSS and SACK-permitted options) with valid IPv4 and
// TCP checksums, so the backends' stacks take it for a real connection
// attempt; or an ACK, or a UDP datagram (FloodOptions.Kind). gen_tx answers XDP_TX, which the kernel turns into a transmit on
// Device: the frame lands in the receive ring of Device's peer, whose NAPI
// poll (the forwarder) runs in the generating thread's softirq, on
// FloodOptions.CPU, as do whatever the forwarder's output sets off
// downstream on veths. The flood therefore runs at the rate one CPU makes,
// forwards and delivers SYNs: the maximum one generator thread offers.
//
// NewSYNFlood, Run and Close must be called on a thread in Device's network
// namespace (e.g. inside lab.NS.Do): the test run's ingress device and the
// spare veth are resolved there.
type SYNFlood struct {
	o       FloodOptions
	sinking bool
	objs    tputObjects
	keep    link.Link
	spare   string
	ifindex int
}

// NewSYNFlood loads the generator with the flood's template and attaches
// it to a spare veth pair (see keepInDispatcher: otherwise every test run
// costs 25-45 ms of dispatcher updates).
func NewSYNFlood(o FloodOptions) (_ *SYNFlood, err error) {
	if !o.VIP.Is4() || !o.Sources.Is4() {
		return nil, fmt.Errorf("syn flood: VIP %v and sources %v must be IPv4", o.VIP, o.Sources)
	}
	if len(o.DstMAC) != 6 || len(o.SrcMAC) != 6 {
		return nil, errors.New("syn flood: MAC addresses of 6 bytes needed")
	}
	dev, err := net.InterfaceByName(o.Device)
	if err != nil {
		return nil, fmt.Errorf("syn flood: device %s: %w", o.Device, err)
	}
	f := &SYNFlood{o: o, ifindex: dev.Index}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	spec, err := loadTput()
	if err != nil {
		return nil, fmt.Errorf("load generator spec: %w", err)
	}
	if err := spec.LoadAndAssign(&f.objs, nil); err != nil {
		return nil, fmt.Errorf("load generator programs: %w", err)
	}
	tmpl := floodFrame(o)
	src := o.Sources.As4()
	for _, s := range []struct {
		v   *ebpf.Variable
		val any
	}{
		{f.objs.GenTmpl, [genFrame]byte(tmpl)}, {f.objs.GenHow, uint32(tputGenModeGEN_NEW_FLOWS)},
		{f.objs.GenBase, binary.BigEndian.Uint32(src[:])}, {f.objs.GenCsum, uint32(1)},
	} {
		if err := s.v.Set(s.val); err != nil {
			return nil, fmt.Errorf("set %s: %w", s.v, err)
		}
	}
	if o.Sink {
		if err := f.attachSink(); err != nil {
			return nil, err
		}
	}
	var rnd [2]byte
	rand.Read(rnd[:])
	f.spare = "sf" + hex.EncodeToString(rnd[:])
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: f.spare + "a"}, PeerName: f.spare + "b"}); err != nil {
		f.spare = ""
		return nil, fmt.Errorf("add spare veth: %w", err)
	}
	l, err := netlink.LinkByName(f.spare + "a")
	if err != nil {
		return nil, err
	}
	if f.keep, err = link.AttachXDP(link.XDPOptions{Program: f.objs.GenTx, Interface: l.Attrs().Index,
		Flags: link.XDPDriverMode}); err != nil {
		return nil, fmt.Errorf("attach gen_tx to %s: %w", f.spare+"a", err)
	}
	return f, nil
}

// attachSink sets gen_sink's prefix, attaches it to Device (legacy
// netlink attachment in driver mode, replacing what is there) and turns it
// on.
func (f *SYNFlood) attachSink() error {
	p := f.o.SinkPrefix
	if !p.IsValid() {
		p = netip.PrefixFrom(f.o.Sources, 15)
	}
	p = p.Masked()
	if !p.Addr().Is4() {
		return fmt.Errorf("syn flood: sink prefix %v is not IPv4", p)
	}
	n := p.Addr().As4()
	m := net.CIDRMask(p.Bits(), 32)
	for _, s := range []struct {
		v   *ebpf.Variable
		val uint32
	}{{f.objs.SinkNet, le32(n[:])}, {f.objs.SinkMask, le32(m)}, {f.objs.SinkOn, 1}} {
		if err := s.v.Set(s.val); err != nil {
			return fmt.Errorf("set %s: %w", s.v, err)
		}
	}
	l, err := netlink.LinkByName(f.o.Device)
	if err != nil {
		return err
	}
	if err := netlink.LinkSetXdpFdWithFlags(l, f.objs.GenSink.FD(), nl.XDP_FLAGS_DRV_MODE); err != nil {
		return fmt.Errorf("attach gen_sink to %s: %w", f.o.Device, err)
	}
	f.sinking = true
	return nil
}

// sunk is the sink's count.
func (f *SYNFlood) sunk() (uint64, error) {
	var per []tputGenStats
	if err := f.objs.GenRx.Lookup(uint32(0), &per); err != nil {
		return 0, fmt.Errorf("read gen_rx: %w", err)
	}
	var n uint64
	for _, p := range per {
		n += p.Encap
	}
	return n, nil
}

// floodFrame is the flood's template: packet 0 (from o.Sources, port
// 32768) of o.Kind, Ethernet, IPv4 and TCP or UDP, padded to GEN_FRAME.
func floodFrame(o FloodOptions) []byte {
	var l4 []byte
	proto := uint8(packet.ProtoTCP)
	switch o.Kind {
	case FloodUDP:
		proto, l4 = packet.ProtoUDP, make([]byte, 8+18)
		binary.BigEndian.PutUint16(l4[4:], uint16(len(l4))) // checksum 0: none
	case FloodACK:
		l4 = make([]byte, 20)
		binary.BigEndian.PutUint32(l4[8:], 0x5eed0002)
		l4[12], l4[13] = 5<<4, packet.ACK
	default:
		l4 = make([]byte, 28)
		l4[12], l4[13] = 7<<4, packet.SYN
		copy(l4[20:], []byte{2, 4, 0x05, 0xb4, 1, 1, 4, 2}) // MSS 1460, NOP, NOP, SACK permitted
	}
	binary.BigEndian.PutUint16(l4[0:], 0x8000)
	binary.BigEndian.PutUint16(l4[2:], o.Port)
	if proto == packet.ProtoTCP {
		binary.BigEndian.PutUint32(l4[4:], 0x5eed0001)
		binary.BigEndian.PutUint16(l4[14:], 64240)
		pseudo := make([]byte, 12, 12+len(l4))
		s, d := o.Sources.As4(), o.VIP.As4()
		copy(pseudo[0:], s[:])
		copy(pseudo[4:], d[:])
		pseudo[9] = proto
		binary.BigEndian.PutUint16(pseudo[10:], uint16(len(l4)))
		binary.BigEndian.PutUint16(l4[16:], packet.Checksum(append(pseudo, l4...)))
	}
	ip := packet.IPv4(o.Sources, o.VIP, proto, 0, 64, nil, l4)
	fr := packet.Ethernet([6]byte(o.DstMAC), [6]byte(o.SrcMAC), 0, packet.EtherIPv4, ip)
	return append(fr, make([]byte, genFrame-len(fr))...)
}

// Run floods for d (or until ctx is done) from the calling thread, pinned
// to o.CPU meanwhile (its CPU set is restored afterwards). The thread keeps
// its normal priority: the softirq work its frames set off runs in its
// context anyway, and a thread at SCHED_IDLE could be starved while it
// holds a Go P (or a garbage collection waits for it to stop), which
// stalls the rest of the process. The thread holds a Go P nearly all the
// time (its system calls are short), so Run raises GOMAXPROCS by one
// meanwhile: the process's other goroutines keep as many Ps as before. And
// it confines the process's other threads to the other CPUs meanwhile:
// the softirq work on the flood's CPU is not preemptible, and the
// scheduler may not charge it to the generating thread, so a thread of the
// process left there could wait for hundreds of milliseconds, and with it
// the goroutines it holds (measured: stalls of 0.2-0.6 s of every session).
func (f *SYNFlood) Run(ctx context.Context, d time.Duration) (FloodResult, error) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + 1))
	var res FloodResult
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return res, err
	}
	if err := pinThread(f.o.CPU); err != nil {
		return res, err
	}
	defer unix.SchedSetaffinity(0, &old)
	defer confineOthers(f.o.CPU, old)()
	var seq0, seq1 uint64
	if err := f.objs.GenSeq.Get(&seq0); err != nil {
		return res, err
	}
	// Open loop: 8192 frames per call (a few ms). Closed loop: one kernel
	// batch (64 frames) per call, once the receiver has room.
	repeat, window := uint64(8192), f.o.Window
	var base uint64 // frames taken (or given up as lost) when gen_seq was seq0
	var sunk0 uint64
	if f.o.Sink {
		repeat = 64
		if window == 0 {
			window = 192
		}
		if window < repeat {
			return res, fmt.Errorf("syn flood: window %d below a batch of %d", window, repeat)
		}
		var err error
		if base, err = f.sunk(); err != nil {
			return res, err
		}
		sunk0 = base
	}
	in := make([]byte, genFrame)
	sent := seq0
	start := time.Now()
	for time.Since(start) < d && ctx.Err() == nil {
		if f.o.Sink {
			waited := false
			var since time.Time
			for {
				taken, err := f.sunk()
				if err != nil {
					return res, err
				}
				if out := (sent - seq0) - (taken - base); sent-seq0 < taken-base || out+repeat <= window {
					break
				}
				if !waited {
					waited, since = true, time.Now()
					res.Waits++
				} else if time.Since(since) > 20*time.Millisecond {
					// Frames lost past the counter: count them as taken.
					base -= (sent - seq0) - (taken - base)
					res.Stalls++
					break
				}
				unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
			}
		}
		if _, err := progrun.Run(progrun.XDP{Prog: f.objs.GenTx, Data: in, Ifindex: f.ifindex,
			Repeat: uint32(repeat), Flags: progrun.FlagLiveFrames}); err != nil {
			return res, fmt.Errorf("live frames: %w", err)
		}
		if err := f.objs.GenSeq.Get(&sent); err != nil {
			return res, err
		}
	}
	res.Elapsed = time.Since(start)
	seq1 = sent
	if f.o.Sink {
		time.Sleep(10 * time.Millisecond) // the last frames come back
		n, err := f.sunk()
		if err != nil {
			return res, err
		}
		res.Sunk = n - sunk0
	}
	res.Frames = seq1 - seq0
	res.PPS = float64(res.Frames) / res.Elapsed.Seconds()
	return res, nil
}

// Frame returns the frame the generator makes for packet i (run once, not
// live), for checking.
func (f *SYNFlood) Frame(i uint64) ([]byte, error) {
	if err := f.objs.GenSeq.Set(i); err != nil {
		return nil, err
	}
	out := make([]byte, genFrame)
	r, err := progrun.Run(progrun.XDP{Prog: f.objs.GenTx, Data: make([]byte, genFrame), Out: out, Repeat: 1})
	if err != nil {
		return nil, err
	}
	return r.Out, nil
}

// Close detaches and unloads the generator and removes the spare veth. The
// sink stays attached to Device, switched off: it passes everything (a
// veth needs an XDP program for its peer's XDP_TX to reach the stack).
func (f *SYNFlood) Close() error {
	var errs []error
	if f.sinking {
		errs = append(errs, f.objs.SinkOn.Set(uint32(0)))
	}
	if f.keep != nil {
		errs = append(errs, f.keep.Close())
	}
	f.objs.Close()
	if f.spare != "" {
		if l, err := netlink.LinkByName(f.spare + "a"); err == nil {
			errs = append(errs, netlink.LinkDel(l))
		}
	}
	return errors.Join(errs...)
}

// confineOthers takes cpu out of the CPU set of every other thread of the
// process (threads started later inherit their creator's set) and returns
// the function that gives them back their sets, and def to the threads
// started meanwhile.
func confineOthers(cpu int, def unix.CPUSet) (restore func()) {
	self := unix.Gettid()
	tids := func() []int {
		ents, _ := os.ReadDir("/proc/self/task")
		var out []int
		for _, e := range ents {
			if tid, err := strconv.Atoi(e.Name()); err == nil && tid != self {
				out = append(out, tid)
			}
		}
		return out
	}
	saved := map[int]unix.CPUSet{}
	restore = func() {
		for _, tid := range tids() {
			set, ok := saved[tid]
			if !ok {
				set = def
			}
			unix.SchedSetaffinity(tid, &set) // a thread that ended is gone
		}
	}
	for _, tid := range tids() {
		var set unix.CPUSet
		if unix.SchedGetaffinity(tid, &set) != nil {
			continue // ended meanwhile
		}
		saved[tid] = set
		other := set
		other.Clear(cpu)
		if other.Count() > 0 {
			unix.SchedSetaffinity(tid, &other) // a thread that ended is gone
		}
	}
	return restore
}
