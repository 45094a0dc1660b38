package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/tracer"
)

// answer plays a node's part for one payload on loopback: decode the
// marker and send the receiver a record.
func answer(t *testing.T, payload []byte, proto string, src, vip net.Addr) {
	m, err := tracer.Decode(payload)
	if err != nil {
		t.Errorf("payload without a marker: %v", err)
		return
	}
	if !strings.HasPrefix(string(payload[tracer.MarkerLen:]), "xlbctl trace") {
		t.Errorf("payload after the marker: %q", payload[tracer.MarkerLen:])
	}
	r := tracer.Record{Version: 1, ID: m.ID, Node: "n1", Proto: proto, Src: src.String(), VIP: vip.String(),
		Backend: "10.0.1.1", Conntrack: "hit", Verdict: "tx"}
	if err := tracer.Send(r, m.Receiver); err != nil {
		t.Error(err)
	}
}

// TestTraceCommand runs 'xlbctl trace' against loopback listeners standing
// in for a VIP (the lab e2e has the real forwarder): markers well formed,
// one record per marked datagram or connection, table and JSON output, and
// a clear error when no record comes.
func TestTraceCommand(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			answer(t, bytes.Clone(buf[:n]), "udp", from, pc.LocalAddr())
		}
	}()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, tracer.MarkerLen+len("xlbctl trace\n"))
				n := 0
				for n < len(buf) {
					k, err := c.Read(buf[n:])
					if err != nil {
						return
					}
					n += k
				}
				answer(t, buf, "tcp", c.RemoteAddr(), c.LocalAddr())
			}()
		}
	}()
	run := func(args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		code := New(&out, &errOut).Run(context.Background(), append([]string{"trace"}, args...))
		return out.String(), errOut.String(), code
	}
	out, errOut, code := run("--vip", pc.LocalAddr().String(), "--count", "3")
	if code != 0 || len(strings.Split(strings.TrimSpace(out), "\n")) != 4 {
		t.Fatalf("udp: exit %d\n%s%s", code, out, errOut)
	}
	if !strings.HasPrefix(out, "ID") || !strings.Contains(out, "10.0.1.1") || !strings.Contains(out, "hit") {
		t.Fatalf("udp table:\n%s", out)
	}
	out, errOut, code = run("--vip", ln.Addr().String(), "--proto", "tcp", "--count", "2", "-o", "json", "--src", "127.0.0.1")
	var recs []tracer.Record
	if code != 0 || json.Unmarshal([]byte(out), &recs) != nil || len(recs) != 2 || recs[0].Proto != "tcp" || recs[1].ID != recs[0].ID+1 {
		t.Fatalf("tcp json: exit %d\n%s%s", code, out, errOut)
	}
	if got := netip.MustParseAddrPort(recs[0].VIP); got.String() != ln.Addr().String() {
		t.Fatalf("vip %s", got)
	}
	// Nobody answers: a clear error after --timeout.
	quiet, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer quiet.Close()
	_, errOut, code = run("--vip", quiet.LocalAddr().String(), "--timeout", "300ms")
	if code != 1 || !strings.Contains(errOut, "no trace record within 300ms") {
		t.Fatalf("no answer: exit %d %q", code, errOut)
	}
}
