package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/testenv"
	"github.com/xlbproject/xlb/lab"
	"golang.org/x/sys/unix"
)

// fragPort is the UDP port of the fragment-enabled services.
const fragPort = 7777

// rawSender sends Ethernet frames out of one interface of a namespace.
type rawSender struct {
	fd      int
	ifindex int
}

func newRawSender(t *testing.T, h *lab.Host, dev string) *rawSender {
	t.Helper()
	s := &rawSender{fd: -1}
	err := h.Do(func() error {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0) // send only
		if err != nil {
			return err
		}
		s.fd, s.ifindex = fd, ifi.Index
		return nil
	})
	if err != nil {
		t.Fatalf("raw socket in %s on %s: %v", h.Short, dev, err)
	}
	t.Cleanup(func() { unix.Close(s.fd) })
	return s
}

func (s *rawSender) send(frame []byte) error {
	return unix.Sendto(s.fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: s.ifindex})
}

func macOf(t *testing.T, h *lab.Host, dev string) [6]byte {
	t.Helper()
	l, err := h.Netlink().LinkByName(dev)
	if err != nil {
		t.Fatalf("%s %s: %v", h.Short, dev, err)
	}
	return [6]byte(l.Attrs().HardwareAddr)
}

// fragReceiver is the application on every backend: it records each
// datagram to the fragment services by its first line.
type fragReceiver struct {
	mu  sync.Mutex
	got map[string][]received // tag -> arrivals
}

type received struct {
	backend string
	data    []byte
}

func (r *fragReceiver) listen(t *testing.T, b *lab.Host, vip netip.Addr) {
	t.Helper()
	pc, err := b.ListenPacket("udp", netip.AddrPortFrom(vip, fragPort).String())
	if err != nil {
		t.Fatal(err)
	}
	if uc, ok := pc.(*net.UDPConn); ok {
		uc.SetReadBuffer(8 << 20)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			tag, _, _ := bytes.Cut(buf[:n], []byte("\n"))
			r.mu.Lock()
			r.got[string(tag)] = append(r.got[string(tag)], received{b.Short, bytes.Clone(buf[:n])})
			r.mu.Unlock()
		}
	}()
}

