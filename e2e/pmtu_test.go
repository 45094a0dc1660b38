package e2e

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/maglev"
	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/testenv"
	"github.com/xlbproject/xlb/lab"
)

// TestICMPFragNeededLowersBackendPMTU is the end-to-end test of ICMP
// handling (docs/DESIGN.md, ICMP): an ICMP fragmentation-needed (IPv4) / packet-too-big
// (IPv6) about a VIP flow reaches the flow's backend, whose stack lowers
// its path MTU toward the client, both when it arrives at the node that
// carries the flow and at the other node, which holds no conntrack entry
// for it.
//
// Two xlb nodes behind the router's ECMP route. A real TCP connection runs
// client -> VIP -> backend (DSR: the backend answers from the VIP). The
// error is crafted as a router on the return path would send it: from the
// router's LAN address to the VIP, embedding the header of the backend's
// next segment (VIP:port -> client:port, sequence number = the client's
// rcv_nxt, read in TCP repair mode, so the backend's stack accepts it as
// within snd_una..snd_nxt). The router sends it out of its LAN port to one
// node's MAC: first the node whose conntrack holds the flow (MTU 1400),
// then the other one (MTU 1300; a lower value, so the second step shows
// its own effect); last, to the flow's node again, one with a sequence
// number outside the window (MTU 1280, which the stack must ignore)
// followed by a valid one (MTU 1290: seen only if the first was ignored). After each: `ip route get CLIENT from VIP` in the
// backend shows exactly that MTU, the socket's path MTU (ss: pmtu) is
// that MTU and its MSS fits in it, the receiving node's icmp_frag_needed
// counter moved by one and the other's not, the other node still tracks
// nothing (the lookup is read-only) and no other backend learnt an MTU.
// Last, a 3000-byte message is echoed over the connection (the backend now
// sends smaller segments).
func TestICMPFragNeededLowersBackendPMTU(t *testing.T) {
	testenv.RequireNetns(t)
	testenv.RequireCommands(t, "nsenter", "ip", "ss")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := newLab(ctx, t, lab.Config{Nodes: 2}) // static 2-way ECMP route
	var daemons []*lab.Daemon
	for i := range l.Nodes {
		cfg, err := l.WriteXLBDConfig(i, lab.XLBDOptions{})
		if err != nil {
			t.Fatal(err)
		}
		d, err := l.StartXLBD(ctx, i, cfg)
		if err != nil {
			t.Fatal(err)
		}
		daemons = append(daemons, d)
	}
	for _, vip := range []netip.Addr{l.VIP4(), l.VIP6()} {
		if err := l.WaitForwarding(ctx, netip.AddrPortFrom(vip, lab.DefaultPorts.HTTP), 20*time.Second, daemons...); err != nil {
			t.Fatal(err)
		}
	}
	for _, vip := range []netip.Addr{l.VIP4(), l.VIP6()} {
		name := "IPv4 frag-needed"
		if vip.Is6() {
			name = "IPv6 packet-too-big"
		}
		t.Run(name, func(t *testing.T) { checkPMTU(t, ctx, l, vip) })
	}
}

