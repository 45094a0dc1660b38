package datapath

import (
	"bytes"
	"encoding/binary"

	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/tracer"
)

// ProbeCT is a probe's conntrack result as the forwarder answers it (enum
// xlb_probe_ct, bpf/types.h).
type ProbeCT uint8

// Probe conntrack results.
const (
	ProbeCTNone      = ProbeCT(xlbXlbProbeCtXLB_PROBE_CT_NONE)
	ProbeCTHit       = ProbeCT(xlbXlbProbeCtXLB_PROBE_CT_HIT)
	ProbeCTRemoteHit = ProbeCT(xlbXlbProbeCtXLB_PROBE_CT_REMOTE_HIT)
	ProbeCTMiss      = ProbeCT(xlbXlbProbeCtXLB_PROBE_CT_MISS)
	ProbeCTReselect  = ProbeCT(xlbXlbProbeCtXLB_PROBE_CT_RESELECT)
)

// Explained is what the forwarder did with one explained packet.
type Explained struct {
	Verdict uint32 // enum xdp_action
	Frame   []byte // the frame as the program left it
	// Answered: a VIP matched and the program took the packet for a probe
	// and wrote its answer (CT, Reason). Not answered: it was passed or
	// dropped before selection (no VIP matched).
	Answered bool
	CT       ProbeCT
	Reason   string // the drop reason's counter name (StatNames); "" when forwarded
}

// Explain runs f through the live program as a self-check probe (its
// payload is this node's probe marker, tracer.ProbeMarker): selection is
// read only (no conntrack entry made or refreshed), no service, real or
// conntrack counter moves (the probe counts in selfcheck_probe, and its
// verdict in forward_tx/forward_redirect or its drop reason, as a
// self-check's does), and the program writes what it did in the marker of
// the frame this run returns (bpf/trace.h trace_probe_answer): exact
// whatever other packets the program forwards on other CPUs meanwhile. The
// conntrack result is for the slice of the CPU this call runs on.
func (d *Datapath) Explain(f packet.Flow) (Explained, error) {
	f.Payload = tracer.ProbeMarker(d.probeCookie)
	verdict, out, err := d.RunPacket(f.Frame())
	if err != nil {
		return Explained{}, err
	}
	ex := Explained{Verdict: verdict, Frame: out}
	if ans, ok := probeAnswer(out, d.probeCookie); ok {
		ex.Answered, ex.CT = true, ProbeCT(ans>>16)
		if r := int(ans & 0xffff); r != 0 && r < len(StatNames()) {
			ex.Reason = StatNames()[r]
		}
	}
	return ex, nil
}

// probeAnswer finds the probe marker of cookie in frame (wherever
// encapsulation moved it) and returns the answer the program wrote in its
// id field.
func probeAnswer(frame []byte, cookie uint64) (uint32, bool) {
	m := tracer.ProbeMarker(cookie)
	for off := 0; off+len(m) <= len(frame); {
		i := bytes.Index(frame[off:], m[:8])
		if i < 0 || off+i+len(m) > len(frame) {
			return 0, false
		}
		at := frame[off+i:]
		if bytes.Equal(at[12:len(m)], m[12:]) {
			id := binary.BigEndian.Uint32(at[8:12])
			return id, id>>24 == uint32(xlbXlbProbeCtTRACE_PROBE_ANSWERED)
		}
		off += i + 1
	}
	return 0, false
}
