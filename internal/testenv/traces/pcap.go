// Package traces reads the packet captures of testdata/traces (classic libpcap files,
// the 5-tuples of their TCP/UDP packets) for tests that replay real traffic
// (internal/datapath) and for the flow-hash study (bench/study): FindDir
// locates them, PcapReader and ParseTuple read them, ReadDir gives each
// file's distinct flows.
package traces

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/xlbproject/xlb/internal/maglev"
)

// Link types (the LINKTYPE_ values of the pcap file format) that
// ParseTuple understands.
const (
	LinkTypeEthernet  = 1   // IEEE 802.3 Ethernet, with up to 3 VLAN tags
	LinkTypeRaw       = 101 // raw IPv4 or IPv6, version from the first nibble
	LinkTypeLinuxSLL  = 113 // Linux "cooked" capture v1, 16-byte header
	LinkTypeIPv4      = 228 // raw IPv4
	LinkTypeIPv6      = 229 // raw IPv6
	LinkTypeLinuxSLL2 = 276 // Linux "cooked" capture v2, 20-byte header
)

// Errors of the pcap reader. ReadPcapFlows counts the per-packet ones
// (ErrNotIP ... ErrMalformed) and skips the packet; the others end the file.
var (
	ErrNotPcap   = errors.New("not a classic libpcap file")
	ErrPcapNG    = errors.New("pcapng file (only classic libpcap is read; convert it with: editcap -F pcap in.pcapng out.pcap)")
	ErrBadRecord = errors.New("corrupt pcap record")
	ErrLinkType  = errors.New("unsupported link type")
	ErrNotIP     = errors.New("not IPv4 or IPv6")
	ErrNotTCPUDP = errors.New("IP but not TCP or UDP")
	ErrFragment  = errors.New("non-first IP fragment")
	ErrTruncated = errors.New("truncated header")
	ErrMalformed = errors.New("malformed header")
	ErrNoTraces  = errors.New("no trace directory")
)

// maxRecordLength bounds one record (16 MiB): a longer one is a corrupt file.
const maxRecordLength = 1 << 24

// Magic numbers of the classic libpcap file header, as read in the file's
// own byte order.
const (
	magicMicro = 0xa1b2c3d4
	magicNano  = 0xa1b23c4d
	magicNG    = 0x0a0d0d0a
)

// PcapReader reads a classic libpcap file:
//
//	file header, 24 bytes                 record header, 16 bytes
//	+-------+-------+-------+-------+     +-------+-------+-------+-------+
//	| magic | major | minor | zone  |     | sec   | usec or nsec  |caplen |
//	|  4    |  2    |  2    |  4    |     |  4    |  4            |  4    |
//	+-------+-------+-------+-------+     +-------+-------+-------+-------+
//	| sigfigs 4 | snaplen 4 | link 4|     | origlen 4 | caplen bytes ...  |
//
// in either byte order (the magic says which), with microsecond or
// nanosecond timestamps. The low 16 bits of the link field are the link
// type.
type PcapReader struct {
	r        *bufio.Reader
	order    binary.ByteOrder
	nano     bool
	linkType uint32
	snaplen  uint32
	hdr      [16]byte
	buf      []byte
}

// Record is one captured packet. Data is valid until the next call to
// Next.
type Record struct {
	Time    time.Time
	OrigLen int
	Data    []byte
}

// NewPcapReader reads the file header from r. It wraps ErrPcapNG for a
// pcapng file and ErrNotPcap for anything else that is not classic pcap.
func NewPcapReader(r io.Reader) (*PcapReader, error) {
	p := &PcapReader{r: bufio.NewReaderSize(r, 1<<16)}
	var h [24]byte
	if _, err := io.ReadFull(p.r, h[:]); err != nil {
		return nil, fmt.Errorf("pcap file header: %w: %w", ErrNotPcap, err)
	}
	switch le, be := binary.LittleEndian.Uint32(h[:4]), binary.BigEndian.Uint32(h[:4]); {
	case le == magicMicro || le == magicNano:
		p.order, p.nano = binary.LittleEndian, le == magicNano
	case be == magicMicro || be == magicNano:
		p.order, p.nano = binary.BigEndian, be == magicNano
	case le == magicNG:
		return nil, ErrPcapNG
	default:
		return nil, fmt.Errorf("magic %#08x: %w", be, ErrNotPcap)
	}
	p.snaplen = p.order.Uint32(h[16:20])
	p.linkType = p.order.Uint32(h[20:24]) & 0xffff
	return p, nil
}

