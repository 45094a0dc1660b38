package peersync

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// The rest of a flow's state (record types of their own, which receivers
// of older versions skip):
//
//	NAT (60 bytes):  family u8 | proto u8 | service port u16 | VIP 16 |
//	                 backend 16 | client 16 | client port u16 | VIP port u16 |
//	                 age u16 | 0 u16
//	LBLC (32 + 17n): family u8 | proto u8 | service port u16 | VIP 16 |
//	                 used age u32 | changed age u32 | n u8 | 0 u8 u16 |
//	                 n x (backend family u8 | backend 16)
//
// The service is named by its VIP key (address, port, proto) as in a flow
// record; all NAT addresses are of one family (NAT does not cross
// families); ages are conntrack ticks.
const (
	recNAT    = 4
	recLBLC   = 5
	natLen    = 60
	lblcHdr   = 32
	lblcMax   = 8 // backends in an lblcr set
	lblcEntry = 17
)

// NAT is a NAT flow's reply entry: replies from Backend (at its NAT port,
// or VIPPort) to Client:ClientPort go out from VIP:VIPPort. VIP, Port and
// Proto name the service as in Flow.
type NAT struct {
	VIP     netip.Addr
	Port    uint16
	Proto   uint8
	Backend netip.Addr
	Client  netip.Addr
	// ClientPort is the client's source port, VIPPort the port it sent
	// to (the service's, or any for a service of all ports).
	ClientPort, VIPPort uint16
	Age                 uint16 // conntrack ticks since the sender recorded the flow
}

// LBLC is an lblc or lblcr entry: the service's backends for its
// destination (the VIP address).
type LBLC struct {
	VIP      netip.Addr
	Port     uint16
	Proto    uint8
	Backends []netip.Addr // lblc: one; lblcr: the set, at most 8
	// Used and Modified: conntrack ticks since the sender last used the
	// entry and last changed its backends.
	Used, Modified uint32
}

// NATsPerMessage and LBLCsPerMessage are how many records of each kind
// one message carries at most.
const (
	NATsPerMessage  = (MaxMessage - headerLen - macLen) / (recHdrLen + natLen)
	LBLCsPerMessage = (MaxMessage - headerLen - macLen) / (recHdrLen + lblcHdr + lblcMax*lblcEntry)
)

func appendNAT(b []byte, n *NAT) []byte {
	b = append(b, recNAT, natLen, family(n.VIP), n.Proto)
	b = binary.BigEndian.AppendUint16(b, n.Port)
	b = appendAddr(b, n.VIP)
	b = appendAddr(b, n.Backend)
	b = appendAddr(b, n.Client)
	b = binary.BigEndian.AppendUint16(b, n.ClientPort)
	b = binary.BigEndian.AppendUint16(b, n.VIPPort)
	b = binary.BigEndian.AppendUint16(b, n.Age)
	return append(b, 0, 0)
}

func appendLBLC(b []byte, l *LBLC) []byte {
	b = append(b, recLBLC, byte(lblcHdr+lblcEntry*len(l.Backends)), family(l.VIP), l.Proto)
	b = binary.BigEndian.AppendUint16(b, l.Port)
	b = appendAddr(b, l.VIP)
	b = binary.BigEndian.AppendUint32(b, l.Used)
	b = binary.BigEndian.AppendUint32(b, l.Modified)
	b = append(b, byte(len(l.Backends)), 0, 0, 0)
	for _, a := range l.Backends {
		b = appendAddr(append(b, family(a)), a)
	}
	return b
}

// checkState refuses what Encode cannot write.
func checkState(m *Message) error {
	for _, n := range m.NATs {
		if family(n.Backend) != family(n.VIP) || family(n.Client) != family(n.VIP) {
			return fmt.Errorf("NAT flow %v -> %v via %v: addresses of two families", n.Client, n.VIP, n.Backend)
		}
	}
	for _, l := range m.LBLCs {
		if len(l.Backends) == 0 || len(l.Backends) > lblcMax {
			return fmt.Errorf("lblc entry of %v with %d backends (1 to %d)", l.VIP, len(l.Backends), lblcMax)
		}
	}
	return nil
}

func (m *Message) nat(b []byte) error {
	if len(b) != natLen {
		return fmt.Errorf("NAT record of %d bytes, want %d", len(b), natLen)
	}
	n := NAT{Proto: b[1], Port: binary.BigEndian.Uint16(b[2:]), ClientPort: binary.BigEndian.Uint16(b[52:]),
		VIPPort: binary.BigEndian.Uint16(b[54:]), Age: binary.BigEndian.Uint16(b[56:])}
	var ok1, ok2, ok3 bool
	n.VIP, ok1 = addrOf(b[0], b[4:20])
	n.Backend, ok2 = addrOf(b[0], b[20:36])
	n.Client, ok3 = addrOf(b[0], b[36:52])
	switch {
	case !ok1 || !ok2 || !ok3:
		return errors.New("bad address family or IPv4 address with stray bytes")
	case n.Proto != 6 && n.Proto != 17:
		return fmt.Errorf("protocol %d", n.Proto)
	case b[58] != 0 || b[59] != 0:
		return errors.New("reserved bytes set")
	}
	m.NATs = append(m.NATs, n)
	return nil
}

func (m *Message) lblc(b []byte) error {
	if len(b) < lblcHdr {
		return fmt.Errorf("lblc record of %d bytes", len(b))
	}
	l := LBLC{Proto: b[1], Port: binary.BigEndian.Uint16(b[2:]), Used: binary.BigEndian.Uint32(b[20:]),
		Modified: binary.BigEndian.Uint32(b[24:])}
	var ok bool
	if l.VIP, ok = addrOf(b[0], b[4:20]); !ok {
		return errors.New("bad address family or IPv4 address with stray bytes")
	}
	k := int(b[28])
	switch {
	case l.Proto != 6 && l.Proto != 17:
		return fmt.Errorf("protocol %d", l.Proto)
	case k == 0 || k > lblcMax || len(b) != lblcHdr+k*lblcEntry:
		return fmt.Errorf("lblc record of %d bytes with %d backends", len(b), k)
	case b[29] != 0 || b[30] != 0 || b[31] != 0:
		return errors.New("reserved bytes set")
	}
	for i := range k {
		e := b[lblcHdr+i*lblcEntry:]
		a, ok := addrOf(e[0], e[1:17])
		if !ok {
			return fmt.Errorf("backend %d: bad address family or IPv4 address with stray bytes", i)
		}
		l.Backends = append(l.Backends, a)
	}
	m.LBLCs = append(m.LBLCs, l)
	return nil
}
