package throughput

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/xlbproject/xlb/internal/packet"

	"github.com/xlbproject/xlb/internal/state"
)

// Method is a forwarding method the harness can measure, as the config
// spells it.
type Method string

// Forwarding methods measured side by side (Options.Methods).
const (
	GRE Method = "gre" // the harness's default: every other figure is GRE's
	GUE Method = "gue"
	DR  Method = "dr"
	NAT Method = "nat" // the client's packets forward
	// NATReply: the backends' replies of NAT flows, Established traffic
	// only: flow i's reply from backend 10.0.1.1:natRealPort, its
	// xlb_nat entry written first as the forward path would (trackReplies).
	NATReply Method = "nat_reply"
)

// AllMethods lists the methods in report order.
func AllMethods() []Method { return []Method{GRE, GUE, DR, NAT, NATReply} }

// measures reports whether method m is measured with traffic t.
func (m Method) measures(t Traffic) bool { return m != NATReply || t == Established }

// Ports of the methods' frames in the harness.
const (
	guePort     = 6080 // Node.GUEPort
	natRealPort = 8080 // the reals' port with NAT
)

// drMAC is backend 10.0.1.b's own MAC for DR (gen_tput.h GEN_DR_MAC*).
func drMAC(b int) [6]byte { return [6]byte{0x02, 0x7a, 0x00, 0x00, 0x01, byte(b)} }

var methodEncap = map[Method]state.Encap{GRE: state.EncapGRE, GUE: state.EncapGUE, DR: state.EncapDR, NAT: state.EncapNAT,
	NATReply: state.EncapNAT}

var methodRx = map[Method]tputGenMethod{GRE: tputGenMethodGEN_M_GRE, GUE: tputGenMethodGEN_M_GUE,
	DR: tputGenMethodGEN_M_DR, NAT: tputGenMethodGEN_M_NAT, NATReply: tputGenMethodGEN_M_NAT_REPLY}

// txStat is the forwarder's counter of what method m sends.
func txStat(m Method) string {
	if m == NATReply {
		return "nat_reply"
	}
	return "forward_tx"
}

// be16 is how a BPF program on a little-endian CPU reads 2 wire bytes of v.
func be16(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.LittleEndian.Uint16(b[:])
}

// setMethod puts every real of the VIP on method m and has gen_count
// count what m sends to a backend.
func (h *harness) setMethod(m Method) error {
	if h.method == m {
		return nil
	}
	st, err := h.stateFor(m)
	if err != nil {
		return err
	}
	if _, err := h.dp.Apply(st); err != nil {
		return fmt.Errorf("apply state with method %s: %w", m, err)
	}
	if m == NATReply {
		if err := h.trackReplies(); err != nil {
			return err
		}
	}
	reply := uint32(0)
	if m == NATReply {
		reply = 1
	}
	for _, s := range []struct {
		name string
		set  func() error
	}{
		{"rx_method", func() error { return h.objs.RxMethod.Set(uint32(methodRx[m])) }},
		{"rx_gue_port", func() error { return h.objs.RxGuePort.Set(be16(guePort)) }},
		{"rx_nat_port", func() error { return h.objs.RxNatPort.Set(be16(natRealPort)) }},
		{"gen_reply", func() error { return h.objs.GenReply.Set(reply) }},
	} {
		if err := s.set(); err != nil {
			return fmt.Errorf("set %s: %w", s.name, err)
		}
	}
	h.method = m
	return nil
}

// measureMethods measures every traffic kind through the forwarder with
// each of o.Methods in turn: Runs passes, the methods in alternating order
// (first to last, then last to first), so that drift and neighbours over
// the passes weigh on all alike. GRE is measured again here, as the
// reference of the same passes. It ends with GRE back in place.
func (h *harness) measureMethods(ctx context.Context, res *Results) error {
	o := h.o
	figs := map[Method]map[Traffic]*Figure{}
	for _, m := range o.Methods {
		figs[m] = map[Traffic]*Figure{}
		for _, t := range o.Traffic {
			if m.measures(t) {
				figs[m][t] = &Figure{Traffic: t, Program: "xlb", Method: m}
			}
		}
	}
	for pass := range o.Runs {
		for i := range o.Methods {
			m := o.Methods[i]
			if pass%2 == 1 {
				m = o.Methods[len(o.Methods)-1-i]
			}
			if err := h.setMethod(m); err != nil {
				return err
			}
			for _, t := range o.Traffic {
				if !m.measures(t) {
					continue
				}
				r, err := h.run(ctx, t, h.xlb)
				if err != nil {
					return fmt.Errorf("method %s: %w", m, err)
				}
				figs[m][t].Runs = append(figs[m][t].Runs, r)
				o.Logf("%s %s %-11s method %-3s pass %d: %6.3f Mpps (cpu %.1f ns/pkt) %v", o.Mode, o.Placement, t, m, pass+1,
					r.Mpps, float64(r.CPU.Nanoseconds())/float64(r.Received), r.Forwarder)
			}
		}
	}
	for _, m := range o.Methods {
		for _, t := range o.Traffic {
			f, ok := figs[m][t]
			if !ok {
				continue
			}
			f.summarize(o.Placement == PlacementSplit)
			o.Logf("%s %s %-11s method %-3s: %.3f Mpps received, %.1f ns/pkt of cpu (one cpu: %.3f Mpps)",
				o.Mode, o.Placement, t, m, f.Mpps, f.CPUNs, f.CapacityMpps)
			res.Methods = append(res.Methods, *f)
		}
	}
	return h.setMethod(GRE)
}

// replyFrame is the reply of flow 0 of Established from backend 10.0.1.1
// (the generator writes each flow's client as the destination).
func replyFrame() []byte {
	f := packet.Flow{Src: natBackend, Dst: peer, SrcPort: natRealPort, DstPort: 40000, Proto: packet.ProtoTCP,
		TCPFlags: packet.ACK, Payload: make([]byte, 10), SrcMAC: [6]byte(genMAC), DstMAC: [6]byte(nodeMAC)}
	return f.Frame()
}

var natBackend = netip.MustParseAddr("10.0.1.1")

// trackReplies writes the xlb_nat entries (bpf/nat.h struct nat_key and
// nat_val) of the Established flows as the forward path writes them for
// a new flow: the reply's 5-tuple from backend 10.0.1.1:natRealPort to
// client i, to be sent from the VIP:vipPort, real 1.
func (h *harness) trackReplies() error {
	m, err := ebpf.LoadPinnedMap(filepath.Join(h.pinDir, "xlb_nat"), nil)
	if err != nil {
		return fmt.Errorf("open pinned xlb_nat: %w", err)
	}
	defer m.Close()
	key, val := make([]byte, 40), make([]byte, 24)
	copy(key[0:], natBackend.AsSlice())
	binary.BigEndian.PutUint16(key[32:], natRealPort)
	key[36], key[37] = packet.ProtoTCP, 4
	copy(val[0:], vip.AsSlice())
	binary.BigEndian.PutUint16(val[16:], vipPort)
	binary.LittleEndian.PutUint32(val[20:], 1)
	for i := range uint32(h.o.Flows) {
		binary.BigEndian.PutUint32(key[16:], baseEst+i>>15)
		binary.BigEndian.PutUint16(key[34:], 0x8000|uint16(i&0x7fff))
		if err := m.Put(key, val); err != nil {
			return fmt.Errorf("write the NAT flow of client %d: %w", i, err)
		}
	}
	return nil
}
