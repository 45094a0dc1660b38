package datapath

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/progrun"
	"golang.org/x/sys/unix"
)

// Defaults of FragHoldOptions.
const (
	DefaultFragHoldFrames = 4096
	DefaultFragHoldBytes  = 8 << 20
	DefaultFragHold       = 2 * time.Second
)

// FragHoldOptions bound the later fragments held until their first
// fragment comes (docs/ARCHITECTURE.md, IP fragments). Zero values take the defaults.
type FragHoldOptions struct {
	MaxFrames int           // frames held at once (default 4096)
	MaxBytes  int           // bytes held at once (default 8 MiB)
	Hold      time.Duration // a frame not released by then is dropped (default 2 s)
	// Inject re-runs a released frame through the program; nil: the
	// attached forwarder in live-frames mode (BPF_PROG_TEST_RUN with
	// BPF_F_TEST_XDP_LIVE_FRAMES, ingress = the interface it arrived on),
	// so XDP_TX sends it out of that interface. Tests replace it.
	Inject func(frame []byte, ifindex uint32) error
}

// FragHoldStats are the holder's counters (the program counts frag_held,
// frag_hold_fail and frag_release itself).
type FragHoldStats struct {
	Received     uint64 // HOLD records read from the ring buffer
	Released     uint64 // frames re-injected after their first fragment came
	Expired      uint64 // frames dropped: no first fragment within Hold
	Overflow     uint64 // frames dropped: over MaxFrames or MaxBytes
	InjectErrors uint64 // re-injections that failed
	// FRAGMENT records (bpf/toobig.h): IPv4 datagrams without DF too big
	// for their backend's egress once encapsulated.
	Fragmented   uint64 // datagrams split and their pieces re-injected
	Pieces       uint64 // pieces re-injected
	FragmentErrs uint64 // records that could not be split (bad frame, MTU too small)
	Frames       int    // held now
	Bytes        int    // held now
}

type heldFrame struct {
	frame   []byte
	ifindex uint32
	at      time.Time
}

// FragHolder reads the forwarder's fragment ring buffer: it holds the
// frames of datagrams whose first fragment has not come, bounded and
// expiring, and re-injects them when the program reports the first
// fragment's decision; and it fragments the datagrams the program hands
// it as too big (packet.SplitFrame), re-injecting the pieces.
type FragHolder struct {
	opts     FragHoldOptions
	rd       *ringbuf.Reader
	mu       sync.Mutex
	held     map[xlbFragKey][]heldFrame
	released map[xlbFragKey]time.Time // release seen: late HOLD records go at once
	st       FragHoldStats
	reader   *ebpf.Map // xlb_frag_reader
	stamped  time.Time // when reader was last written
}

// NewFragHolder opens the ring buffer. One holder per datapath.
func (d *Datapath) NewFragHolder(o FragHoldOptions) (*FragHolder, error) {
	if o.MaxFrames <= 0 {
		o.MaxFrames = DefaultFragHoldFrames
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultFragHoldBytes
	}
	if o.Hold <= 0 {
		o.Hold = DefaultFragHold
	}
	if o.Inject == nil {
		prog := d.objs.XlbForward
		o.Inject = func(frame []byte, ifindex uint32) error {
			_, err := progrun.Run(progrun.XDP{Prog: prog, Data: frame, Ifindex: int(ifindex), Repeat: 1,
				Flags: progrun.FlagLiveFrames, Retry: true})
			return err
		}
	}
	rd, err := ringbuf.NewReader(d.objs.XlbFragRing)
	if err != nil {
		return nil, fmt.Errorf("open fragment ring buffer: %w", err)
	}
	h := &FragHolder{opts: o, rd: rd, held: map[xlbFragKey][]heldFrame{}, released: map[xlbFragKey]time.Time{},
		reader: d.objs.XlbFragReader}
	h.stamp(time.Now())
	d.holder.Store(h)
	return h, nil
}

// readerStamp is how often the holder tells the program it reads the
// ring (xlb_frag_reader); the program stops handing it datagrams to
// split after 2 s without (bpf/frag.h, frag_split).
const readerStamp = 200 * time.Millisecond

// stamp writes the monotonic coarse clock (the program's
// bpf_ktime_get_coarse_ns) to xlb_frag_reader, at most every
// readerStamp.
func (h *FragHolder) stamp(now time.Time) {
	if now.Sub(h.stamped) < readerStamp {
		return
	}
	ns, err := kernelMono(unix.CLOCK_MONOTONIC_COARSE) // clock.go
	if err != nil {
		return
	}
	if h.reader.Put(uint32(0), ns) == nil {
		h.stamped = now
	}
}