func (r *fragReceiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// TestFragmentsAcceptance (docs/DESIGN.md, IP fragments): fragmented UDP datagrams
// of up to 8 KB, IPv4 and IPv6, fragments in order and shuffled, reach two
// xlb nodes by the router's ECMP and, sprayed from the router, fragment by
// fragment over both nodes (redirects, fragments before their first); every
// datagram arrives intact (byte for byte) at the application of the
// backend its unfragmented 5-tuple reaches (a probe datagram of the same
// 5-tuple, sent first, tells which).
func TestFragmentsAcceptance(t *testing.T) {
	testenv.RequireNetns(t)
	testenv.RequireCommands(t, "nsenter", "ip")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l := newLab(ctx, t, lab.Config{Nodes: 2, Backends: 3})
	vip4, vip6 := l.VIP4(), l.VIP6()
	opts := lab.XLBDOptions{Weights: []int{1, 1, 1}}
	opts.Services = append(l.DefaultServices(opts.Ports, "", ""),
		lab.Service{Name: "frag4", VIP: vip4, Port: fragPort, Protocol: "udp", Pools: []string{lab.Pool4}, Encap: "gre"},
		lab.Service{Name: "frag6", VIP: vip6, Port: fragPort, Protocol: "udp", Pools: []string{lab.Pool6}, Encap: "gre"})
	var pool []string
	for _, n := range l.Nodes {
		pool = append(pool, fmt.Sprintf("%q", n.Addr4))
	}
	fragLine := regexp.MustCompile(`(?m)^(  - \{name: frag[46],.*)\}$`)
	var daemons []*lab.Daemon
	for i := range l.Nodes {
		cfg := string(l.XLBDConfig(i, opts))
		cfg = strings.Replace(cfg, "  conntrack_entries:", "  fragment_pool: ["+strings.Join(pool, ", ")+"]\n  conntrack_entries:", 1)
		cfg = fragLine.ReplaceAllString(cfg, "$1, fragments: true}")
		path := filepath.Join(t.TempDir(), fmt.Sprintf("xlbd-%d.yaml", i))
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := l.StartXLBD(ctx, i, path)
		if err != nil {
			t.Fatal(err)
		}
		daemons = append(daemons, d)
	}
	if err := l.WaitForwarding(ctx, netip.AddrPortFrom(vip4, lab.DefaultPorts.HTTP), 30*time.Second, daemons...); err != nil {
		t.Fatal(err)
	}

	rcv := &fragReceiver{got: map[string][]received{}}
	for _, b := range l.Backends {
		rcv.listen(t, b, vip4)
		rcv.listen(t, b, vip6)
	}

	// Senders: the client toward the router (ECMP decides the node), and
	// the router straight to each node (spraying one datagram's fragments).
	client := newRawSender(t, l.Client, l.Client.Iface)
	clientMAC := macOf(t, l.Client, l.Client.Iface)
	routerInMAC := macOf(t, l.Router, "eth0")
	spray := newRawSender(t, l.Router, l.Router.Iface)
	routerLANMAC := macOf(t, l.Router, l.Router.Iface)
	var nodeMACs [][6]byte
	for _, n := range l.Nodes {
		nodeMACs = append(nodeMACs, macOf(t, n, n.Iface))
	}

	rng := rand.New(rand.NewPCG(6, 9))
	type datagram struct {
		flow    packet.Flow
		tag     string
		spray   bool
		shuffle bool
	}
	const total = 1200
	var dgs []datagram
	for i := 0; i < total; i++ {
		v6 := i%2 == 1
		src := netip.AddrFrom4([4]byte{10, 99, 0, byte(10 + i%40)})
		dst := vip4
		if v6 {
			src = netip.MustParseAddr(fmt.Sprintf("fd00:99::%x", 0x10+i%40))
			dst = vip6
		}
		tag := fmt.Sprintf("d%04d", i)
		payload := make([]byte, 1500+rng.IntN(8192-1500-8-len(tag)))
		for j := range payload {
			payload[j] = byte(rng.Uint32())
		}
		payload = append([]byte(tag+"\n"), payload...)
		dgs = append(dgs, datagram{
			flow: packet.Flow{Src: src, Dst: dst, SrcPort: uint16(20000 + i), DstPort: fragPort,
				Proto: packet.ProtoUDP, Payload: payload},
			tag: tag, spray: i%4 >= 2, shuffle: (i/2)%2 == 1,
		})
	}
	eth := func(dst, src [6]byte, ip []byte) []byte {
		et := uint16(packet.EtherIPv4)
		if ip[0]>>4 == 6 {
			et = packet.EtherIPv6
		}
		return packet.Ethernet(dst, src, 0, et, ip)
	}

	waitCount := func(n int, what string, timeout time.Duration) bool {
		deadline := time.Now().Add(timeout)
		for rcv.count() < n && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		return rcv.count() >= n
	}
	statsOf := func() []map[string]uint64 {
		var out []map[string]uint64
		for i := range l.Nodes {
			p, err := datapath.OpenPinned(filepath.Join(datapath.BPFFSRoot, l.NodeName(i)))
			if err != nil {
				t.Fatal(err)
			}
			st, err := p.Stats()
			p.Close()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, st)
		}
		return out
	}
	atStart := statsOf()
	// 1. Probes: the unfragmented 5-tuple of each datagram, through ECMP.
	// A probe is only a question (which backend?): ones lost while the
	// router resolves neighbours are asked again.
	for try := 0; ; try++ {
		sent := 0
		for _, d := range dgs {
			rcv.mu.Lock()
			_, ok := rcv.got["p"+d.tag]
			rcv.mu.Unlock()
			if ok {
				continue
			}
			p := d.flow
			p.Payload = []byte("p" + d.tag + "\n")
			if err := client.send(eth(routerInMAC, clientMAC, p.IP())); err != nil {
				t.Fatal(err)
			}
			if sent++; sent%100 == 0 {
				time.Sleep(10 * time.Millisecond)
			}
		}
		if waitCount(total, "probes", 3*time.Second) {
			break
		}
		if try == 4 {
			t.Fatalf("probes: %d of %d arrived after 5 tries", rcv.count(), total)
		}
		t.Logf("probes: %d of %d arrived; asking again", rcv.count(), total)
	}
	// The router spread the probes (by source and destination, as it does
	// fragments) over both nodes.
	afterProbes := statsOf()
	var spread []uint64
	for i := range afterProbes {
		n := afterProbes[i]["forward_tx"] + afterProbes[i]["forward_redirect"] - atStart[i]["forward_tx"] - atStart[i]["forward_redirect"]
		if n == 0 {
			t.Fatalf("node n%d forwarded no probe: ECMP did not spread the sources", i+1)
		}
		spread = append(spread, n)
	}
	t.Logf("probes forwarded per node (router ECMP): %v", spread)
	want := map[string]string{}
	rcv.mu.Lock()
	for _, d := range dgs {
		a := rcv.got["p"+d.tag]
		if len(a) != 1 {
			t.Fatalf("probe %s arrived %d times", d.tag, len(a))
		}
		want[d.tag] = a[0].backend
	}
	rcv.mu.Unlock()

	before := statsOf()

	// 2. The datagrams, fragmented (IP datagrams of at most 40 + 8 + 1232
	// bytes: with a GRE redirect over IPv4 (24) and GRE to an IPv6
	// backend (44) they fit the LAN's 1600).
	frags := 0
	for i, d := range dgs {
		fr := packet.Fragment(d.flow, uint32(0x1000+i), 1232)
		frags += len(fr)
		if d.shuffle {
			rng.Shuffle(len(fr), func(a, b int) { fr[a], fr[b] = fr[b], fr[a] })
		}
		for _, f := range fr {
			var err error
			if d.spray {
				err = spray.send(eth(nodeMACs[rng.IntN(len(nodeMACs))], routerLANMAC, f))
			} else {
				err = client.send(eth(routerInMAC, clientMAC, f))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if i%25 == 24 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if !waitCount(2*total, "fragmented datagrams", 20*time.Second) {
		t.Logf("fragmented datagrams: %d of %d arrived", rcv.count()-total, total)
	}
	time.Sleep(500 * time.Millisecond) // duplicates, if any, would come now

	rcv.mu.Lock()
	wrong, dup := 0, 0
	for _, d := range dgs {
		a := rcv.got[d.tag]
		if len(a) != 1 {
			dup++
			continue
		}
		if !bytes.Equal(a[0].data, d.flow.Payload) {
			t.Errorf("%s arrived changed (%d bytes, sent %d)", d.tag, len(a[0].data), len(d.flow.Payload))
		}
		if a[0].backend != want[d.tag] {
			wrong++
		}
	}
	rcv.mu.Unlock()
	if wrong > 0 || dup > 0 {
		t.Fatalf("%d datagrams at another backend than their flow's, %d not exactly once", wrong, dup)
	}

	after := statsOf()
	sum := func(name string) (s uint64) {
		for i := range after {
			s += after[i][name] - before[i][name]
		}
		return s
	}
	perNode := ""
	for i := range after {
		perNode += fmt.Sprintf(" n%d: first %d forward %d redirect %d from_peer %d held %d release %d;", i+1,
			after[i]["frag_first"]-before[i]["frag_first"], after[i]["frag_forward"]-before[i]["frag_forward"],
			after[i]["frag_redirect"]-before[i]["frag_redirect"], after[i]["frag_from_peer"]-before[i]["frag_from_peer"],
			after[i]["frag_held"]-before[i]["frag_held"], after[i]["frag_release"]-before[i]["frag_release"])
	}
	t.Logf("%d datagrams (%d IPv4, %d IPv6; 1.5-8 KB) in %d fragments: %d received intact at their flow's backend;%s",
		total, total/2, total/2, frags, total, perNode)
	if sum("frag_first") != total || sum("frag_first")+sum("frag_forward") != uint64(frags) {
		t.Fatalf("first %d forward %d, want %d and %d in all", sum("frag_first"), sum("frag_forward"), total, frags)
	}
	if sum("frag_redirect") == 0 || sum("frag_redirect") != sum("frag_from_peer") || sum("frag_held") == 0 {
		t.Fatalf("redirect %d from_peer %d held %d: the paths were not exercised", sum("frag_redirect"), sum("frag_from_peer"), sum("frag_held"))
	}
	for i := range after {
		if after[i]["frag_first"]-before[i]["frag_first"] == 0 {
			t.Fatalf("node n%d recorded no first fragment: the pool did not spread datagrams", i+1)
		}
	}
	// xlbd's holders (xlbctl stats): every held fragment released, none
	// expired or over the bound.
	xlbctl, err := l.Binary("xlbctl")
	if err != nil {
		t.Fatal(err)
	}
	counter := regexp.MustCompile(`(?m)^(frag_[a-z_]+)\s+(\d+)`)
	var released uint64
	for i, n := range l.Nodes {
		out, err := n.Run(ctx, xlbctl, "--socket", l.APISocket(i), "stats")
		if err != nil {
			t.Fatalf("xlbctl stats on n%d: %v\n%s", i+1, err, out)
		}
		st := map[string]uint64{}
		for _, m := range counter.FindAllStringSubmatch(string(out), -1) {
			var v uint64
			fmt.Sscan(m[2], &v)
			st[m[1]] = v
		}
		if st["frag_released"] != after[i]["frag_held"]-after[i]["frag_hold_fail"] || st["frag_expired"] != 0 || st["frag_hold_overflow"] != 0 {
			t.Fatalf("n%d holder: released %d expired %d overflow %d; the program held %d", i+1,
				st["frag_released"], st["frag_expired"], st["frag_hold_overflow"], after[i]["frag_held"])
		}
		released += st["frag_released"]
	}
	t.Logf("held by xlbd and released through the program: %d fragments (0 expired, 0 over the bound)", released)
}
