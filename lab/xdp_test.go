package lab

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
)

// reflectPort is the UDP port the test's XDP program bounces.
const reflectPort = 9999

// reflector returns an XDP program that bounces IPv4 UDP datagrams to
// reflectPort back to their sender with XDP_TX: it swaps the Ethernet
// addresses, the IPv4 addresses and the UDP ports, which changes neither
// checksum. Everything else passes.
func reflector(t *testing.T) *ebpf.Program {
	t.Helper()
	swap := func(a, b int16, size asm.Size) asm.Instructions {
		return asm.Instructions{
			asm.LoadMem(asm.R5, asm.R2, a, size),
			asm.LoadMem(asm.R6, asm.R2, b, size),
			asm.StoreMem(asm.R2, a, asm.R6, size),
			asm.StoreMem(asm.R2, b, asm.R5, size),
		}
	}
	port := int32(reflectPort>>8 | (reflectPort&0xff)<<8) // big-endian on the wire, read little-endian
	insns := asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Word), // xdp_md->data
		asm.LoadMem(asm.R3, asm.R1, 4, asm.Word), // xdp_md->data_end
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, 14+20+8),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 12, asm.Half), // EtherType
		asm.JNE.Imm(asm.R5, 0x0008, "pass"),       // ETH_P_IP
		asm.LoadMem(asm.R5, asm.R2, 14, asm.Byte), // version, IHL
		asm.JNE.Imm(asm.R5, 0x45, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 14+9, asm.Byte), // protocol
		asm.JNE.Imm(asm.R5, 17, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 14+20+2, asm.Half), // UDP destination port
		asm.JNE.Imm(asm.R5, port, "pass"),
	}
	insns = append(insns, swap(0, 6, asm.Word)...)         // MAC addresses, first 4 bytes
	insns = append(insns, swap(4, 10, asm.Half)...)        // and last 2
	insns = append(insns, swap(14+12, 14+16, asm.Word)...) // IPv4 addresses
	insns = append(insns, swap(14+20, 14+22, asm.Half)...) // UDP ports
	insns = append(insns,
		asm.Mov.Imm(asm.R0, 3), // XDP_TX
		asm.Return(),
		asm.Mov.Imm(asm.R0, 2).WithSymbol("pass"), // XDP_PASS
		asm.Return(),
	)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "lab_reflect", Type: ebpf.XDP, License: "GPL", Instructions: insns})
	if err != nil {
		t.Fatalf("load XDP program: %v", err)
	}
	t.Cleanup(func() { prog.Close() })
	return prog
}

// TestXDPTxReachesBridge checks the veth setup xlb's forwarding depends on:
// frames that the node's XDP program (native mode) sends back out of eth0
// with XDP_TX cross the switch and reach a backend, promptly, one after the
// other. It then logs what happens without the switch port's XDP program
// and with transmit checksum offload on (see the package doc).
func TestXDPTxReachesBridge(t *testing.T) {
	l := newTestLab(t, Config{Backends: 1, Routing: RouteNone})
	node, b1 := l.Nodes[0], l.Backends[0]
	prog := reflector(t)
	var xl link.Link
	err := node.Do(func() error {
		ifc, err := net.InterfaceByName(node.Iface)
		if err != nil {
			return err
		}
		xl, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifc.Index, Flags: link.XDPDriverMode})
		return err
	})
	if err != nil {
		t.Fatalf("attach XDP (native) to %s in %s: %v", node.Iface, node.Name, err)
	}
	defer xl.Close()

	pc, err := b1.ListenPacket("udp4", netip.AddrPortFrom(b1.Addr4, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	to := net.UDPAddrFromAddrPort(netip.AddrPortFrom(node.Addr4, reflectPort))
	// bounce sends payload to the node and waits for it to come back.
	bounce := func(payload string) error {
		if _, err := pc.WriteTo([]byte(payload), to); err != nil {
			return err
		}
		buf := make([]byte, 1500)
		pc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return err
			}
			if string(buf[:n]) == payload && from.String() == to.String() {
				return nil
			}
		}
	}
	for i := range 5 {
		if err := bounce(fmt.Sprintf("bounce-%d", i)); err != nil {
			t.Fatalf("bounce %d: datagram not reflected by XDP_TX within 300 ms: %v", i, err)
		}
	}
	st, err := node.IfaceStats(node.Iface)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s: 5 datagrams reflected with XDP_TX; counters %+v", node.Iface, st)

	// For the record: the same without the port's XDP program, with GRO
	// off and then on.
	port, err := l.Switch.nl.LinkByName(node.Short)
	if err != nil {
		t.Fatal(err)
	}
	setPortProg := func(fd int) {
		t.Helper()
		if err := l.Switch.Do(func() error { return netlink.LinkSetXdpFdWithFlags(port, fd, nl.XDP_FLAGS_DRV_MODE) }); err != nil {
			t.Fatal(err)
		}
	}
	setPortProg(-1)
	for _, gro := range []bool{false, true} {
		if err := l.Switch.SetFeature(node.Short, FeatureGRO, gro); err != nil {
			t.Fatal(err)
		}
		var got []string
		for i := range 3 {
			got = append(got, fmt.Sprint(bounce(fmt.Sprintf("noprog-gro%v-%d", gro, i)) == nil))
		}
		t.Logf("switch port without XDP program, GRO %v: 3 bounces arrived within 300 ms: %s", gro, strings.Join(got, " "))
	}
	if err := l.Switch.SetFeature(node.Short, FeatureGRO, false); err != nil {
		t.Fatal(err)
	}
	pass, err := loadPassProgram()
	if err != nil {
		t.Fatal(err)
	}
	defer pass.Close()
	setPortProg(pass.FD())
	pc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	for { // drain late reflections
		if _, _, err := pc.ReadFrom(make([]byte, 1500)); err != nil {
			break
		}
	}
	if err := bounce("restored"); err != nil {
		t.Fatalf("after restoring the port program: %v", err)
	}

	// And with transmit checksum offload on at the sender (the lab turns it
	// off; on 6.18 the reflected datagram arrives either way).
	if err := b1.SetFeature(b1.Iface, FeatureTxCsum, true); err != nil {
		t.Fatal(err)
	}
	csumErrs := udpInCsumErrors(t, b1.NS)
	err = bounce("csum-offload")
	csumErrs = udpInCsumErrors(t, b1.NS) - csumErrs
	if err := b1.SetFeature(b1.Iface, FeatureTxCsum, false); err != nil {
		t.Fatal(err)
	}
	t.Logf("sender with tx checksum offload on: bounce error %v, Udp InCsumErrors +%d", err, csumErrs)
}

// udpInCsumErrors reads Udp InCsumErrors from /proc/thread-self/net/snmp
// inside ns (/proc/self/net would show the host's).
func udpInCsumErrors(t *testing.T, ns *NS) int {
	t.Helper()
	var b []byte
	if err := ns.Do(func() (err error) { b, err = os.ReadFile("/proc/thread-self/net/snmp"); return err }); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Udp:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, n := range names {
			if n == "InCsumErrors" && i < len(f) {
				v, _ := strconv.Atoi(f[i])
				return v
			}
		}
	}
	t.Fatalf("no Udp InCsumErrors in %s snmp", ns.Name)
	return 0
}
