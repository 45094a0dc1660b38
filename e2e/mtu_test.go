package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/testenv"
	"github.com/xlbproject/xlb/lab"
)

// bulkPort is the TCP port of the bulk transfer services.
const bulkPort = 6000

const bulkSize = 10 << 20

// bulkData is the deterministic content of a transfer.
func bulkData(seed uint64) []byte {
	b := make([]byte, bulkSize)
	r := rand.New(rand.NewPCG(seed, 1))
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// serveBulk runs the bulk server of backend b on vip: a connection that
// starts with "U" is an upload, answered after EOF with "<name>
// <sha256 of the bytes after the U>"; "D" + 8 bytes of seed is a download
// of bulkData(seed), then close.
func serveBulk(t *testing.T, b *lab.Host, vip netip.Addr) {
	t.Helper()
	ln, err := b.Listen("tcp", netip.AddrPortFrom(vip, bulkPort).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				kind, err := r.ReadByte()
				if err != nil {
					return
				}
				if kind == 'U' {
					h := sha256.New()
					io.Copy(h, r)
					fmt.Fprintf(c, "%s %s\n", b.Short, hex.EncodeToString(h.Sum(nil)))
					return
				}
				var seed [8]byte
				if _, err := io.ReadFull(r, seed[:]); err == nil {
					c.Write(bulkData(uint64(seed[0])))
				}
			}()
		}
	}()
}

// TestPlainMTU is the acceptance test of MTU on a plain network
// (docs/ARCHITECTURE.md, "MTU"): 1500 bytes everywhere (client, router,
// node, backends), so every full-size client packet is too big once
// encapsulated. Over one node: UDP datagrams of 2-8 KB (the client's kernel
// sends them as IPv4 fragments, DF clear) all arrive byte-exact at the
// backend their flow goes to (a small datagram of the same socket, sent
// first, tells which), the node fragmenting the fragments further; then a
// 10 MB TCP upload and a 10 MB download through each VIP (IPv4 over GRE,
// IPv6 over IP6IP6) complete byte-exact in bounded time, the client's
// kernel having learnt the path MTU from the node's ICMP errors (its route
// cache shows the advertised MTU).
func TestPlainMTU(t *testing.T) {
	testenv.RequireNetns(t)
	testenv.RequireCommands(t, "nsenter", "ip")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	l := newLab(ctx, t, lab.Config{LANMTU: lab.PlainMTU})
	vip4, vip6 := l.VIP4(), l.VIP6()
	opts := lab.XLBDOptions{}
	opts.Services = append(l.DefaultServices(opts.Ports, "", ""),
		lab.Service{Name: "bulk4", VIP: vip4, Port: bulkPort, Protocol: "tcp", Pools: []string{lab.Pool4}, Encap: "gre"},
		lab.Service{Name: "bulk6", VIP: vip6, Port: bulkPort, Protocol: "tcp", Pools: []string{lab.Pool6}, Encap: "ipip"},
		lab.Service{Name: "frag4", VIP: vip4, Port: fragPort, Protocol: "udp", Pools: []string{lab.Pool4}, Encap: "gre"})
	cfg := regexp.MustCompile(`(?m)^(  - \{name: frag4,.*)\}$`).ReplaceAllString(string(l.XLBDConfig(0, opts)), "$1, fragments: true}")
	path := filepath.Join(t.TempDir(), "xlbd.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := l.StartXLBD(ctx, 0, path)
	if err != nil {
		t.Fatal(err)
	}
	for _, vip := range []netip.Addr{vip4, vip6} {
		if err := l.WaitForwarding(ctx, netip.AddrPortFrom(vip, lab.DefaultPorts.HTTP), 30*time.Second, d); err != nil {
			t.Fatal(err)
		}
	}
	pinned, err := datapath.OpenPinned(filepath.Join(datapath.BPFFSRoot, l.NodeName(0)))
	if err != nil {
		t.Fatal(err)
	}
	defer pinned.Close()
	stats := func() map[string]uint64 {
		s, err := pinned.Stats()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	waitNextHops(t, pinned)
	rcv := &fragReceiver{got: map[string][]received{}}
	for _, b := range l.Backends {
		rcv.listen(t, b, vip4)
		serveBulk(t, b, vip4)
		serveBulk(t, b, vip6)
	}
	// UDP first: a path MTU learnt from the TCP test would make the
	// client's fragments small enough.
	checkFragmentedUDP(t, ctx, l, rcv, vip4)
	if out, err := xlbctl(ctx, l, "stats"); err == nil {
		t.Logf("xlbctl stats (holder): %s", strings.Join(regexp.MustCompile(`(?m)^frag_(needed|inject)\S*\s+\d+`).FindAllString(out, -1), "; "))
	}
	s := stats()
	t.Logf("UDP: too_big_fragment %d, too_big_fragment_fail %d, drop_too_big %d, drop_fragment %d",
		s["too_big_fragment"], s["too_big_fragment_fail"], s["drop_too_big"], s["drop_fragment"])
	if s["too_big_fragment"] == 0 || s["too_big_fragment_fail"] != 0 {
		t.Errorf("too_big_fragment %d, too_big_fragment_fail %d: want fragments handed to xlbd, none failed",
			s["too_big_fragment"], s["too_big_fragment_fail"])
	}
	for _, c := range []struct {
		vip netip.Addr
		mtu int // advertised: 1500 - GRE over IPv4 (24), 1500 - IPv6 outer (40)
	}{{vip4, 1476}, {vip6, 1460}} {
		t.Run(c.vip.String(), func(t *testing.T) { checkBulk(t, ctx, l, c.vip, c.mtu) })
	}
	s = stats()
	t.Logf("TCP: icmp_too_big_sent %d, icmp_too_big_limited %d, drop_too_big %d", s["icmp_too_big_sent"], s["icmp_too_big_limited"], s["drop_too_big"])
	if s["icmp_too_big_sent"] < 2 || s["drop_too_big"] != 0 {
		t.Errorf("icmp_too_big_sent %d (want >= 2: one per family), drop_too_big %d (want 0)", s["icmp_too_big_sent"], s["drop_too_big"])
	}
}

// waitNextHops waits until xlbd has resolved every real's next hop: only
// then is the MTU checked before encapsulation (without, the FIB lookup
// drops too-big packets: drop_too_big).
func waitNextHops(t *testing.T, p *datapath.Pinned) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		svcs, err := p.Services()
		if err != nil {
			t.Fatal(err)
		}
		missing := 0
		for _, sv := range svcs {
			for _, r := range sv.Reals {
				if r.Real.NextHop.MTU == 0 {
					missing++
				}
			}
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d reals without a resolved next hop after 10 s", missing)
		}
	}
}

