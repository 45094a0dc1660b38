package datapath

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/tracer"
)

// TestTraceMarkerLayout: the Go encoder writes the C struct (bpf/types.h;
// its size is asserted there).
func TestTraceMarkerLayout(t *testing.T) {
	m := tracer.Marker{ID: 0x01020304, Receiver: netip.MustParseAddrPort("[2001:db8::5]:4242")}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	var c xlbTraceMarker
	if err := binary.Read(bytes.NewReader(b), binary.BigEndian, &c); err != nil {
		t.Fatal(err)
	}
	if c.Magic != tracer.Magic || c.Version != tracer.Version || c.Family != 6 || c.Port != 4242 || c.Id != 0x01020304 ||
		netip.AddrFrom16(c.Addr) != m.Receiver.Addr() {
		t.Fatalf("decoded %+v", c)
	}
	if got, err := tracer.Decode(b); err != nil || got != m {
		t.Fatalf("Decode: %v %v", got, err)
	}
}

// traceState is fixtureState plus a VIP without a backend (svc 7).
func traceState(rate uint32) *State {
	st := fixtureState()
	st.Node.TraceRate = rate
	st.Services[VIPKey{Addr: vip4, Port: 99, Proto: 17}] = &Service{SvcID: 7, Encap: EncapGRE, Table: make([]uint32, 7)}
	return st
}

func marked(f packet.Flow, id uint32, recv string) packet.Flow {
	b, err := tracer.Marker{ID: id, Receiver: netip.MustParseAddrPort(recv)}.Encode()
	if err != nil {
		panic(err)
	}
	f.Payload = append(b, []byte("rest of the payload")...)
	return f
}

