package harness

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/state"
)

// The first backend of each family in benchState, which the NAT reply
// scenarios' replies come from.
var (
	natBackend4 = netip.MustParseAddr("10.0.1.1")
	natBackend6 = netip.MustParseAddr("fd00:1::1")
)

// natReplyOf is the reply to the client's flow f from the first backend
// of its family, on natBackendPort.
func natReplyOf(f packet.Flow) packet.Flow {
	r := f
	r.Src, r.SrcPort, r.Dst, r.DstPort = natBackend4, natBackendPort, f.Src, f.SrcPort
	if f.Dst.Is6() {
		r.Src = natBackend6
	}
	return r
}

// trackNAT writes the xlb_nat entries (bpf/nat.h, struct nat_key and
// nat_val) of the NAT flows whose replies scenario sc sends, as the
// forward path would have: from the backend to the client, for the VIP of
// the reply's family on port 80, with benchState's real id of the
// backend. flows > 0: one per client whose address ends in base + i (the
// wrapper's numbering at sc.varOff), else the template's client.
func (h *harness) trackNAT(sc scenario, base, flows uint32) error {
	if h.o.Method != state.EncapNAT {
		return errors.New("bench: NAT reply scenarios need Options.Method nat")
	}
	m, err := ebpf.LoadPinnedMap(filepath.Join(h.pinDir, "xlb_nat"), nil)
	if err != nil {
		return fmt.Errorf("open pinned xlb_nat: %w", err)
	}
	defer m.Close()
	reply := sc.flow
	key, val := make([]byte, 40), make([]byte, 24)
	fam, vip, rid := byte(4), vip4, uint32(1)
	if reply.Src.Is6() {
		// benchState numbers the reals service by service: TCP v4, UDP v4, TCP v6
		fam, vip, rid = 6, vip6, uint32(2*h.o.Backends+1)
	}
	copy(key[0:], reply.Src.AsSlice())
	copy(key[16:], reply.Dst.AsSlice())
	binary.BigEndian.PutUint16(key[32:], reply.SrcPort)
	binary.BigEndian.PutUint16(key[34:], reply.DstPort)
	key[36], key[37] = reply.Proto, fam
	copy(val[0:], vip.AsSlice())
	binary.BigEndian.PutUint16(val[16:], vipTCP4.Port)
	binary.LittleEndian.PutUint32(val[20:], rid)
	// the client's last 4 address bytes in the key, as the wrapper varies them
	tail := 16 + reply.Dst.BitLen()/8 - 4
	for i := uint32(0); i < max(flows, 1); i++ {
		if flows > 0 {
			binary.BigEndian.PutUint32(key[tail:], base+i)
		}
		if err := m.Put(key, val); err != nil {
			return fmt.Errorf("write the NAT flow of %v: %w", reply, err)
		}
	}
	return nil
}
