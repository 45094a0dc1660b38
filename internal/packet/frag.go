package packet

import "encoding/binary"

// Fragment splits f's IP datagram into fragments (RFC 791 / RFC 8200 4.5)
// whose fragmentable part holds at most size bytes (rounded down to a
// multiple of 8). id is the IPv4 identification (low 16 bits) or the IPv6
// one. IPv6: f's extension headers stay in every fragment, in front of the
// fragment header. The fragments are IP datagrams, in order.
func Fragment(f Flow, id uint32, size int) [][]byte {
	size &^= 7
	if size < 8 {
		size = 8
	}
	ttl := f.TTL
	if ttl == 0 {
		ttl = 64
	}
	data := f.L4()
	var out [][]byte
	for off := 0; off < len(data); off += size {
		end := min(off+size, len(data))
		more := end < len(data)
		if f.Src.Is4() {
			ip := IPv4(f.Src, f.Dst, f.Proto, f.TOS, ttl, f.IPv4Options, data[off:end])
			hl := int(ip[0]&0xf) * 4
			binary.BigEndian.PutUint16(ip[4:], uint16(id))
			fo := uint16(off / 8)
			if more {
				fo |= 0x2000
			}
			binary.BigEndian.PutUint16(ip[6:], fo)
			binary.BigEndian.PutUint16(ip[10:], 0)
			binary.BigEndian.PutUint16(ip[10:], Checksum(ip[:hl]))
			out = append(out, ip)
			continue
		}
		body := make([]byte, 6)
		fo := uint16(off/8) << 3
		if more {
			fo |= 1
		}
		binary.BigEndian.PutUint16(body, fo)
		binary.BigEndian.PutUint32(body[2:], id)
		ext := append(append([]ExtHeader(nil), f.IPv6ExtHeaders...), ExtHeader{Type: 44, Body: body})
		out = append(out, IPv6(f.Src, f.Dst, f.Proto, f.TOS, ttl, ext, data[off:end]))
	}
	return out
}