// drainTrace reads every record the ring holds now.
func drainTrace(t *testing.T, r *TraceReader) []TraceEvent {
	t.Helper()
	var out []TraceEvent
	for {
		r.SetDeadline(time.Now().Add(50 * time.Millisecond))
		e, err := r.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
}

// TestTraceRecords runs marked packets (v4 and v6 receivers, TCP and UDP,
// a tracked and an untracked flow, a VIP without backend) through the
// program: each is forwarded exactly as the same packet without a marker
// would be, and the ring buffer gets one record with the right contents.
// Truncated and invalid markers give no record and an ordinary forward.
func TestTraceRecords(t *testing.T) {
	d := newTestDatapath(t, Options{})
	if _, err := d.Apply(traceState(1000)); err != nil {
		t.Fatal(err)
	}
	r, err := d.TraceReader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	prog := d.Program()
	udp := packet.Flow{Src: client4, Dst: vip4, SrcPort: 40001, DstPort: 53, Proto: packet.ProtoUDP, SrcMAC: peerMAC, DstMAC: nodeMAC}
	tcp6 := packet.Flow{Src: client6, Dst: vip6, SrcPort: 40002, DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: packet.ACK, SrcMAC: peerMAC, DstMAC: nodeMAC}

	// forwarded checks that f went out as an ordinary tunnel packet to
	// backend with its inner datagram untouched.
	forwarded := func(t *testing.T, f packet.Flow, backend netip.Addr) {
		t.Helper()
		ret, out := run(t, prog, f.Frame())
		if ret != xdpTX {
			t.Fatalf("verdict %d, want XDP_TX", ret)
		}
		tun, err := packet.ParseTunnel(out)
		if err != nil {
			t.Fatal(err)
		}
		if tun.Backend != backend || !bytes.Equal(tun.Inner, f.IP()) {
			t.Fatalf("forwarded to %s (inner equal %v), want %s", tun.Backend, bytes.Equal(tun.Inner, f.IP()), backend)
		}
	}
	before, _ := d.Stats()

	// v4 receiver, UDP: first packet (conntrack miss), then the same flow (hit).
	forwarded(t, marked(udp, 7, "198.51.100.9:5555"), be4)
	forwarded(t, marked(udp, 8, "198.51.100.9:5555"), be4)
	// v6 receiver, TCP data segment of a flow the node never saw (miss).
	forwarded(t, marked(tcp6, 9, "[2001:db8::99]:6000"), be6)
	// A VIP without backend: dropped, and traced with the reason.
	nob := udp
	nob.DstPort = 99
	if ret, _ := run(t, prog, marked(nob, 10, "198.51.100.9:5555").Frame()); ret != xdpDrop {
		t.Fatalf("no backend: verdict %d, want XDP_DROP", ret)
	}
	got := drainTrace(t, r)
	type want struct {
		id       uint32
		src, vip string
		backend  string
		hit      bool
		verdict  uint32
		reason   string
		proto    uint8
		receiver string
	}
	wants := []want{
		{7, "192.0.2.7:40001", "10.200.0.1:53", "10.0.1.1", false, xdpTX, "", 17, "198.51.100.9:5555"},
		{8, "192.0.2.7:40001", "10.200.0.1:53", "10.0.1.1", true, xdpTX, "", 17, "198.51.100.9:5555"},
		{9, "[2001:db8::7]:40002", "[fd00:200::1]:80", "fd00:1::1", false, xdpTX, "", 6, "[2001:db8::99]:6000"},
		{10, "192.0.2.7:40001", "10.200.0.1:99", "invalid IP", false, xdpDrop, "drop_no_backend", 17, "198.51.100.9:5555"},
	}
	if len(got) != len(wants) {
		t.Fatalf("%d records, want %d: %+v", len(got), len(wants), got)
	}
	for i, w := range wants {
		e := got[i]
		if e.ID != w.id || e.Src.String() != w.src || e.VIP.String() != w.vip || e.Backend.String() != w.backend ||
			e.ConntrackHit != w.hit || e.Verdict != w.verdict || e.Reason != w.reason || e.Proto != w.proto ||
			e.Receiver.String() != w.receiver {
			t.Errorf("record %d: %+v\nwant %+v", i, e, w)
		}
		if d := time.Since(e.Time); d < 0 || d > 10*time.Second {
			t.Errorf("record %d: time %v is %v from now", i, e.Time, d)
		}
		if w.backend != "invalid IP" && e.RealID == 0 {
			t.Errorf("record %d: no real id", i)
		}
	}

	// The marker is found behind TCP options, IPv4 options, IPv6
	// extension headers and VLAN tags.
	tcpOpts := packet.Flow{Src: client4, Dst: vip4, SrcPort: 40003, DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: packet.ACK, SrcMAC: peerMAC, DstMAC: nodeMAC}
	tcpOpts = marked(tcpOpts, 11, "198.51.100.9:5555")
	tcpOpts.Payload = append([]byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2}, tcpOpts.Payload...) // NOP NOP timestamp
	optFrame := tcpOpts.Frame()
	optFrame[14+20+12] = 8 << 4 // data offset 8: the 12 option bytes are header
	ipOpts := marked(udp, 12, "198.51.100.9:5555")
	ipOpts.IPv4Options = []byte{1, 1, 1, 0}
	ext6 := marked(packet.Flow{Src: client6, Dst: vip6, SrcPort: 40004, DstPort: 53, Proto: packet.ProtoUDP, SrcMAC: peerMAC, DstMAC: nodeMAC}, 13, "198.51.100.9:5555")
	ext6.IPv6ExtHeaders = []packet.ExtHeader{{Type: 0, Body: make([]byte, 6)}, {Type: 60, Body: make([]byte, 14)}}
	vlan := marked(udp, 14, "198.51.100.9:5555")
	vlan.VLAN = 42
	for _, fr := range [][]byte{optFrame, ipOpts.Frame(), ext6.Frame(), vlan.Frame()} {
		if ret, _ := run(t, prog, fr); ret != xdpTX {
			t.Fatalf("verdict %d, want XDP_TX", ret)
		}
	}
	var ids []uint32
	for _, e := range drainTrace(t, r) {
		ids = append(ids, e.ID)
	}
	if fmt.Sprint(ids) != "[11 12 13 14]" {
		t.Fatalf("records behind options / extension headers / VLAN: ids %v, want [11 12 13 14]", ids)
	}

	// Markers the forwarder must ignore: the packets are forwarded as
	// usual and give no record.
	good, _ := tracer.Marker{ID: 1, Receiver: netip.MustParseAddrPort("198.51.100.9:5555")}.Encode()
	mut := func(f func(b []byte)) []byte { b := bytes.Clone(good); f(b); return b }
	ignored := []struct {
		name    string
		payload []byte
		invalid bool // has the magic and the length: counted as invalid
	}{
		{"truncated (27 bytes)", good[:27], false},
		{"magic only", good[:4], false},
		{"bad version", mut(func(b []byte) { b[4] = 2 }), true},
		{"bad family", mut(func(b []byte) { b[5] = 5 }), true},
		{"port 0", mut(func(b []byte) { b[6], b[7] = 0, 0 }), true},
		{"v4 receiver, padding not zero", mut(func(b []byte) { b[27] = 1 }), true},
		{"probe magic, wrong cookie", tracer.ProbeMarker(d.probeCookie + 1), true},
		{"other magic", mut(func(b []byte) { b[3] = 'x' }), false},
	}
	invalid := 0
	for i, c := range ignored {
		f := udp
		f.SrcPort = uint16(41000 + i)
		f.Payload = c.payload
		forwarded(t, f, be4)
		if c.invalid {
			invalid++
		}
	}
	// A marker in the frame's padding, beyond the IP datagram.
	f := udp
	f.SrcPort = 42000
	frame := append(f.Frame(), good...)
	if ret, _ := run(t, prog, frame); ret != xdpTX {
		t.Fatalf("marker in padding: verdict %d", ret)
	}
	if extra := drainTrace(t, r); len(extra) != 0 {
		t.Fatalf("records for ignored markers: %+v", extra)
	}
	after, _ := d.Stats()
	if n := after["trace_emitted"] - before["trace_emitted"]; n != 8 {
		t.Errorf("trace_emitted +%d, want 8", n)
	}
	if n := after["trace_invalid"] - before["trace_invalid"]; n != uint64(invalid) {
		t.Errorf("trace_invalid +%d, want %d", n, invalid)
	}
	if n := after["trace_limited"] + after["trace_lost"]; n != 0 {
		t.Errorf("trace_limited+lost %d, want 0", n)
	}
}