// LinkType returns the file's link type (LINKTYPE_ value).
func (p *PcapReader) LinkType() uint32 { return p.linkType }

// Next returns the next record, io.EOF after the last one, and an error
// wrapping io.ErrUnexpectedEOF for a file cut inside a record or
// ErrBadRecord for a record longer than 16 MiB.
func (p *PcapReader) Next() (Record, error) {
	if _, err := io.ReadFull(p.r, p.hdr[:]); err != nil {
		if err == io.EOF {
			return Record{}, io.EOF
		}
		return Record{}, fmt.Errorf("pcap record header: %w", io.ErrUnexpectedEOF)
	}
	sec, frac := p.order.Uint32(p.hdr[0:4]), p.order.Uint32(p.hdr[4:8])
	capLen, origLen := p.order.Uint32(p.hdr[8:12]), p.order.Uint32(p.hdr[12:16])
	if capLen > maxRecordLength {
		return Record{}, fmt.Errorf("record of %d bytes: %w", capLen, ErrBadRecord)
	}
	if cap(p.buf) < int(capLen) {
		p.buf = make([]byte, capLen)
	}
	p.buf = p.buf[:capLen]
	if _, err := io.ReadFull(p.r, p.buf); err != nil {
		return Record{}, fmt.Errorf("pcap record of %d bytes: %w", capLen, io.ErrUnexpectedEOF)
	}
	ns := int64(frac)
	if !p.nano {
		ns *= 1000
	}
	return Record{Time: time.Unix(int64(sec), ns).UTC(), OrigLen: int(origLen), Data: p.buf}, nil
}

// ParseTuple extracts the 5-tuple of a TCP or UDP packet captured with link
// type linkType. Ethernet frames may carry up to three 802.1Q/802.1ad tags;
// IPv4 options and IPv6 extension headers (hop-by-hop, routing, fragment,
// destination options, AH, mobility; at most 8) are skipped. The TCP or UDP
// header must be complete. Addresses are as on the wire (an IPv4-mapped
// IPv6 address stays IPv6). It returns ErrLinkType, ErrNotIP,
// ErrNotTCPUDP, ErrFragment (a fragment other than the first), ErrTruncated
// or ErrMalformed for a packet it cannot take a 5-tuple from.
func ParseTuple(linkType uint32, frame []byte) (maglev.Tuple, error) {
	var etype uint16
	var l3 []byte
	switch linkType {
	case LinkTypeEthernet:
		if len(frame) < 14 {
			return maglev.Tuple{}, ErrTruncated
		}
		etype, l3 = binary.BigEndian.Uint16(frame[12:14]), frame[14:]
		for tags := 0; etype == 0x8100 || etype == 0x88a8 || etype == 0x9100; tags++ {
			if tags == 3 {
				return maglev.Tuple{}, ErrMalformed
			}
			if len(l3) < 4 {
				return maglev.Tuple{}, ErrTruncated
			}
			etype, l3 = binary.BigEndian.Uint16(l3[2:4]), l3[4:]
		}
	case LinkTypeLinuxSLL:
		if len(frame) < 16 {
			return maglev.Tuple{}, ErrTruncated
		}
		etype, l3 = binary.BigEndian.Uint16(frame[14:16]), frame[16:]
	case LinkTypeLinuxSLL2:
		if len(frame) < 20 {
			return maglev.Tuple{}, ErrTruncated
		}
		etype, l3 = binary.BigEndian.Uint16(frame[0:2]), frame[20:]
	case LinkTypeRaw, LinkTypeIPv4, LinkTypeIPv6:
		if len(frame) < 1 {
			return maglev.Tuple{}, ErrTruncated
		}
		l3 = frame
		switch frame[0] >> 4 {
		case 4:
			etype = 0x0800
		case 6:
			etype = 0x86dd
		}
	default:
		return maglev.Tuple{}, fmt.Errorf("link type %d: %w", linkType, ErrLinkType)
	}
	switch etype {
	case 0x0800:
		return parseIPv4(l3)
	case 0x86dd:
		return parseIPv6(l3)
	}
	return maglev.Tuple{}, ErrNotIP
}

