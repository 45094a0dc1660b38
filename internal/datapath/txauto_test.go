package datapath

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/xlbproject/xlb/internal/packet"
	"golang.org/x/sys/unix"
)

// TestAutoRefusesWhenNothingDelivers: xdp_mode auto on a veth whose peer
// (in another namespace) is down: no mode delivers, so Open refuses with
// a message that names the peer and says what to do, and attaches
// nothing; with the peer up it attaches (generic: the peer runs no XDP).
func TestAutoRefusesWhenNothingDelivers(t *testing.T) {
	newTestDatapath(t, Options{}) // root and bpffs checks
	inNewNetns(t, func() {
		here, other := vethPeerElsewhere(t) // the peer stays down
		d := newTestDatapath(t, Options{Interface: "xlbt0"})
		d.Close()
		o := d.opts
		o.Mode = ModeAuto
		_, err := Open(o)
		if err == nil || !errors.Is(err, ErrNoTransmit) {
			t.Fatalf("auto with the peer down: %v, want a refusal", err)
		}
		for _, want := range []string{"xdp_mode auto on xlbt0", "no XDP mode delivers", "peer veth xlbt1", "is down",
			"'ip link set xlbt1 up' in the peer's namespace (netns id", "start xlbd again"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("refusal %q lacks %q", err, want)
			}
		}
		if l, _ := netlink.LinkByName("xlbt0"); l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached {
			t.Fatal("a refused start left an XDP program attached")
		}
		inNetns(t, other, here, func() {
			peer, _ := netlink.LinkByName("xlbt1")
			netlink.LinkSetUp(peer)
		})
		dp, err := Open(o)
		if err != nil {
			t.Fatalf("auto with the peer up: %v", err)
		}
		defer func() { dp.Close(); Cleanup(o.PinDir) }()
		if dp.Mode() != ModeGeneric {
			t.Fatalf("auto with the peer up: mode %s, want generic", dp.Mode())
		}
	})
}

// sendFrames writes n copies of frame to the interface ifindex with a
// packet socket (they arrive on its veth peer).
func sendFrames(t *testing.T, ifindex int, frame []byte, n int) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	sa := &unix.SockaddrLinklayer{Ifindex: ifindex}
	for range n {
		if err := unix.Sendto(fd, frame, 0, sa); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTXCounterCheckJudges: the transmit check's counter comparison alone
// (the veth peer check aside: what it has on a device whose peer it
// cannot see), on real counters: the forwarder answers frames that come
// in on xlbt0 with XDP_TX (fallback gateway); in generic mode the device
// transmits them and the comparison finds nothing; in native mode with a
// peer that runs no XDP program the kernel drops them and the comparison
// reports it with the figures; once the peer runs XDP, fine again.
func TestTXCounterCheckJudges(t *testing.T) {
	newTestDatapath(t, Options{}) // root and bpffs checks
	inNewNetns(t, func() {
		addVeth(t) // xlbt0, xlbt1, both up, in this namespace
		peer, _ := netlink.LinkByName("xlbt1")
		f := packet.Flow{Src: client4, Dst: vip4, SrcPort: 40000, DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: packet.ACK,
			SrcMAC: [6]byte{2, 0, 0, 0, 0, 0x12}, DstMAC: [6]byte{2, 0, 0, 0, 0, 0x11}}
		judge := func(mode Mode) string {
			t.Helper()
			dp, o := openOnTestPins(t, "xlbt0", mode)
			defer func() { dp.Close(); Cleanup(o.PinDir) }()
			if _, err := dp.Apply(fixtureState()); err != nil {
				t.Fatal(err)
			}
			dp.CheckTX() // the baseline
			before, _ := dp.Stats()
			sendFrames(t, peer.Attrs().Index, f.Frame(), 20)
			after, _ := dp.Stats()
			if sent := after["forward_tx"] - before["forward_tx"]; sent < txEvidence {
				t.Fatalf("%s: the forwarder sent %d frames with XDP_TX, want 20", mode, sent)
			}
			dp.CheckTX()
			return dp.tx.counterProblem
		}
		if p := judge(ModeGeneric); p != "" {
			t.Fatalf("generic, delivered: the counter check says %q", p)
		}
		p := judge(ModeNative)
		// (the stack's own packets, IPv6 router solicitations, may count)
		if !strings.Contains(p, "the forwarder sent 20 frames with XDP_TX since the last check but xlbt0 transmitted ") {
			t.Fatalf("native, peer without XDP: the counter check says %q", p)
		}
		attachPassXDP(t, peer)
		if p := judge(ModeNative); p != "" {
			t.Fatalf("native, peer with XDP: the counter check says %q", p)
		}
	})
}

// TestTXCounterCheckDryRunsRace: test runs that return XDP_TX (the
// self-check's probes, traces) count in forward_tx but send nothing; run
// concurrently with the transmit check, none of them may make the check
// count a frame that was never sent (a read of the counters between a
// run and its dry-run note once made the difference wrap to 2^64-1 and
// the check report a black hole on a healthy node).
func TestTXCounterCheckDryRunsRace(t *testing.T) {
	newTestDatapath(t, Options{}) // root and bpffs checks
	inNewNetns(t, func() {
		addVeth(t)
		peer, _ := netlink.LinkByName("xlbt1")
		attachPassXDP(t, peer)
		dp, o := openOnTestPins(t, "xlbt0", ModeNative)
		defer func() { dp.Close(); Cleanup(o.PinDir) }()
		if _, err := dp.Apply(fixtureState()); err != nil {
			t.Fatal(err)
		}
		f := packet.Flow{Src: client4, Dst: vip4, SrcPort: 40000, DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: packet.ACK,
			SrcMAC: [6]byte{2, 0, 0, 0, 0, 0x12}, DstMAC: [6]byte{2, 0, 0, 0, 0, 0x11}}
		done := make(chan error, 1)
		const runs = 20000
		go func() {
			for i := range runs {
				f.SrcPort = uint16(1024 + i%60000)
				if v, _, err := dp.RunPacket(f.Frame()); err != nil || v != XDPTX {
					done <- fmt.Errorf("run %d: verdict %d, %v", i, v, err)
					return
				}
			}
			done <- nil
		}()
		checks := 0
		for {
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				if st := dp.CheckTX(); !st.OK {
					t.Fatalf("after %d dry runs: %s", runs, st.Detail)
				}
				t.Logf("%d dry runs, %d checks among them, no frame counted as sent", runs, checks)
				return
			default:
			}
			checks++
			if st := dp.CheckTX(); !st.OK {
				t.Fatalf("check %d, with dry runs going on: %s", checks, st.Detail)
			}
		}
	})
}