func checkPMTU(t *testing.T, ctx context.Context, l *lab.Lab, vip netip.Addr) {
	client := l.Client.Addr(vip)
	target := netip.AddrPortFrom(vip, lab.DefaultPorts.TCP)
	c, r, backend := dialEcho(t, ctx, l, target) // naticmp_test.go
	name := backend.Short
	cport := uint16(c.LocalAddr().(*net.TCPAddr).Port)
	flow := maglev.Tuple{Src: client, Dst: vip, SrcPort: cport, DstPort: target.Port(), Proto: packet.ProtoTCP}

	pinned := make([]*datapath.Pinned, len(l.Nodes))
	for i := range l.Nodes {
		p, err := datapath.OpenPinned(filepath.Join(datapath.BPFFSRoot, l.NodeName(i)))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		pinned[i] = p
	}
	tracked := func(i int) int {
		e, err := pinned[i].FlowEntries(flow)
		if err != nil {
			t.Fatal(err)
		}
		return len(e)
	}
	carrier := -1
	for i := range l.Nodes {
		if tracked(i) > 0 {
			if carrier >= 0 {
				t.Fatalf("flow %v tracked on n%d and n%d; the router sends a flow to one node", flow, carrier+1, i+1)
			}
			carrier = i
		}
	}
	if carrier < 0 {
		t.Fatalf("flow %v tracked on no node", flow)
	}
	other := 1 - carrier
	t.Logf("flow %s:%d -> %v served by %s, carried by n%d; n%d does not track it",
		client, cport, target, name, carrier+1, other+1)

	routeMTU := func(h *lab.Host) int {
		out, err := h.Run(ctx, "ip", "route", "get", client.String(), "from", vip.String())
		if err != nil {
			t.Fatal(err)
		}
		return lab.RouteMTU(out)
	}
	for _, b := range l.Backends {
		if m := routeMTU(b); m != 0 {
			t.Fatalf("%s has a path MTU %d toward %s before any ICMP", b.Short, m, client)
		}
	}
	routerMAC, err := l.Router.MAC(l.Router.Iface)
	if err != nil {
		t.Fatal(err)
	}
	stats := func(i int) map[string]uint64 {
		st, err := pinned[i].Stats()
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	counter := func(i int) uint64 { return stats(i)["icmp_frag_needed"] }

	for _, step := range []struct {
		node  int
		mtu   int
		what  string
		bogus bool
	}{
		{carrier, 1400, "the flow's node", false},
		{other, 1300, "the other node (no conntrack entry)", false},
		{carrier, 1290, "the flow's node, just after one of MTU 1280 out of the window", true},
	} {
		seq, err := lab.TCPReceiveNext(c)
		if err != nil {
			t.Fatalf("read the client's rcv_nxt: %v", err)
		}
		nodeMAC, err := l.Nodes[step.node].MAC(l.Nodes[step.node].Iface)
		if err != nil {
			t.Fatal(err)
		}
		frame := tooBigFrame(l.Router.Addr(vip), vip, client, target.Port(), cport, seq, step.mtu,
			[6]byte(routerMAC), [6]byte(nodeMAC))
		before := []uint64{counter(0), counter(1)}
		allBefore := []map[string]uint64{stats(0), stats(1)}
		sent := uint64(1)
		if step.bogus {
			// The same error with a sequence number the backend has not
			// sent: its stack must ignore it (else the path MTU would be
			// 1280, and the valid 1290 after it, a rise, a no-op).
			bad := tooBigFrame(l.Router.Addr(vip), vip, client, target.Port(), cport, seq+1<<30, 1280,
				[6]byte(routerMAC), [6]byte(nodeMAC))
			if err := l.Router.SendFrame(l.Router.Iface, bad); err != nil {
				t.Fatal(err)
			}
			sent++
		}
		if err := l.Router.SendFrame(l.Router.Iface, frame); err != nil {
			t.Fatal(err)
		}
		got, deadline := 0, time.Now().Add(5*time.Second)
		for got = routeMTU(backend); got != step.mtu && time.Now().Before(deadline); got = routeMTU(backend) {
			time.Sleep(50 * time.Millisecond)
		}
		out, _ := backend.Run(ctx, "ip", "route", "get", client.String(), "from", vip.String())
		t.Logf("ICMP (MTU %d, seq %d) sent to n%d, %s; %s: ip route get %s from %s: %s",
			step.mtu, seq, step.node+1, step.what, backend.Short, client, vip, strings.Join(strings.Fields(string(out)), " "))
		if got != step.mtu {
			for i := range l.Nodes {
				t.Logf("n%d counters that moved: %v", i+1, movedCounters(allBefore[i], stats(i)))
			}
			t.Fatalf("%s's path MTU toward %s is %d after the ICMP via n%d, want %d", backend.Short, client, got, step.node+1, step.mtu)
		}
		for i := range l.Nodes {
			want := before[i]
			if i == step.node {
				want += sent
			}
			if n := counter(i); n != want {
				t.Errorf("n%d icmp_frag_needed %d -> %d, want %d", i+1, before[i], n, want)
			}
		}
		if n := tracked(other); n != 0 {
			t.Errorf("n%d tracks the flow after the ICMP (%d entries): the ICMP path must not insert", other+1, n)
		}
		if n := tracked(carrier); n == 0 {
			t.Errorf("n%d lost the flow's entry", carrier+1)
		}
		ss, err := backend.Run(ctx, "ss", "-tinH", "state", "established",
			fmt.Sprintf("( sport = :%d and dport = :%d )", target.Port(), cport))
		if err != nil {
			t.Fatal(err)
		}
		pmtu, mss := lab.SocketPMTU(ss)
		hdr := 40
		if vip.Is6() {
			hdr = 60
		}
		t.Logf("%s socket: pmtu %d, mss %d", backend.Short, pmtu, mss)
		if pmtu != step.mtu || mss == 0 || mss > step.mtu-hdr {
			t.Errorf("%s's socket of the flow: pmtu %d mss %d, want pmtu %d and mss <= %d:\n%s",
				backend.Short, pmtu, mss, step.mtu, step.mtu-hdr, ss)
		}
	}
	for _, b := range l.Backends {
		if b != backend {
			if m := routeMTU(b); m != 0 {
				t.Errorf("%s (not the flow's backend) learnt path MTU %d toward %s", b.Short, m, client)
			}
		}
	}
	if got := echoLine(t, c, r, strings.Repeat("x", 3000)); got != name {
		t.Errorf("long message echoed by %s, want %s", got, name)
	}
}

// echoLine sends line over the echo connection and returns the backend's
// name from the reply, failing the test on any error or a wrong echo.
func echoLine(t *testing.T, c net.Conn, r *bufio.Reader, line string) string {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
	reply, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	name, got, _ := strings.Cut(strings.TrimSuffix(reply, "\n"), " ")
	if got != line {
		t.Fatalf("echo of %d bytes came back as %d bytes", len(line), len(got))
	}
	return name
}

// tooBigFrame builds the Ethernet frame of an ICMP fragmentation-needed
// (IPv4) or packet-too-big (IPv6) from router to vip about the backend's
// segment vip:vport -> client:cport with sequence number seq, a full-size
// (1500-byte) packet as the router would have dropped it, of which the
// error quotes the IP header and the TCP header.
func tooBigFrame(router, vip, client netip.Addr, vport, cport uint16, seq uint32, mtu int, src, dst [6]byte) []byte {
	tcp := make([]byte, 20)
	binary.BigEndian.PutUint16(tcp[0:], vport)
	binary.BigEndian.PutUint16(tcp[2:], cport)
	binary.BigEndian.PutUint32(tcp[4:], seq)
	tcp[12] = 5 << 4
	tcp[13] = packet.ACK | packet.PSH
	binary.BigEndian.PutUint16(tcp[14:], 502)
	if vip.Is4() {
		inner := packet.IPv4(vip, client, packet.ProtoTCP, 0, 63, nil, tcp)
		binary.BigEndian.PutUint16(inner[2:], 1500)   // the quoted packet's own length
		binary.BigEndian.PutUint16(inner[6:], 0x4000) // DF
		binary.BigEndian.PutUint16(inner[10:], 0)
		binary.BigEndian.PutUint16(inner[10:], packet.Checksum(inner[:20]))
		icmp := packet.ICMPv4(packet.ICMPUnreach, packet.ICMPFragNeeded, uint32(mtu), inner)
		return packet.Ethernet(dst, src, 0, packet.EtherIPv4, packet.IPv4(router, vip, packet.ProtoICMP, 0, 64, nil, icmp))
	}
	inner := packet.IPv6(vip, client, packet.ProtoTCP, 0, 63, nil, tcp)
	binary.BigEndian.PutUint16(inner[4:], 1500-40)
	icmp := packet.ICMPv6(router, vip, packet.ICMPv6PacketTooBig, 0, uint32(mtu), inner)
	return packet.Ethernet(dst, src, 0, packet.EtherIPv6, packet.IPv6(router, vip, packet.ProtoICMPv6, 0, 64, nil, icmp))
}

// movedCounters lists the counters that differ between two reads, as
// "name +delta", for a failure's log.
func movedCounters(before, after map[string]uint64) []string {
	var out []string
	for name, n := range after {
		if d := n - before[name]; d != 0 {
			out = append(out, fmt.Sprintf("%s +%d", name, d))
		}
	}
	slices.Sort(out)
	return out
}