// xlbctl runs xlbctl against node 0's API socket.
func xlbctl(ctx context.Context, l *lab.Lab, args ...string) (string, error) {
	bin, err := l.Binary("xlbctl")
	if err != nil {
		return "", err
	}
	out, err := l.Nodes[0].Run(ctx, append([]string{bin, "--socket", l.APISocket(0)}, args...)...)
	return string(out), err
}

// checkFragmentedUDP sends 300 datagrams of 2-8 KB over 10 sockets from
// the client to vip; each arrives once, byte-exact, at its socket's
// backend.
func checkFragmentedUDP(t *testing.T, ctx context.Context, l *lab.Lab, rcv *fragReceiver, vip netip.Addr) {
	const socks, per = 10, 30
	rng := rand.New(rand.NewPCG(15, 0))
	want := map[string][]byte{}
	home := map[string]string{} // tag -> the socket's probe tag
	for s := range socks {
		c, err := l.Client.DialContext(ctx, "udp", netip.AddrPortFrom(vip, fragPort).String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		probe := fmt.Sprintf("p%02d", s)
		if _, err := c.Write([]byte(probe + "\n")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		for i := range per {
			tag := fmt.Sprintf("u%02d-%02d", s, i)
			payload := make([]byte, 2000+rng.IntN(8192-2000-8-len(tag)))
			for j := range payload {
				payload[j] = byte(rng.Uint32())
			}
			payload = append([]byte(tag+"\n"), payload...)
			want[tag], home[tag] = payload, probe
			if _, err := c.Write(payload); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for rcv.count() < socks*(per+1) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	bad := 0
	for tag, data := range want {
		got := rcv.got[tag]
		probe := rcv.got[home[tag]]
		switch {
		case len(probe) != 1:
			t.Errorf("probe %s arrived %d times", home[tag], len(probe))
		case len(got) != 1:
			t.Errorf("datagram %s (%d bytes) arrived %d times", tag, len(data), len(got))
		case got[0].backend != probe[0].backend:
			t.Errorf("datagram %s at %s, its flow at %s", tag, got[0].backend, probe[0].backend)
		case !bytes.Equal(got[0].data, data):
			t.Errorf("datagram %s changed on the way", tag)
		default:
			continue
		}
		if bad++; bad > 10 {
			t.Fatal("too many errors")
		}
	}
	t.Logf("%d UDP datagrams of 2-8 KB over %d sockets: %d arrived intact at their flow's backend", len(want), socks, len(want)-bad)
}

// checkBulk uploads and downloads bulkSize bytes through vip and checks
// both byte for byte, within 60 s each, and the client's learnt path MTU.
func checkBulk(t *testing.T, ctx context.Context, l *lab.Lab, vip netip.Addr, mtu int) {
	target := netip.AddrPortFrom(vip, bulkPort).String()
	data := bulkData(7)
	sum := sha256.Sum256(data)
	start := time.Now()
	c, err := l.Client.DialContext(ctx, "tcp", target)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := c.Write(append([]byte("U"), data...)); err != nil {
		t.Fatalf("upload: %v after %v", err, time.Since(start))
	}
	c.(*net.TCPConn).CloseWrite()
	reply, err := io.ReadAll(c)
	c.Close()
	name, got, _ := strings.Cut(strings.TrimSpace(string(reply)), " ")
	if err != nil || got != hex.EncodeToString(sum[:]) {
		t.Fatalf("upload of %d bytes: reply %q, %v after %v; want the sha256 %x", len(data), reply, err, time.Since(start), sum)
	}
	up := time.Since(start)

	start = time.Now()
	c, err = l.Client.DialContext(ctx, "tcp", target)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := c.Write([]byte{'D', 7, 0, 0, 0, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	down, err := io.ReadAll(c)
	c.Close()
	if err != nil || !bytes.Equal(down, data) {
		t.Fatalf("download: %d of %d bytes, equal %v, %v after %v", len(down), len(data), bytes.Equal(down, data), err, time.Since(start))
	}
	out, err := l.Client.Run(ctx, "ip", "route", "get", vip.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: 10 MB upload (to %s) in %v, 10 MB download in %v; client: %s", vip, name, up.Round(time.Millisecond),
		time.Since(start).Round(time.Millisecond), strings.Join(strings.Fields(string(out)), " "))
	if got := lab.RouteMTU(out); got != mtu {
		t.Errorf("client's path MTU toward %s is %d, want %d (from the node's ICMP)", vip, got, mtu)
	}
}
