package datapath

import (
	"bytes"
	"net"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/progrun"
)

// TestNATReplyNextHopCache: NAT replies go by the FIB's answer, kept per
// CPU (bpf/nathop.h). In a namespace whose route to the client goes
// through a permanent neighbour: the first reply takes the FIB's MACs; a
// neighbour change is not seen by the next reply of the same length (the
// cached answer), but is by a longer one (the FIB is asked again for a
// length it has not accepted); a reply longer than the egress MTU is never sent by the cache (the FIB
// refuses it: to the kernel), and after the answer's 256 jiffies the
// FIB's new answer is taken.
func TestNATReplyNextHopCache(t *testing.T) {
	newTestDatapath(t, Options{}) // root and bpffs checks
	inNewNetns(t, func() {
		pinCPU(t) // the cache is per CPU
		ifMAC := net.HardwareAddr{2, 0, 0, 0, 0, 0x11}
		link, _ := testVeth(t, ifMAC)
		addr, _ := netlink.ParseAddr("10.0.0.11/24")
		netlink.AddrAdd(link, addr)
		gw := net.ParseIP("10.0.0.1")
		setNeigh := func(last byte) {
			t.Helper()
			if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: link.Attrs().Index, IP: gw, Family: netlink.FAMILY_V4,
				HardwareAddr: net.HardwareAddr{2, 0, 0, 0, 0, last}, State: netlink.NUD_PERMANENT}); err != nil {
				t.Fatal(err)
			}
		}
		setNeigh(0xa1)
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index,
			Dst: &net.IPNet{IP: client4.AsSlice(), Mask: net.CIDRMask(32, 32)}, Gw: gw}); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"/proc/sys/net/ipv4/conf/all/forwarding", "/proc/sys/net/ipv4/conf/xlbt0/forwarding"} {
			if err := os.WriteFile(p, []byte("1"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		d := newTestDatapath(t, Options{Interface: "xlbt0"})
		if _, err := d.Apply(methodsState()); err != nil {
			t.Fatal(err)
		}
		runIf := func(frame []byte) (uint32, []byte) {
			t.Helper()
			r, err := progrun.Run(progrun.XDP{Prog: d.Program(), Data: frame, Out: make([]byte, len(frame)+256),
				Ifindex: link.Attrs().Index, Repeat: 1})
			if err != nil {
				t.Fatal(err)
			}
			return r.Verdict, r.Out
		}
		fwd := methodsFlow(client4, vipNAT4, packet.ProtoTCP, 80)
		if ret, _ := runIf(fwd.Frame()); ret != xdpTX {
			t.Fatalf("forward verdict %d", ret)
		}
		reply := func(n int) []byte {
			r := replyOf(fwd, be4, 8080)
			r.Payload = bytes.Repeat([]byte{0xab}, n)
			return r.Frame()
		}
		expect := func(what string, frame []byte, verdict uint32, mac byte) {
			t.Helper()
			ret, out := runIf(frame)
			if ret != verdict {
				t.Fatalf("%s: verdict %d, want %d", what, ret, verdict)
			}
			if verdict == xdpTX && (!bytes.Equal(out[:6], []byte{2, 0, 0, 0, 0, mac}) || !bytes.Equal(out[6:12], ifMAC)) {
				t.Fatalf("%s: to %x from %x, want to 02:00:00:00:00:%02x from %s", what, out[:6], out[6:12], mac, ifMAC)
			}
		}
		expect("first reply", reply(64), xdpTX, 0xa1)
		setNeigh(0xa2)
		expect("same length, neighbour changed", reply(64), xdpTX, 0xa1)
		expect("longer", reply(200), xdpTX, 0xa2)
		expect("short again", reply(64), xdpTX, 0xa2)
		expect("beyond the egress MTU", reply(1500), xdpPass, 0)
		// An answer lives 256 jiffies: 0.26 s (HZ 1000) to 2.6 s (HZ 100).
		setNeigh(0xa3)
		start := time.Now()
		for {
			ret, out := runIf(reply(64))
			if ret != xdpTX {
				t.Fatalf("reply while the answer ages: verdict %d", ret)
			}
			if out[5] == 0xa3 {
				break
			}
			if out[5] != 0xa2 || time.Since(start) > 3*time.Second {
				t.Fatalf("%v after the neighbour changed the reply goes to %x, want the cached ...:a2 until it expires, then ...:a3",
					time.Since(start).Round(time.Millisecond), out[:6])
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("the cached answer expired after %v", time.Since(start).Round(10*time.Millisecond))
		st, err := d.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if st["nat_reply"] < 5 || st["nat_reply_pass"] != 1 {
			t.Errorf("nat_reply %d (want 5 or more), nat_reply_pass %d (want 1)", st["nat_reply"], st["nat_reply_pass"])
		}
	})
}

// testVeth adds the veth pair xlbt0 (MAC mac) - xlbt1 in the calling
// thread's namespace, both up.
func testVeth(t *testing.T, mac net.HardwareAddr) (link, peer netlink.Link) {
	t.Helper()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "xlbt0", HardwareAddr: mac}, PeerName: "xlbt1"}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	link, _ = netlink.LinkByName("xlbt0")
	peer, _ = netlink.LinkByName("xlbt1")
	netlink.LinkSetUp(link)
	netlink.LinkSetUp(peer)
	return link, peer
}
