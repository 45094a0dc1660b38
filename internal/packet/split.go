package packet

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// SplitFrame splits the IPv4 datagram of frame (Ethernet, up to two VLAN
// tags) into frames of the same L2 header whose IP datagrams are at most
// maxIP bytes (RFC 791 fragmentation: offsets in 8-byte units, MF on all
// but the last, the original's MF and offset kept, options whose copied
// flag is set repeated in every piece). The forwarder's fragment holder
// splits with it the datagrams too big for their backend's egress.
func SplitFrame(frame []byte, maxIP int) ([][]byte, error) {
	l3, err := l2Len(frame)
	if err != nil {
		return nil, err
	}
	ip := frame[l3:]
	if len(ip) < 20 || ip[0]>>4 != 4 {
		return nil, errors.New("not an IPv4 datagram")
	}
	hl, tot := int(ip[0]&0xf)*4, int(binary.BigEndian.Uint16(ip[2:]))
	if hl < 20 || tot < hl || tot > len(ip) {
		return nil, errors.New("IPv4 header lengths beyond the frame")
	}
	fo := binary.BigEndian.Uint16(ip[6:])
	if fo&0x4000 != 0 {
		return nil, errors.New("DF set: may not be fragmented")
	}
	data := ip[hl:tot]
	later := copiedOptions(ip[20:hl])
	var out [][]byte
	for off := 0; off < len(data); {
		h := hl
		if off > 0 {
			h = 20 + len(later)
		}
		size := (maxIP - h) &^ 7
		if size < 8 {
			return nil, fmt.Errorf("MTU %d leaves no room for data", maxIP)
		}
		end := min(off+size, len(data))
		piece := make([]byte, 0, l3+h+end-off)
		piece = append(piece, frame[:l3]...)
		piece = append(piece, ip[:20]...)
		if off == 0 {
			piece = append(piece, ip[20:hl]...)
		} else {
			piece = append(piece, later...)
		}
		piece = append(piece, data[off:end]...)
		p := piece[l3:]
		p[0] = 0x40 | byte(h/4)
		binary.BigEndian.PutUint16(p[2:], uint16(h+end-off))
		nfo := fo&0x1fff + uint16(off/8)
		if end < len(data) || fo&0x2000 != 0 {
			nfo |= 0x2000
		}
		binary.BigEndian.PutUint16(p[6:], nfo)
		binary.BigEndian.PutUint16(p[10:], 0)
		binary.BigEndian.PutUint16(p[10:], Checksum(p[:h]))
		out = append(out, piece)
		off = end
	}
	return out, nil
}

// l2Len is the length of frame's Ethernet header with its VLAN tags.
func l2Len(frame []byte) (int, error) {
	for off := 14; off <= 22 && len(frame) >= off; off += 4 {
		switch binary.BigEndian.Uint16(frame[off-2:]) {
		case 0x0800:
			return off, nil
		case 0x8100, 0x88a8:
		default:
			return 0, errors.New("not an IPv4 frame")
		}
	}
	return 0, errors.New("not an IPv4 frame")
}

// copiedOptions returns the IPv4 options whose copied flag is set, padded
// to a multiple of 4 bytes (end of list).
func copiedOptions(opts []byte) []byte {
	var out []byte
	for i := 0; i < len(opts); {
		t := opts[i]
		if t == 0 { // end of list
			break
		}
		if t == 1 { // no operation
			i++
			continue
		}
		if i+1 >= len(opts) || opts[i+1] < 2 || i+int(opts[i+1]) > len(opts) {
			break
		}
		n := int(opts[i+1])
		if t&0x80 != 0 {
			out = append(out, opts[i:i+n]...)
		}
		i += n
	}
	for len(out)%4 != 0 {
		out = append(out, 0)
	}
	return out
}
