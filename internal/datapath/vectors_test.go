package datapath

import (
	"encoding/json"
	"math/rand/v2"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/maglev"
	"github.com/xlbproject/xlb/internal/packet"
)

// TestProgramPicksModelBackend binds the C flow hash and table lookup to the
// Go model: for 10,000 random flows over a service of 100 weighted backends,
// the backend in the program's output equals maglev's pick.
func TestProgramPicksModelBackend(t *testing.T) {
	d := newTestDatapath(t, Options{ConntrackEntries: 1 << 16, MaxReals: 8192})
	const m = 65537
	r := rand.New(rand.NewPCG(1, 2))
	var backends []maglev.Backend
	for i := 0; i < 100; i++ {
		backends = append(backends, maglev.Backend{
			Name:   netip.AddrFrom4([4]byte{10, 1, byte(i / 250), byte(1 + i%250)}).String(),
			Weight: uint32(1 + r.IntN(10)),
		})
	}
	tbl, err := maglev.Build(backends, m)
	if err != nil {
		t.Fatal(err)
	}
	st := &State{Node: testNode(), Services: map[VIPKey]*Service{}}
	svc := uint32(0)
	for _, proto := range []uint8{6, 17} {
		for _, vip := range []netip.Addr{vip4, vip6} {
			svc++
			ids := make([]uint32, len(tbl.Backends))
			for i, b := range tbl.Backends {
				ids[i] = svc*1000 + uint32(i)
				st.Reals.Set(ids[i], Real{Addr: netip.MustParseAddr(b.Name), SvcID: svc, Active: true})
			}
			s := &Service{SvcID: svc, Encap: EncapGRE, Table: make([]uint32, m)}
			for i, e := range tbl.Entries {
				s.Table[i] = ids[e]
			}
			st.Services[VIPKey{Addr: vip, Port: 0, Proto: proto}] = s
		}
	}
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	prog := d.Program()
	mismatch := 0
	for i := 0; i < 10000; i++ {
		f := packet.Flow{SrcPort: uint16(r.Uint32()), DstPort: uint16(r.Uint32()), TCPFlags: packet.SYN}
		if i%2 == 0 {
			f.Proto = packet.ProtoTCP
		} else {
			f.Proto = packet.ProtoUDP
		}
		if i%4 < 2 {
			f.Src = netip.AddrFrom4([4]byte{byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32())})
			f.Dst = vip4
		} else {
			var a [16]byte
			for j := range a {
				a[j] = byte(r.Uint32())
			}
			f.Src, f.Dst = netip.AddrFrom16(a), vip6
		}
		want := tbl.Backends[tbl.Lookup(maglev.FlowHash(maglev.Tuple{Src: f.Src, Dst: f.Dst, SrcPort: f.SrcPort, DstPort: f.DstPort, Proto: f.Proto}))].Name
		ret, out := run(t, prog, f.Frame())
		if ret != xdpTX {
			t.Fatalf("flow %d: verdict %d", i, ret)
		}
		tun, err := packet.ParseTunnel(out)
		if err != nil {
			t.Fatal(err)
		}
		if got := tun.Backend.String(); got != want {
			if mismatch++; mismatch < 5 {
				t.Errorf("flow %d %v: program chose %s, model %s", i, f.Src, got, want)
			}
		}
	}
	if mismatch > 0 {
		t.Fatalf("%d of 10000 flows differ", mismatch)
	}
}

// TestFlowHashVectors runs the shared vectors (testdata/flowhash_vectors.json)
// through the program. Each vector's VIP has a table whose slot predicted by
// the Go model holds backend "hit" and every other slot backend "miss", so
// the backend chosen tells whether C computed the same slot (the hash's high
// 32 bits); the IPv6 outer flow label carries the hash's low 20 bits.
func TestFlowHashVectors(t *testing.T) {
	vecs := loadVectors(t)
	const m = 65521
	hit, miss := netip.MustParseAddr("fd00:ff::1"), netip.MustParseAddr("fd00:ff::2")
	d := newTestDatapath(t, Options{ConntrackEntries: 1 << 12, MaxReals: 4096, MaxServices: 1024})
	st := &State{Node: testNode(), Services: map[VIPKey]*Service{}}
	for i, v := range vecs {
		svc := uint32(i + 1)
		st.Reals.Set(2*svc, Real{Addr: hit, SvcID: svc, Active: true})
		st.Reals.Set(2*svc+1, Real{Addr: miss, SvcID: svc, Active: true})
		tbl := make([]uint32, m)
		for j := range tbl {
			tbl[j] = 2*svc + 1
		}
		tbl[maglev.Slot(v.Hash, m)] = 2 * svc
		st.Services[VIPKey{Addr: v.Tuple.Dst, Port: v.Tuple.DstPort, Proto: v.Tuple.Proto}] = &Service{SvcID: svc, Encap: EncapIPIP, Table: tbl}
	}
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	for i, v := range vecs {
		tp := v.Tuple
		f := packet.Flow{Src: tp.Src, Dst: tp.Dst, SrcPort: tp.SrcPort, DstPort: tp.DstPort, Proto: tp.Proto, TCPFlags: packet.SYN}
		ret, out := run(t, d.Program(), f.Frame())
		if ret != xdpTX {
			t.Fatalf("vector %d: verdict %d", i, ret)
		}
		tun, err := packet.ParseTunnel(out)
		if err != nil {
			t.Fatal(err)
		}
		if tun.Backend != hit || tun.Label != uint32(v.Hash&0xfffff) {
			t.Fatalf("vector %d (%+v): slot hit %v, label %#x, want %#x", i, tp, tun.Backend == hit, tun.Label, v.Hash&0xfffff)
		}
	}
}

type flowVector struct {
	Tuple maglev.Tuple
	Hash  uint64
}

// loadVectors reads the TCP and UDP cases of the shared vector file (the
// forwarder passes other protocols to the kernel), plus an IPv6 flow with
// IPv4-mapped addresses.
func loadVectors(t *testing.T) []flowVector {
	t.Helper()
	data, err := os.ReadFile("../../testdata/flowhash_vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var raw []struct {
		Src, Dst     string
		Sport, Dport uint16
		Proto        uint8
		Hash         string
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	var out []flowVector
	for _, r := range raw {
		if r.Proto != 6 && r.Proto != 17 {
			continue
		}
		h, err := strconv.ParseUint(strings.TrimPrefix(r.Hash, "0x"), 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, flowVector{maglev.Tuple{Src: netip.MustParseAddr(r.Src), Dst: netip.MustParseAddr(r.Dst), SrcPort: r.Sport, DstPort: r.Dport, Proto: r.Proto}, h})
	}
	mapped := maglev.Tuple{Src: netip.MustParseAddr("::ffff:10.0.0.1"), Dst: netip.MustParseAddr("::ffff:192.0.2.10"), SrcPort: 12345, DstPort: 80, Proto: 6}
	out = append(out, flowVector{mapped, maglev.FlowHash(mapped)})
	if len(out) < 500 {
		t.Fatalf("only %d TCP/UDP vectors", len(out))
	}
	return out
}
