package prober

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/state"
	"github.com/xlbproject/xlb/internal/testenv"
)

var (
	vipTCP = state.VIPKey{Addr: netip.MustParseAddr("10.200.0.1"), Port: 80, Proto: packet.ProtoTCP}
	vipUDP = state.VIPKey{Addr: netip.MustParseAddr("fd00:200::1"), Port: 53, Proto: packet.ProtoUDP}
)

// TestFailRounds: the node is judged not to deliver only after FailRounds
// rounds in a row without any answer; one answer anywhere resets it.
func TestFailRounds(t *testing.T) {
	p := New(Options{FailRounds: 2})
	up := []Result{{VIP: vipTCP, Up: true}, {VIP: vipUDP}}
	down := []Result{{VIP: vipTCP, Err: "no answer"}, {VIP: vipUDP, Err: "no answer"}}
	for i, c := range []struct {
		round []Result
		ok    bool
	}{
		{down, true}, {down, false}, {down, false}, {up, true}, {down, true}, {nil, true}, {down, true}, {down, false},
	} {
		before := p.Status().OK
		if got := p.record(c.round).OK; got != c.ok {
			t.Fatalf("round %d: ok %v, want %v", i, got, c.ok)
		}
		select {
		case <-p.Changes():
			if before == c.ok {
				t.Fatalf("round %d: change signalled, none happened", i)
			}
		default:
			if before != c.ok {
				t.Fatalf("round %d: change not signalled", i)
			}
		}
	}
	if st := p.Status(); len(st.Results) != 2 || st.Results[0].Err != "no answer" {
		t.Fatalf("status: %+v", st)
	}
}

// TestProbeNotForwarded: a probe the forwarder does not forward fails at
// once, naming the verdict, and the flow sent is a SYN from the node's
// address of the VIP's family.
func TestProbeNotForwarded(t *testing.T) {
	var sent []packet.Flow
	p := New(Options{Src4: netip.MustParseAddr("127.0.0.1"), Src6: netip.MustParseAddr("::1"),
		Send: func(f packet.Flow) (uint32, error) { sent = append(sent, f); return 2, nil }})
	p.SetTargets([]state.VIPKey{vipUDP, vipTCP})
	st := p.Round(context.Background())
	if len(st.Results) != 2 || st.Results[0].VIP != vipTCP {
		t.Fatalf("results: %+v", st.Results)
	}
	for _, r := range st.Results {
		if r.Up || !strings.Contains(r.Err, "did not forward the probe (verdict 2)") {
			if strings.Contains(r.Err, "raw socket") {
				testenv.Unavailable(t, "needs CAP_NET_RAW: %s", r.Err)
			}
			t.Fatalf("%s: %+v", r.VIP, r)
		}
	}
	for _, f := range sent {
		if f.Proto == packet.ProtoTCP && (f.TCPFlags != packet.SYN || f.Src != netip.MustParseAddr("127.0.0.1")) {
			t.Fatalf("tcp probe %+v", f)
		}
		if f.Proto == packet.ProtoUDP && (f.Src != netip.MustParseAddr("::1") || f.SrcPort == 0) {
			t.Fatalf("udp probe %+v", f)
		}
	}
}

func TestNoSourceAddress(t *testing.T) {
	p := New(Options{Src4: netip.MustParseAddr("127.0.0.1"), Send: func(packet.Flow) (uint32, error) { return xdpTX, nil }})
	if r := p.probe(context.Background(), vipUDP); r.Up || !strings.Contains(r.Err, "no node address of the VIP's family") {
		t.Fatalf("%+v", r)
	}
}
