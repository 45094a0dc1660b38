// Package peersync is connection sync between the nodes of a cluster
// (docs/ARCHITECTURE.md, Connection sync): each node sends the decisions
// its forwarder takes for new flows to its peers, which install them in
// their own connection tables, so a flow the routers move to another node
// keeps its backend. Messages are UDP datagrams authenticated with a
// shared key (HMAC-SHA256), numbered against replay.
package peersync

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// The wire format, version 1 (all integers big-endian):
//
//	header (32 bytes): "XLBS" | version u8 | type u8 | flags u16 |
//	                   seq u64 | send time u64 (Unix ns) | records u16 | payload length u16 | 0 u32
//	payload: records, each type u8 | length u8 | body (length bytes)
//	trailer: HMAC-SHA256(key, header | payload), 32 bytes
//
// A receiver skips records of types it does not know (counted), so later
// record types (NAT, persistence state) need no new version.
const (
	Version    = 1
	headerLen  = 32
	macLen     = sha256.Size
	MaxMessage = 1400 // bytes: fits an Ethernet MTU with IP and UDP headers
	flowLen    = 50   // a flow record's body
	recHdrLen  = 2
	// FlowsPerMessage is how many flow records one message carries.
	FlowsPerMessage = (MaxMessage - headerLen - macLen) / (recHdrLen + flowLen)
)

var magic = [4]byte{'X', 'L', 'B', 'S'}

// MsgType is a message's kind.
type MsgType uint8

// Message kinds.
const (
	MsgFlows       MsgType = 1 // flow records (live decisions, or a bulk copy's)
	MsgBulkRequest MsgType = 2 // "send me your table": a joining or restarted node
	MsgBulkEnd     MsgType = 3 // the end of a bulk copy
	MsgHello       MsgType = 4 // the sender's status: node, config version, fingerprint
)

// Record types.
const (
	recFlow     = 1
	recHello    = 2
	recTemplate = 3 // a flow record's body, read as a template (Flow.Template)
)

// Flow is one flow's decision, in terms every node understands: the
// service's VIP and the backend's address, not node-local ids.
type Flow struct {
	VIP     netip.Addr
	Port    uint16
	Proto   uint8
	Backend netip.Addr
	Hash    uint64 // flow hash v1
	// HashBits is how many low bits of Hash are known: 64 for a live
	// decision; a bulk copy, read from a connection table that keeps only
	// the tag and bucket, knows the sender's bucket bits.
	HashBits uint8
	State    uint8  // conntrack state: 1 SYN, 2 established, 3 closing
	Age      uint16 // conntrack ticks since the sender last saw the flow
	// Template: the record is a persistence template, not a flow: Hash
	// is the client's source hash (its address under the service's
	// persistence netmask, the same on every node), Age the ticks the
	// template lives on, State 0, HashBits 64. Sent as its own record
	// type, which older receivers skip.
	Template bool
}

// Hello is a node's status as its peers see it.
type Hello struct {
	Node          string
	ConfigVersion string
	Fingerprint   uint64 // of the committed tables (fingerprint.go)
	Services      uint32
}

// Message is a decoded message.
type Message struct {
	Type    MsgType
	Seq     uint64
	Time    int64 // the sender's clock at sending, Unix ns
	Flows   []Flow
	Hello   *Hello
	Unknown int // records of unknown types, skipped
}

// Reasons a message is refused.
var (
	ErrSize    = errors.New("message too short or too long")
	ErrMagic   = errors.New("not a sync message")
	ErrVersion = errors.New("another protocol version")
	ErrAuth    = errors.New("authentication failed")
	ErrFormat  = errors.New("malformed payload")
)