// parseIPv4 parses an IPv4 header (with options) and the ports after it.
func parseIPv4(b []byte) (maglev.Tuple, error) {
	if len(b) < 20 {
		return maglev.Tuple{}, ErrTruncated
	}
	ihl := int(b[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(b[2:4]))
	if b[0]>>4 != 4 || ihl < 20 || total < ihl {
		return maglev.Tuple{}, ErrMalformed
	}
	if len(b) < ihl {
		return maglev.Tuple{}, ErrTruncated
	}
	if binary.BigEndian.Uint16(b[6:8])&0x1fff != 0 {
		return maglev.Tuple{}, ErrFragment
	}
	// Trailing link-layer padding is not IP payload; a capture cut by the
	// snap length keeps what it has.
	l4 := b[ihl:min(total, len(b))]
	src := netip.AddrFrom4([4]byte(b[12:16]))
	dst := netip.AddrFrom4([4]byte(b[16:20]))
	return parsePorts(src, dst, b[9], l4)
}

// parseIPv6 parses an IPv6 header and its extension headers.
func parseIPv6(b []byte) (maglev.Tuple, error) {
	if len(b) < 40 {
		return maglev.Tuple{}, ErrTruncated
	}
	if b[0]>>4 != 6 {
		return maglev.Tuple{}, ErrMalformed
	}
	src := netip.AddrFrom16([16]byte(b[8:24]))
	dst := netip.AddrFrom16([16]byte(b[24:40]))
	next := b[6]
	rest := b[40:min(40+int(binary.BigEndian.Uint16(b[4:6])), len(b))]
	for ext := 0; ; ext++ {
		var n int
		switch next {
		case 0, 43, 60, 135: // hop-by-hop, routing, destination options, mobility
			if len(rest) < 2 {
				return maglev.Tuple{}, ErrTruncated
			}
			n = (int(rest[1]) + 1) * 8
		case 44: // fragment
			if len(rest) < 8 {
				return maglev.Tuple{}, ErrTruncated
			}
			if binary.BigEndian.Uint16(rest[2:4])>>3 != 0 {
				return maglev.Tuple{}, ErrFragment
			}
			n = 8
		case 51: // authentication header
			if len(rest) < 2 {
				return maglev.Tuple{}, ErrTruncated
			}
			n = (int(rest[1]) + 2) * 4
		default:
			return parsePorts(src, dst, next, rest)
		}
		if ext == 8 {
			return maglev.Tuple{}, ErrMalformed
		}
		if len(rest) < n {
			return maglev.Tuple{}, ErrTruncated
		}
		next, rest = rest[0], rest[n:]
	}
}

// parsePorts reads the ports of a complete TCP (20+ bytes, data offset at
// least 5) or UDP (8 bytes) header.
func parsePorts(src, dst netip.Addr, proto uint8, l4 []byte) (maglev.Tuple, error) {
	switch proto {
	case 6:
		if len(l4) < 20 {
			return maglev.Tuple{}, ErrTruncated
		}
		if l4[12]>>4 < 5 {
			return maglev.Tuple{}, ErrMalformed
		}
	case 17:
		if len(l4) < 8 {
			return maglev.Tuple{}, ErrTruncated
		}
	default:
		return maglev.Tuple{}, ErrNotTCPUDP
	}
	return maglev.Tuple{
		Src: src, Dst: dst,
		SrcPort: binary.BigEndian.Uint16(l4[0:2]),
		DstPort: binary.BigEndian.Uint16(l4[2:4]),
		Proto:   proto,
	}, nil
}

// FlowFile is what ReadPcapFlows found in one capture.
type FlowFile struct {
	Name     string `json:"name"` // base name of the file
	LinkType uint32 `json:"link_type"`
	Packets  int    `json:"packets"`
	// Parsed is the number of packets with a TCP or UDP 5-tuple.
	Parsed int `json:"parsed"`
	// Skipped counts the other packets by reason (the error text of
	// ParseTuple's sentinel errors).
	Skipped map[string]int `json:"skipped,omitempty"`
	// Flows are the distinct 5-tuples, in order of first appearance.
	Flows []maglev.Tuple `json:"-"`
}

// ReadPcapFlows reads the classic libpcap file at path and returns its
// distinct TCP/UDP 5-tuples. Packets that ParseTuple cannot use are counted
// in Skipped, not failed. It fails for a file that is not classic pcap, has
// an unsupported link type, or is cut inside a record.
func ReadPcapFlows(path string) (FlowFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return FlowFile{}, err
	}
	defer f.Close()
	pr, err := NewPcapReader(f)
	if err != nil {
		return FlowFile{}, fmt.Errorf("%s: %w", path, err)
	}
	ff := FlowFile{Name: filepath.Base(path), LinkType: pr.LinkType(), Skipped: map[string]int{}}
	seen := map[maglev.Tuple]bool{}
	for {
		rec, err := pr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return FlowFile{}, fmt.Errorf("%s, after %d packets: %w", path, ff.Packets, err)
		}
		ff.Packets++
		t, err := ParseTuple(pr.LinkType(), rec.Data)
		if errors.Is(err, ErrLinkType) {
			return FlowFile{}, fmt.Errorf("%s: %w (supported: Ethernet, raw IP, Linux SLL and SLL2)", path, err)
		}
		if err != nil {
			ff.Skipped[err.Error()]++
			continue
		}
		ff.Parsed++
		if !seen[t] {
			seen[t] = true
			ff.Flows = append(ff.Flows, t)
		}
	}
	return ff, nil
}