// TestTraceRateLimit floods the program with 10000 marked packets in one
// burst (BPF_PROG_TEST_RUN repeat): every one is forwarded and counted for
// its service, and the records stay within the per-CPU bucket (trace_rate
// per second, burst of one second's worth).
func TestTraceRateLimit(t *testing.T) {
	const rate, flood uint64 = 50, 10000
	d := newTestDatapath(t, Options{})
	if _, err := d.Apply(traceState(uint32(rate))); err != nil {
		t.Fatal(err)
	}
	r, err := d.TraceReader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	f := marked(packet.Flow{Src: client4, Dst: vip4, SrcPort: 40009, DstPort: 53, Proto: packet.ProtoUDP, SrcMAC: peerMAC, DstMAC: nodeMAC},
		3, "198.51.100.9:5555")
	frame := f.Frame()
	// Test runs of an attached program are fast (an unattached one costs
	// tens of ms per run): attach it to lo of a private netns.
	inNewNetns(t, func() {
		lo, err := net.InterfaceByName("lo")
		if err != nil {
			t.Fatal(err)
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: d.Program(), Interface: lo.Index, Flags: link.XDPGenericMode})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		floodRun(t, d, r, frame, rate, flood)
	})
}

func floodRun(t *testing.T, d *Datapath, r *TraceReader, frame []byte, rate, flood uint64) {
	pinCPU(t) // the bucket is per CPU: a run moved to another CPU would find a full one
	before, _ := d.Stats()
	start := time.Now()
	opts := &ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256), Repeat: 1}
	for i := 0; i < int(flood); i++ {
		opts.DataOut = opts.DataOut[:cap(opts.DataOut)]
		ret, err := d.Program().Run(opts)
		if err != nil {
			t.Fatal(err)
		}
		if ret != xdpTX {
			t.Fatalf("packet %d: verdict %d, want XDP_TX", i, ret)
		}
	}
	took := time.Since(start)
	after, _ := d.Stats()
	records := drainTrace(t, r)
	emitted := after["trace_emitted"] - before["trace_emitted"]
	limited := after["trace_limited"] - before["trace_limited"]
	allowed := rate + uint64(float64(rate)*took.Seconds()) + 1
	t.Logf("%d marked packets in %v: %d records, %d rate-limited (bucket allows %d)", flood, took, len(records), limited, allowed)
	if uint64(len(records)) != emitted || emitted+limited != flood {
		t.Fatalf("records %d, emitted %d, limited %d: want records = emitted, emitted + limited = %d", len(records), emitted, limited, flood)
	}
	if emitted > allowed || emitted < rate {
		t.Fatalf("%d records, want %d..%d", emitted, rate, allowed)
	}
	if n := after["forward_tx"] - before["forward_tx"]; n != flood {
		t.Fatalf("forward_tx +%d, want %d: every marked packet is forwarded", n, flood)
	}
	if c, _ := d.ServiceCounters(2); c.Packets != flood {
		t.Fatalf("service packets %d, want %d", c.Packets, flood)
	}
	// Tracer off: no record at all.
	st := traceState(0)
	st.Node.TraceRate = 0
	if _, err := d.Apply(st); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		opts.DataOut = opts.DataOut[:cap(opts.DataOut)]
		if ret, err := d.Program().Run(opts); err != nil || ret != xdpTX {
			t.Fatalf("verdict %d, %v", ret, err)
		}
	}
	if extra := drainTrace(t, r); len(extra) != 0 {
		t.Fatalf("trace_rate 0: %d records", len(extra))
	}
}