// Encode writes m, authenticated with key. Too many flows or too long a
// hello is an error (the caller batches by FlowsPerMessage).
func Encode(key []byte, m *Message) ([]byte, error) {
	b := make([]byte, headerLen, MaxMessage)
	copy(b, magic[:])
	b[4], b[5] = Version, byte(m.Type)
	binary.BigEndian.PutUint64(b[8:], m.Seq)
	binary.BigEndian.PutUint64(b[16:], uint64(m.Time))
	n := 0
	for i := range m.Flows {
		b = appendFlow(b, &m.Flows[i])
		n++
	}
	if m.Hello != nil {
		h := m.Hello
		if len(h.Node) > 64 || len(h.ConfigVersion) > 64 {
			return nil, fmt.Errorf("hello: node name or config version longer than 64 bytes")
		}
		b = append(b, recHello, byte(2+len(h.Node)+len(h.ConfigVersion)+12))
		b = append(b, byte(len(h.Node)))
		b = append(b, h.Node...)
		b = append(b, byte(len(h.ConfigVersion)))
		b = append(b, h.ConfigVersion...)
		b = binary.BigEndian.AppendUint64(b, h.Fingerprint)
		b = binary.BigEndian.AppendUint32(b, h.Services)
		n++
	}
	if len(b)+macLen > MaxMessage {
		return nil, fmt.Errorf("message of %d bytes: at most %d (%d flows)", len(b)+macLen, MaxMessage, FlowsPerMessage)
	}
	binary.BigEndian.PutUint16(b[24:], uint16(n))
	binary.BigEndian.PutUint16(b[26:], uint16(len(b)-headerLen))
	return appendMAC(key, b), nil
}

// appendMAC appends the HMAC of b under key.
func appendMAC(key, b []byte) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write(b)
	return mac.Sum(b)
}

func appendFlow(b []byte, f *Flow) []byte {
	typ := byte(recFlow)
	if f.Template {
		typ = recTemplate
	}
	b = append(b, typ, flowLen, family(f.VIP), f.Proto)
	b = binary.BigEndian.AppendUint16(b, f.Port)
	b = appendAddr(b, f.VIP)
	b = append(b, family(f.Backend), f.State, f.HashBits, 0)
	b = binary.BigEndian.AppendUint16(b, f.Age)
	b = appendAddr(b, f.Backend)
	return binary.BigEndian.AppendUint64(b, f.Hash)
}

// appendAddr writes a 16-byte address field: IPv4 in the first 4 bytes.
func appendAddr(b []byte, a netip.Addr) []byte {
	if a.Is4() {
		v := a.As4()
		return append(append(b, v[:]...), make([]byte, 12)...)
	}
	v := a.As16()
	return append(b, v[:]...)
}

func family(a netip.Addr) byte {
	if a.Is4() {
		return 4
	}
	return 6
}

// addrOf reads a 16-byte address field of family fam.
func addrOf(fam byte, b []byte) (netip.Addr, bool) {
	switch fam {
	case 4:
		for _, x := range b[4:16] {
			if x != 0 {
				return netip.Addr{}, false
			}
		}
		return netip.AddrFrom4([4]byte(b[:4])), true
	case 6:
		return netip.AddrFrom16([16]byte(b[:16])), true
	}
	return netip.Addr{}, false
}

// Decode checks b's size, magic, version and authentication, then reads
// it. Nothing is read from a message that fails authentication.
func Decode(key []byte, b []byte) (*Message, error) {
	if len(b) < headerLen+macLen || len(b) > MaxMessage {
		return nil, fmt.Errorf("%w: %d bytes", ErrSize, len(b))
	}
	if [4]byte(b[:4]) != magic {
		return nil, ErrMagic
	}
	if b[4] != Version {
		return nil, fmt.Errorf("%w: %d, this node speaks %d", ErrVersion, b[4], Version)
	}
	body, sum := b[:len(b)-macLen], b[len(b)-macLen:]
	mac := hmac.New(sha256.New, key)
	mac.Write(body)
	if !hmac.Equal(mac.Sum(nil), sum) {
		return nil, ErrAuth
	}
	m := &Message{Type: MsgType(b[5]), Seq: binary.BigEndian.Uint64(b[8:]), Time: int64(binary.BigEndian.Uint64(b[16:]))}
	if m.Type < MsgFlows || m.Type > MsgHello {
		return nil, fmt.Errorf("%w: message type %d", ErrFormat, m.Type)
	}
	if binary.BigEndian.Uint16(b[6:]) != 0 || binary.BigEndian.Uint32(b[28:]) != 0 {
		return nil, fmt.Errorf("%w: flags or reserved bytes set (version %d has none)", ErrFormat, Version)
	}
	count, plen := int(binary.BigEndian.Uint16(b[24:])), int(binary.BigEndian.Uint16(b[26:]))
	if plen != len(body)-headerLen {
		return nil, fmt.Errorf("%w: payload length %d, message has %d", ErrFormat, plen, len(body)-headerLen)
	}
	if err := m.records(body[headerLen:], count); err != nil {
		return nil, err
	}
	return m, nil
}