// Source is the citation for the packet captures in testdata/traces
// (see its README.md); print it beside any result on them.
const Source = `"DDoS Packet Capture Collection" (L.F. Haaijer, 2022), ` +
	`github.com/StopDDoS/packet-captures at commit 230dd43af86ff2523bcfaaa5c3cb8cf97a220938`

// DirEnv names an environment variable that, when set, is the traces
// directory FindDir returns.
const DirEnv = "XLB_TRACES_DIR"

// FindDir returns the directory of the packet captures:
// $XLB_TRACES_DIR if set, else testdata/traces of the module root found by
// walking up from start. A candidate counts only if it holds a *.pcap
// file. It wraps ErrNoTraces, naming the places it looked, if none does.
func FindDir(start string) (string, error) {
	var tried []string
	if d := os.Getenv(DirEnv); d != "" {
		if hasPcap(d) {
			return d, nil
		}
		return "", fmt.Errorf("%s=%s: %w (no *.pcap file there)", DirEnv, d, ErrNoTraces)
	}
	if abs, err := filepath.Abs(start); err == nil {
		for d := abs; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				c := filepath.Join(d, "testdata", "traces")
				if hasPcap(c) {
					return c, nil
				}
				tried = append(tried, c)
				break
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	if len(tried) == 0 {
		tried = append(tried, "testdata/traces (no go.mod above "+start+")")
	}
	return "", fmt.Errorf("%w: looked in %s (set %s)", ErrNoTraces, strings.Join(tried, ", "), DirEnv)
}

func hasPcap(dir string) bool {
	m, _ := filepath.Glob(filepath.Join(dir, "*.pcap"))
	return len(m) > 0
}

// ReadDir reads every *.pcap file of dir (ReadPcapFlows), sorted by
// name.
func ReadDir(dir string) ([]FlowFile, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.pcap"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("%s: %w (no *.pcap file)", dir, ErrNoTraces)
	}
	slices.Sort(paths)
	files := make([]FlowFile, 0, len(paths))
	for _, p := range paths {
		ff, err := ReadPcapFlows(p)
		if err != nil {
			return nil, err
		}
		files = append(files, ff)
	}
	return files, nil
}