// TestSelfCheckProbeNotCounted: packets with this node's probe marker are
// forwarded to the backend the table gives, counted in selfcheck_probe
// only (service and real counters unchanged) and leave no conntrack entry;
// an existing entry is neither refreshed nor changed.
func TestSelfCheckProbeNotCounted(t *testing.T) {
	d := newTestDatapath(t, Options{})
	if _, err := d.Apply(fixtureState()); err != nil {
		t.Fatal(err)
	}
	prog := d.Program()
	entries := func() int {
		n := 0
		if err := d.ScanConntrack(func(CTEntry) bool { n++; return true }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before, _ := d.Stats()
	for i, k := range []struct {
		vip   netip.Addr
		port  uint16
		proto uint8
		be    netip.Addr
	}{{vip4, 80, packet.ProtoTCP, be4}, {vip6, 80, packet.ProtoTCP, be6}, {vip4, 53, packet.ProtoUDP, be4}} {
		src := client4
		if k.vip.Is6() {
			src = client6
		}
		f := packet.Flow{Src: src, Dst: k.vip, SrcPort: uint16(50000 + i), DstPort: k.port, Proto: k.proto, TCPFlags: packet.SYN,
			Payload: tracer.ProbeMarker(d.probeCookie), SrcMAC: peerMAC, DstMAC: nodeMAC}
		if k.proto == packet.ProtoUDP {
			f.TCPFlags = 0
		}
		ret, out := run(t, prog, f.Frame())
		if ret != xdpTX {
			t.Fatalf("probe %d: verdict %d", i, ret)
		}
		if tun, err := packet.ParseTunnel(out); err != nil || tun.Backend != k.be {
			t.Fatalf("probe %d: %v %v, want backend %s", i, tun, err, k.be)
		}
	}
	after, _ := d.Stats()
	if n := after["selfcheck_probe"] - before["selfcheck_probe"]; n != 3 {
		t.Fatalf("selfcheck_probe +%d, want 3", n)
	}
	for _, s := range []string{"ct_hit", "ct_miss", "ct_remote_hit", "ct_reselect"} {
		if after[s] != before[s] {
			t.Errorf("%s moved (%d -> %d) for probes", s, before[s], after[s])
		}
	}
	for id := uint32(1); id <= 6; id++ {
		if c, _ := d.ServiceCounters(id); c != (Counters{}) {
			t.Errorf("service %d counters %+v after probes, want zero", id, c)
		}
		if c, _ := d.RealCounters(id); c != (Counters{}) {
			t.Errorf("real %d counters %+v after probes, want zero", id, c)
		}
	}
	if n := entries(); n != 0 {
		t.Fatalf("%d conntrack entries after probes, want 0", n)
	}
	// The same packet without the cookie is an ordinary packet: tracked and counted.
	f := packet.Flow{Src: client4, Dst: vip4, SrcPort: 50000, DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: packet.SYN,
		Payload: tracer.ProbeMarker(0), SrcMAC: peerMAC, DstMAC: nodeMAC}
	if ret, _ := run(t, prog, f.Frame()); ret != xdpTX {
		t.Fatalf("ordinary packet: verdict %d", ret)
	}
	if c, _ := d.ServiceCounters(1); c.Packets != 1 || c.NewFlows != 1 {
		t.Fatalf("ordinary packet: service counters %+v", c)
	}
	if n := entries(); n != 1 {
		t.Fatalf("%d conntrack entries after an ordinary SYN, want 1", n)
	}
}