// Close stops Run.
func (h *FragHolder) Close() error { return h.rd.Close() }

// Stats returns the counters.
func (h *FragHolder) Stats() FragHoldStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.st
}

const fragEventSize = int(unsafe.Sizeof(xlbFragEvent{}))

// Run reads records until ctx ends or Close; it expires held frames every
// tenth of Hold.
func (h *FragHolder) Run(ctx context.Context) error {
	tick := h.opts.Hold / 10
	go func() {
		<-ctx.Done()
		h.rd.Close()
	}()
	var rec ringbuf.Record
	for {
		h.rd.SetDeadline(time.Now().Add(tick))
		err := h.rd.ReadInto(&rec)
		now := time.Now()
		switch {
		case err == nil:
			h.handle(rec.RawSample, now)
		case errors.Is(err, os.ErrDeadlineExceeded):
		case errors.Is(err, ringbuf.ErrClosed):
			return nil
		default:
			return fmt.Errorf("read fragment ring buffer: %w", err)
		}
		h.expire(now)
		h.stamp(now)
	}
}

func (h *FragHolder) handle(b []byte, now time.Time) {
	if len(b) < fragEventSize {
		return
	}
	var ev xlbFragEvent
	if _, err := binary.Decode(b[:fragEventSize], binary.NativeEndian, &ev); err != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch ev.Kind {
	case uint32(xlbXlbFragEventKindXLB_FRAG_EV_RELEASE):
		h.released[ev.Key] = now
		frames := h.held[ev.Key]
		delete(h.held, ev.Key)
		for _, f := range frames {
			h.st.Frames--
			h.st.Bytes -= len(f.frame)
			h.inject(f.frame, f.ifindex)
		}
	case uint32(xlbXlbFragEventKindXLB_FRAG_EV_FRAGMENT):
		if int(ev.Len) <= len(b)-fragEventSize {
			h.fragment(b[fragEventSize:fragEventSize+int(ev.Len)], int(ev.Pad), ev.Ifindex)
		}
	case uint32(xlbXlbFragEventKindXLB_FRAG_EV_HOLD):
		if int(ev.Len) > len(b)-fragEventSize {
			return
		}
		h.st.Received++
		frame := append([]byte(nil), b[fragEventSize:fragEventSize+int(ev.Len)]...)
		if _, ok := h.released[ev.Key]; ok {
			// The first fragment recorded its decision before this
			// record was read.
			h.inject(frame, ev.Ifindex)
			return
		}
		if h.st.Frames+1 > h.opts.MaxFrames || h.st.Bytes+len(frame) > h.opts.MaxBytes {
			h.st.Overflow++
			return
		}
		h.held[ev.Key] = append(h.held[ev.Key], heldFrame{frame: frame, ifindex: ev.Ifindex, at: now})
		h.st.Frames++
		h.st.Bytes += len(frame)
	}
}

// inject runs with h.mu held.
func (h *FragHolder) inject(frame []byte, ifindex uint32) {
	if err := h.opts.Inject(frame, ifindex); err != nil {
		h.st.InjectErrors++
		return
	}
	h.st.Released++
}

// fragment splits a FRAGMENT record's frame (bpf/toobig.h: an IPv4
// datagram without DF that does not fit its backend's egress once
// encapsulated) into pieces of at most maxIP bytes (IP length) and
// re-injects each: the program sends a piece by the datagram's
// XLB_FRAG_LOCAL entry in the fragment table, the backend the whole
// datagram was given. Runs with h.mu held.
func (h *FragHolder) fragment(frame []byte, maxIP int, ifindex uint32) {
	pieces, err := packet.SplitFrame(frame, maxIP)
	if err != nil {
		h.st.FragmentErrs++
		return
	}
	h.st.Fragmented++
	for _, p := range pieces {
		if err := h.opts.Inject(p, ifindex); err != nil {
			h.st.InjectErrors++
			continue
		}
		h.st.Pieces++
	}
}

func (h *FragHolder) expire(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, frames := range h.held {
		keep := frames[:0]
		for _, f := range frames {
			if now.Sub(f.at) >= h.opts.Hold {
				h.st.Expired++
				h.st.Frames--
				h.st.Bytes -= len(f.frame)
				continue
			}
			keep = append(keep, f)
		}
		if len(keep) == 0 {
			delete(h.held, k)
		} else {
			h.held[k] = keep
		}
	}
	for k, at := range h.released {
		if now.Sub(at) >= h.opts.Hold {
			delete(h.released, k)
		}
	}
}