// records reads count records from p, which they must fill exactly.
func (m *Message) records(p []byte, count int) error {
	for i := 0; i < count; i++ {
		if len(p) < recHdrLen || len(p) < recHdrLen+int(p[1]) {
			return fmt.Errorf("%w: record %d runs past the payload", ErrFormat, i)
		}
		typ, body := p[0], p[recHdrLen:recHdrLen+int(p[1])]
		p = p[recHdrLen+int(p[1]):]
		var err error
		switch typ {
		case recFlow:
			err = m.flow(body, false)
		case recTemplate:
			err = m.flow(body, true)
		case recHello:
			err = m.hello(body)
		default:
			m.Unknown++
		}
		if err != nil {
			return fmt.Errorf("%w: record %d: %v", ErrFormat, i, err)
		}
	}
	if len(p) != 0 {
		return fmt.Errorf("%w: %d bytes after %d records", ErrFormat, len(p), count)
	}
	return nil
}

func (m *Message) flow(b []byte, template bool) error {
	if len(b) != flowLen {
		return fmt.Errorf("flow record of %d bytes, want %d", len(b), flowLen)
	}
	f := Flow{Proto: b[1], Port: binary.BigEndian.Uint16(b[2:]), State: b[21], HashBits: b[22],
		Age: binary.BigEndian.Uint16(b[24:]), Hash: binary.BigEndian.Uint64(b[42:]), Template: template}
	var ok1, ok2 bool
	f.VIP, ok1 = addrOf(b[0], b[4:20])
	f.Backend, ok2 = addrOf(b[20], b[26:42])
	switch {
	case !ok1 || !ok2:
		return errors.New("bad address family or IPv4 address with stray bytes")
	case f.Proto != 6 && f.Proto != 17:
		return fmt.Errorf("protocol %d", f.Proto)
	case template && (f.State != 0 || f.HashBits != 64 || f.Age == 0):
		return fmt.Errorf("template with state %d, %d hash bits, %d ticks to live (want 0, 64, > 0)", f.State, f.HashBits, f.Age)
	case !template && (f.State < 1 || f.State > 3):
		return fmt.Errorf("conntrack state %d", f.State)
	case b[23] != 0:
		return errors.New("reserved byte set")
	case f.HashBits > 64:
		return fmt.Errorf("%d hash bits", f.HashBits)
	}
	m.Flows = append(m.Flows, f)
	return nil
}

func (m *Message) hello(b []byte) error {
	if m.Hello != nil {
		return errors.New("a second hello")
	}
	if len(b) < 1 || len(b) < 1+int(b[0])+1 {
		return errors.New("hello too short")
	}
	h := &Hello{Node: string(b[1 : 1+b[0]])}
	b = b[1+b[0]:]
	if len(b) != 1+int(b[0])+12 {
		return errors.New("hello of the wrong length")
	}
	h.ConfigVersion = string(b[1 : 1+b[0]])
	b = b[1+b[0]:]
	h.Fingerprint, h.Services = binary.BigEndian.Uint64(b), binary.BigEndian.Uint32(b[8:])
	m.Hello = h
	return nil
}
