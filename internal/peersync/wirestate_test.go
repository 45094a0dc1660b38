package peersync

import (
	"bytes"
	"errors"
	"net/netip"
	"slices"
	"testing"
)

func sampleState() ([]NAT, []LBLC) {
	nats := []NAT{
		{VIP: netip.MustParseAddr("10.200.0.3"), Port: 80, Proto: 6, Backend: netip.MustParseAddr("10.0.1.2"),
			Client: netip.MustParseAddr("10.99.0.2"), ClientPort: 41000, VIPPort: 80, Age: 3},
		{VIP: netip.MustParseAddr("fd00:200::3"), Port: 0, Proto: 17, Backend: netip.MustParseAddr("fd00:1::2"),
			Client: netip.MustParseAddr("fd00:99::2"), ClientPort: 5353, VIPPort: 53},
	}
	lblcs := []LBLC{
		{VIP: netip.MustParseAddr("10.200.0.9"), Port: 80, Proto: 6, Backends: []netip.Addr{netip.MustParseAddr("10.0.1.1")}, Used: 70000, Modified: 12},
		{VIP: netip.MustParseAddr("fd00:200::9"), Port: 443, Proto: 6, Used: 1,
			Backends: []netip.Addr{netip.MustParseAddr("fd00:1::1"), netip.MustParseAddr("10.0.1.3")}},
	}
	return nats, lblcs
}

// NAT and lblc records go through the wire as they are, beside flows, as
// many as the message sizes say; more do not fit.
func TestEncodeDecodeState(t *testing.T) {
	nats, lblcs := sampleState()
	m := &Message{Type: MsgFlows, Seq: 3, Time: 5, Flows: sampleFlows(2), NATs: nats, LBLCs: lblcs}
	b, err := Encode(testKey, m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(testKey, b)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.NATs, nats) || len(got.Flows) != 2 || got.Unknown != 0 {
		t.Fatalf("decoded %+v, want %+v", got, m)
	}
	for i := range lblcs {
		g := got.LBLCs[i]
		if g.VIP != lblcs[i].VIP || g.Port != lblcs[i].Port || g.Used != lblcs[i].Used || g.Modified != lblcs[i].Modified ||
			!slices.Equal(g.Backends, lblcs[i].Backends) {
			t.Fatalf("lblc %d: %+v, want %+v", i, g, lblcs[i])
		}
	}
	full := func(n, l int) *Message {
		m := &Message{Type: MsgFlows}
		for range n {
			m.NATs = append(m.NATs, nats[1])
		}
		for range l {
			e := lblcs[1]
			e.Backends = slices.Repeat(e.Backends[:1], lblcMax)
			m.LBLCs = append(m.LBLCs, e)
		}
		return m
	}
	if _, err := Encode(testKey, full(NATsPerMessage, 0)); err != nil {
		t.Fatalf("%d NAT records: %v", NATsPerMessage, err)
	}
	if _, err := Encode(testKey, full(0, LBLCsPerMessage)); err != nil {
		t.Fatalf("%d lblc records of 8 backends: %v", LBLCsPerMessage, err)
	}
	if _, err := Encode(testKey, full(NATsPerMessage+1, 0)); err == nil {
		t.Fatal("a message over MaxMessage was encoded")
	}
}

// A receiver that does not know the NAT and lblc record types (a node of
// an older version) skips them and counts them: simulated by renumbering
// the records to types no version has.
func TestStateRecordsSkippedByUnknownTypes(t *testing.T) {
	nats, lblcs := sampleState()
	b, err := Encode(testKey, &Message{Type: MsgFlows, Flows: sampleFlows(1), NATs: nats[:1], LBLCs: lblcs[:1]})
	if err != nil {
		t.Fatal(err)
	}
	at := headerLen + recHdrLen + flowLen
	b[at] = 200
	b[at+recHdrLen+natLen] = 201
	m, err := Decode(testKey, appendMAC(testKey, b[:len(b)-macLen]))
	if err != nil || m.Unknown != 2 || len(m.Flows) != 1 || len(m.NATs)+len(m.LBLCs) != 0 {
		t.Fatalf("got %+v, %v; want the flow read and 2 records skipped", m, err)
	}
}

// Malformed NAT and lblc records are refused with the whole message.
func TestDecodeRefusesState(t *testing.T) {
	nats, lblcs := sampleState()
	good, err := Encode(testKey, &Message{Type: MsgFlows, NATs: nats[:1], LBLCs: lblcs[:1]})
	if err != nil {
		t.Fatal(err)
	}
	nat, lb := headerLen+recHdrLen, headerLen+2*recHdrLen+natLen
	for _, c := range []struct {
		name string
		at   int
		val  byte
	}{
		{"NAT protocol", nat + 1, 1},
		{"NAT family", nat, 5},
		{"NAT IPv4 stray byte", nat + 40, 1},
		{"NAT reserved", nat + 59, 1},
		{"lblc protocol", lb + 1, 47},
		{"lblc no backends", lb + 28, 0},
		{"lblc more backends than its length", lb + 28, 2},
		{"lblc backend family", lb + lblcHdr, 9},
	} {
		b := bytes.Clone(good)
		b[c.at] = c.val
		if _, err := Decode(testKey, appendMAC(testKey, b[:len(b)-macLen])); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: %v, want %v", c.name, err, ErrFormat)
		}
	}
	for _, m := range []*Message{
		{Type: MsgFlows, NATs: []NAT{{VIP: nats[0].VIP, Backend: nats[1].Backend, Client: nats[0].Client, Proto: 6}}},
		{Type: MsgFlows, LBLCs: []LBLC{{VIP: lblcs[0].VIP, Proto: 6}}},
	} {
		if _, err := Encode(testKey, m); err == nil {
			t.Errorf("encoded %+v", m)
		}
	}
}
