package tracer

import (
	"bytes"
	"net/netip"
	"testing"
)

// TestMarkerRoundTrip: Encode then Decode gives the marker back, for IPv4
// and IPv6 receivers; the IPv4 form has zero padding.
func TestMarkerRoundTrip(t *testing.T) {
	for _, r := range []string{"198.51.100.9:5555", "[2001:db8::9]:1", "[::ffff:192.0.2.1]:80"} {
		m := Marker{ID: 0xdeadbeef, Receiver: netip.MustParseAddrPort(r)}
		b, err := m.Encode()
		if err != nil || len(b) != MarkerLen {
			t.Fatalf("%s: %d bytes, %v", r, len(b), err)
		}
		got, err := Decode(append(b, "trailing payload"...))
		want := netip.AddrPortFrom(m.Receiver.Addr().Unmap(), m.Receiver.Port())
		if err != nil || got.ID != m.ID || got.Receiver != want {
			t.Fatalf("%s: decoded %+v, %v", r, got, err)
		}
	}
	b, _ := Marker{ID: 1, Receiver: netip.MustParseAddrPort("192.0.2.1:7")}.Encode()
	if !bytes.Equal(b[:8], []byte{'X', 'L', 'B', 't', 1, 4, 0, 7}) || !bytes.Equal(b[16:], make([]byte, 12)) {
		t.Fatalf("v4 marker % x", b)
	}
}

// TestMarkerRejected: what the forwarder ignores, Decode refuses too.
func TestMarkerRejected(t *testing.T) {
	good, _ := Marker{ID: 1, Receiver: netip.MustParseAddrPort("192.0.2.1:7")}.Encode()
	mut := func(f func(b []byte)) []byte { b := bytes.Clone(good); f(b); return b }
	for name, b := range map[string][]byte{
		"truncated":   good[:MarkerLen-1],
		"version":     mut(func(b []byte) { b[4] = 2 }),
		"family":      mut(func(b []byte) { b[5] = 0 }),
		"port 0":      mut(func(b []byte) { b[6], b[7] = 0, 0 }),
		"v4 padding":  mut(func(b []byte) { b[20] = 1 }),
		"probe magic": ProbeMarker(42),
	} {
		if _, err := Decode(b); err != ErrNotMarker {
			t.Errorf("%s: %v, want ErrNotMarker", name, err)
		}
	}
	if _, err := (Marker{ID: 1, Receiver: netip.MustParseAddrPort("192.0.2.1:0")}).Encode(); err == nil {
		t.Error("port 0 encoded")
	}
	for a, ok := range map[string]bool{"192.0.2.1": true, "2001:db8::1": true, "0.0.0.0": false, "::": false,
		"224.0.0.1": false, "ff02::1": false, "255.255.255.255": false} {
		if Allowed(netip.MustParseAddr(a)) != ok {
			t.Errorf("Allowed(%s) = %v", a, !ok)
		}
	}
}
