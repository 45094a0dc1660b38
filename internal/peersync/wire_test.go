package peersync

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"
)

var testKey = bytes.Repeat([]byte{0x5a}, 32)

func sampleFlows(n int) []Flow {
	out := make([]Flow, n)
	for i := range out {
		out[i] = Flow{VIP: netip.MustParseAddr("10.200.0.1"), Port: 80, Proto: 6,
			Backend: netip.MustParseAddr("fd00:1::2"), Hash: uint64(i) * 0x9E3779B97F4A7C15, HashBits: 64, State: 2, Age: uint16(i)}
	}
	out[0].VIP, out[0].Proto, out[0].Backend = netip.MustParseAddr("fd00:200::1"), 17, netip.MustParseAddr("10.0.1.1")
	if n > 2 { // a persistence template among the flows
		out[1].Template, out[1].State, out[1].Age = true, 0, 1400
	}
	return out
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, m := range []*Message{
		{Type: MsgFlows, Seq: 7, Time: 1e18, Flows: sampleFlows(FlowsPerMessage)},
		{Type: MsgHello, Seq: 8, Time: 2, Hello: &Hello{Node: "n1", ConfigVersion: "etcd:42", Fingerprint: 0xdeadbeef, Services: 3}},
		{Type: MsgBulkRequest, Seq: 9},
		{Type: MsgBulkEnd, Seq: 10},
	} {
		b, err := Encode(testKey, m)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > MaxMessage {
			t.Fatalf("%d bytes", len(b))
		}
		got, err := Decode(testKey, b)
		if err != nil {
			t.Fatalf("type %d: %v", m.Type, err)
		}
		if got.Type != m.Type || got.Seq != m.Seq || got.Time != m.Time || len(got.Flows) != len(m.Flows) {
			t.Fatalf("got %+v, want %+v", got, m)
		}
		for i := range m.Flows {
			if got.Flows[i] != m.Flows[i] {
				t.Fatalf("flow %d: got %+v, want %+v", i, got.Flows[i], m.Flows[i])
			}
		}
		if (m.Hello == nil) != (got.Hello == nil) || (m.Hello != nil && *got.Hello != *m.Hello) {
			t.Fatalf("hello %+v, want %+v", got.Hello, m.Hello)
		}
	}
	if _, err := Encode(testKey, &Message{Type: MsgFlows, Flows: sampleFlows(FlowsPerMessage + 1)}); err == nil {
		t.Fatal("a message over MaxMessage was encoded")
	}
	t.Logf("%d flows per %d-byte message: %.1f bytes per flow (UDP payload)", FlowsPerMessage, MaxMessage,
		float64(headerLen+macLen+FlowsPerMessage*(recHdrLen+flowLen))/FlowsPerMessage)
}

// TestDecodeRefuses: every damaged, foreign or forged message is refused
// with its reason.
// templateAt is where sampleFlows' template record starts in a message.
const templateAt = headerLen + recHdrLen + flowLen

func TestDecodeRefuses(t *testing.T) {
	good, err := Encode(testKey, &Message{Type: MsgFlows, Seq: 1, Flows: sampleFlows(3)})
	if err != nil {
		t.Fatal(err)
	}
	mod := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	resign := func(b []byte) []byte { // re-authenticated after a change: only the payload checks catch it
		return appendMAC(testKey, b[:len(b)-macLen])
	}
	for _, c := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrSize},
		{"oversized", make([]byte, MaxMessage+1), ErrSize},
		{"truncated", good[:len(good)-1], ErrAuth},
		{"magic", mod(func(b []byte) []byte { b[0] = 'Y'; return b }), ErrMagic},
		{"version", mod(func(b []byte) []byte { b[4] = 2; return b }), ErrVersion},
		{"flipped bit", mod(func(b []byte) []byte { b[40] ^= 1; return b }), ErrAuth},
		{"other key", func() []byte { b, _ := Encode(bytes.Repeat([]byte{1}, 32), &Message{Type: MsgFlows}); return b }(), ErrAuth},
		{"record count", mod(func(b []byte) []byte { b[25]++; return resign(b) }), ErrFormat},
		{"protocol", mod(func(b []byte) []byte { b[headerLen+3] = 1; return resign(b) }), ErrFormat},
		{"type", mod(func(b []byte) []byte { b[5] = 9; return resign(b) }), ErrFormat},
		{"flags", mod(func(b []byte) []byte { b[7] = 1; return resign(b) }), ErrFormat},
		{"trailing bytes", resign(append(bytes.Clone(good[:len(good)-macLen]), 0, 0, macLen)), ErrFormat},
		{"template with a state", mod(func(b []byte) []byte { b[templateAt+recHdrLen+21] = 2; return resign(b) }), ErrFormat},
		{"template of no hold", mod(func(b []byte) []byte {
			b[templateAt+recHdrLen+25] = 0
			b[templateAt+recHdrLen+24] = 0
			return resign(b)
		}), ErrFormat},
		{"template of a bucket's bits", mod(func(b []byte) []byte { b[templateAt+recHdrLen+22] = 20; return resign(b) }), ErrFormat},
	} {
		if _, err := Decode(testKey, c.b); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func TestReplayWindow(t *testing.T) {
	var w replayWindow
	for _, c := range []struct {
		seq  uint64
		want bool
	}{{100, true}, {100, false}, {99, true}, {99, false}, {120, true}, {101, true}, {56, false}, {57, true}, {200, true}, {120, false}, {137, true}} {
		if got := w.accept(c.seq); got != c.want {
			t.Fatalf("seq %d: %v, want %v", c.seq, got, c.want)
		}
	}
	now := time.Now()
	if !fresh(now.UnixNano(), now) || fresh(now.Add(-MaxSkew-time.Second).UnixNano(), now) || fresh(now.Add(MaxSkew+time.Second).UnixNano(), now) {
		t.Fatal("fresh: wrong verdicts")
	}
}

// FuzzDecode: no input makes Decode panic; whatever it accepts encodes
// back to the same bytes (with the key the fuzzer also knows: this checks
// the payload reader, the authentication is checked above).
func FuzzDecode(f *testing.F) {
	for _, m := range []*Message{
		{Type: MsgFlows, Seq: 1, Flows: sampleFlows(2)},
		{Type: MsgHello, Hello: &Hello{Node: "n", ConfigVersion: "v"}},
		{Type: MsgBulkEnd},
	} {
		b, _ := Encode(testKey, m)
		f.Add(b[:len(b)-macLen])
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		Decode(testKey, body) // as received: refused before or at authentication, never a panic
		if len(body) > MaxMessage {
			return
		}
		b := appendMAC(testKey, bytes.Clone(body))
		m, err := Decode(testKey, b)
		if err != nil {
			return
		}
		if m.Unknown > 0 {
			return // unknown records are skipped: not re-encoded
		}
		again, err := Encode(testKey, m)
		if err != nil {
			t.Fatalf("decoded message does not encode: %v", err)
		}
		if !bytes.Equal(again[:len(again)-macLen], b[:len(b)-macLen]) {
			t.Fatalf("decode/encode changed the message:\n%x\n%x", b, again)
		}
	})
}
