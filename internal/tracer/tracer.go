// Package tracer holds the packet tracer's wire formats
// (docs/ARCHITECTURE.md, Packet tracer; paper
// section 4.4): the marker a traced packet's TCP/UDP payload starts with
// (struct trace_marker in bpf/types.h), and the record a node sends to the
// marker's receiver as one UDP datagram of JSON. The layout is documented
// in docs/ARCHITECTURE.md ("Packet tracer").
package tracer

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// Marker constants, from enum xlb_trace_const in bpf/types.h (abi_gen.go).
const (
	Magic      = abiTRACE_MAGIC       // "XLBt": trace this packet
	ProbeMagic = abiTRACE_MAGIC_PROBE // "XLBp": a self-check probe of the node
	Version    = abiTRACE_VERSION
	MarkerLen  = abiTRACE_MARKER_LEN
)

// Marker names the receiver of a traced packet's records.
type Marker struct {
	ID       uint32         // chosen by the sender, echoed in the record
	Receiver netip.AddrPort // where the records go (UDP)
}

// Encode returns the marker's wire form:
//
//	0  magic "XLBt"        4 bytes
//	4  version (1)         1
//	5  family (4 or 6)     1   of the receiver address
//	6  receiver port       2   network order, not 0
//	8  id                  4   network order
//	12 receiver address    16  IPv4 in the first 4 bytes, the rest zero
func (m Marker) Encode() ([]byte, error) {
	a := m.Receiver.Addr().Unmap()
	if !a.IsValid() || m.Receiver.Port() == 0 {
		return nil, fmt.Errorf("tracer: receiver %s needs an address and a port", m.Receiver)
	}
	b := make([]byte, MarkerLen)
	binary.BigEndian.PutUint32(b[0:], Magic)
	b[4] = Version
	if a.Is4() {
		b[5] = abiXLB_AF_INET
		a4 := a.As4()
		copy(b[12:], a4[:])
	} else {
		b[5] = abiXLB_AF_INET6
		a16 := a.As16()
		copy(b[12:], a16[:])
	}
	binary.BigEndian.PutUint16(b[6:], m.Receiver.Port())
	binary.BigEndian.PutUint32(b[8:], m.ID)
	return b, nil
}

// ProbeMarker returns the marker of a self-check probe: the probe magic and
// the node's cookie (its bytes as they sit in node_info.probe_cookie, i.e.
// little-endian) in the address field; family and port are 0.
func ProbeMarker(cookie uint64) []byte {
	b := make([]byte, MarkerLen)
	binary.BigEndian.PutUint32(b[0:], ProbeMagic)
	b[4] = Version
	binary.LittleEndian.PutUint64(b[12:], cookie)
	return b
}

// ErrNotMarker is returned by Decode for a payload without a valid marker.
var ErrNotMarker = errors.New("tracer: no valid marker")

// Decode parses a tracer marker at the start of payload, with the checks
// the forwarder applies.
func Decode(payload []byte) (Marker, error) {
	if len(payload) < MarkerLen || binary.BigEndian.Uint32(payload) != Magic || payload[4] != Version {
		return Marker{}, ErrNotMarker
	}
	port := binary.BigEndian.Uint16(payload[6:])
	var a netip.Addr
	switch payload[5] {
	case abiXLB_AF_INET:
		for _, c := range payload[16:28] {
			if c != 0 {
				return Marker{}, ErrNotMarker
			}
		}
		a = netip.AddrFrom4([4]byte(payload[12:16]))
	case abiXLB_AF_INET6:
		a = netip.AddrFrom16([16]byte(payload[12:28]))
	default:
		return Marker{}, ErrNotMarker
	}
	if port == 0 {
		return Marker{}, ErrNotMarker
	}
	return Marker{ID: binary.BigEndian.Uint32(payload[8:]), Receiver: netip.AddrPortFrom(a, port)}, nil
}

// Record is what a node tells the receiver about one traced packet.
type Record struct {
	Version   int       `json:"version"` // RecordVersion
	ID        uint32    `json:"id"`      // the marker's
	Node      string    `json:"node"`    // node.name of the xlbd that saw it
	CPU       uint32    `json:"cpu"`
	Time      time.Time `json:"time"`  // when the forwarder handled it
	Proto     string    `json:"proto"` // tcp or udp
	Src       string    `json:"src"`   // client address:port
	VIP       string    `json:"vip"`   // VIP address:port
	Backend   string    `json:"backend,omitempty"`
	Conntrack string    `json:"conntrack"` // hit (tracked flow) or miss
	Verdict   string    `json:"verdict"`   // tx, redirect, drop, pass, aborted
	Reason    string    `json:"reason,omitempty"`
}

// RecordVersion is Record.Version of this build.
const RecordVersion = 1

// VerdictName names an XDP action.
func VerdictName(v uint32) string {
	switch v {
	case 0:
		return "aborted"
	case 1:
		return "drop"
	case 2:
		return "pass"
	case 3:
		return "tx"
	case 4:
		return "redirect"
	}
	return fmt.Sprintf("action-%d", v)
}

// ProtoName names an IP protocol number.
func ProtoName(p uint8) string {
	switch p {
	case 6:
		return "tcp"
	case 17:
		return "udp"
	}
	return fmt.Sprintf("proto-%d", p)
}

// Send sends r to the receiver as one UDP datagram.
func Send(r Record, to netip.AddrPort) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(to))
	if err != nil {
		return fmt.Errorf("tracer: send to %s: %w", to, err)
	}
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		return fmt.Errorf("tracer: send to %s: %w", to, err)
	}
	return nil
}

// Allowed tells whether a node sends records to a: never to unspecified,
// multicast or broadcast addresses (a marker could otherwise make every
// node flood a group).
func Allowed(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsValid() && !a.IsUnspecified() && !a.IsMulticast() &&
		!(a.Is4() && a == netip.AddrFrom4([4]byte{255, 255, 255, 255}))
}
