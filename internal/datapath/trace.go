package datapath

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// TraceEvent is one packet tracer record from the forwarder (struct
// trace_event, bpf/trace.h).
type TraceEvent struct {
	Time         time.Time // wall clock, from the forwarder's monotonic stamp
	CPU          uint32
	ID           uint32 // the marker's
	Proto        uint8
	Src          netip.AddrPort // client
	VIP          netip.AddrPort
	Backend      netip.Addr // invalid: none chosen
	RealID       uint32
	SvcID        uint32
	ConntrackHit bool
	Verdict      uint32 // XDP action
	Reason       string // drop reason of selection (a StatNames entry), "" if none
	Receiver     netip.AddrPort
}

// TraceReader reads the forwarder's tracer ring buffer.
type TraceReader struct {
	r *ringbuf.Reader
}

// ErrTraceClosed is returned by Read after Close.
var ErrTraceClosed = errors.New("trace reader closed")

// TraceReader opens the tracer ring buffer. One reader per process.
func (d *Datapath) TraceReader() (*TraceReader, error) {
	r, err := ringbuf.NewReader(d.objs.XlbTraceRing)
	if err != nil {
		return nil, fmt.Errorf("open tracer ring buffer: %w", err)
	}
	return &TraceReader{r: r}, nil
}

// SetDeadline makes Read give up (os.ErrDeadlineExceeded) at t.
func (t *TraceReader) SetDeadline(at time.Time) { t.r.SetDeadline(at) }

// Read waits for the next record.
func (t *TraceReader) Read() (TraceEvent, error) {
	rec, err := t.r.Read()
	if err != nil {
		if errors.Is(err, ringbuf.ErrClosed) {
			return TraceEvent{}, ErrTraceClosed
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return TraceEvent{}, err
		}
		return TraceEvent{}, fmt.Errorf("read tracer ring buffer: %w", err)
	}
	var e xlbTraceEvent
	if err := binary.Read(bytes.NewReader(rec.RawSample), binary.NativeEndian, &e); err != nil {
		return TraceEvent{}, fmt.Errorf("tracer record of %d bytes: %w", len(rec.RawSample), err)
	}
	return traceEvent(e), nil
}

// Close stops the reader; a blocked Read returns ErrTraceClosed.
func (t *TraceReader) Close() error { return t.r.Close() }

func addrOf(family uint8, b [16]uint8) netip.Addr {
	switch family {
	case uint8(xlbXlbFamilyXLB_AF_INET):
		return netip.AddrFrom4([4]byte(b[:4]))
	case uint8(xlbXlbFamilyXLB_AF_INET6):
		return netip.AddrFrom16(b)
	}
	return netip.Addr{}
}

func netBE16(v uint16) uint16 { // a __be16 loaded as a native uint16
	var b [2]byte
	binary.NativeEndian.PutUint16(b[:], v)
	return binary.BigEndian.Uint16(b[:])
}

// monoToWall converts a stamp of the host's CLOCK_MONOTONIC
// (bpf_ktime_get_ns) in nanoseconds.
func monoToWall(ns uint64) time.Time {
	now := time.Now()
	mono, err := kernelMono(unix.CLOCK_MONOTONIC) // clock.go
	if err != nil {
		return now
	}
	return now.Add(-time.Duration(mono - ns))
}

func traceEvent(e xlbTraceEvent) TraceEvent {
	t := TraceEvent{
		Time:         monoToWall(e.KtimeNs),
		CPU:          e.Cpu,
		ID:           e.Id,
		Proto:        e.Proto,
		Src:          netip.AddrPortFrom(addrOf(e.Family, e.Src), netBE16(e.Sport)),
		VIP:          netip.AddrPortFrom(addrOf(e.Family, e.Dst), netBE16(e.Dport)),
		Backend:      addrOf(e.BackendFamily, e.Backend),
		RealID:       e.RealId,
		SvcID:        e.SvcId,
		ConntrackHit: e.CtHit != 0,
		Verdict:      e.Verdict,
		Receiver:     netip.AddrPortFrom(addrOf(e.ReceiverFamily, e.Receiver), netBE16(e.ReceiverPort)),
	}
	if names := StatNames(); e.Reason != 0 && int(e.Reason) < len(names) {
		t.Reason = names[e.Reason]
	}
	return t
}
