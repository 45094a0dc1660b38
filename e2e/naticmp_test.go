package e2e

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/testenv"
	"github.com/xlbproject/xlb/lab"
	"golang.org/x/sys/unix"
)

// The UDP service whose backends have nothing on their port: each
// datagram makes the backend's kernel send ICMP port-unreachable.
const (
	natRefusedVIPPort     = 9999
	natRefusedBackendPort = 7999
)

// TestNATICMP: ICMP errors about NAT flows, rewritten both ways by the
// node, between real kernels.
//
//   - to the backend: a router on the client's side sends frag-needed /
//     packet-too-big about a reply (VIP:5001 -> client) of a real TCP
//     connection, as pmtu_test does; the backend's kernel must match it to
//     its own socket (backend:8007 -> client), so its route to the client
//     and the socket's path MTU show the error's MTU.
//   - to the client: a UDP datagram to a NAT service whose backends listen
//     on nothing makes the backend's kernel answer port-unreachable; the
//     client's connected socket must get ECONNREFUSED with the VIP as the
//     offender (IP_RECVERR), which it only does when the quote is its own
//     datagram (client -> VIP:9999) and the source the VIP.
func TestNATICMP(t *testing.T) {
	testenv.RequireCommands(t, "ss")
	weights := []int{1, 1, 1}
	// setupNAT waits for the HTTP service (web4) to forward
	e := setupNAT(t, weights, func(l *lab.Lab) string {
		return nodeHeader(l) + "pools:\n" +
			"  web4: {backends: " + natPool(l, true, weights, natPorts.HTTP) + "}\n" +
			"  echo4: {backends: " + natPool(l, true, weights, natPorts.TCP) + "}\n" +
			"  echo6: {backends: " + natPool(l, false, weights, natPorts.TCP) + "}\n" +
			"  closed4: {backends: " + natPool(l, true, weights, natRefusedBackendPort) + "}\n" +
			"  closed6: {backends: " + natPool(l, false, weights, natRefusedBackendPort) + "}\n" +
			"services:\n" +
			fmt.Sprintf("  - {name: web4, vip: %q, port: 80, protocol: tcp, pools: [web4], method: nat}\n", l.VIP4()) +
			fmt.Sprintf("  - {name: echo4, vip: %q, port: %d, protocol: tcp, pools: [echo4], method: nat}\n", l.VIP4(), lab.DefaultPorts.TCP) +
			fmt.Sprintf("  - {name: echo6, vip: %q, port: %d, protocol: tcp, pools: [echo6], method: nat}\n", l.VIP6(), lab.DefaultPorts.TCP) +
			fmt.Sprintf("  - {name: closed4, vip: %q, port: %d, protocol: udp, pools: [closed4], method: nat}\n", l.VIP4(), natRefusedVIPPort) +
			fmt.Sprintf("  - {name: closed6, vip: %q, port: %d, protocol: udp, pools: [closed6], method: nat}\n", l.VIP6(), natRefusedVIPPort)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, vip := range []netip.Addr{e.lab.VIP4(), e.lab.VIP6()} {
		fam := "IPv4"
		if vip.Is6() {
			fam = "IPv6"
		}
		t.Run(fam+" too big, to the backend", func(t *testing.T) { checkNATTooBig(t, ctx, e, vip) })
		t.Run(fam+" port unreachable, to the client", func(t *testing.T) { checkNATRefused(t, ctx, e, vip) })
	}
	checkNoDrops(t, e.stats(t))
}

// checkNATTooBig sends, from the router to the node, a too-big error about
// the reply of a NAT connection to vip, and checks that the backend
// learnt the error's MTU for that connection.
func checkNATTooBig(t *testing.T, ctx context.Context, e *env, vip netip.Addr) {
	l := e.lab
	client := l.Client.Addr(vip)
	target := netip.AddrPortFrom(vip, lab.DefaultPorts.TCP)
	c, r, backend := dialEcho(t, ctx, l, target)
	name := backend.Short
	baddr := backend.Addr(vip)
	cport := uint16(c.LocalAddr().(*net.TCPAddr).Port)
	routeMTU := func() int {
		out, err := backend.Run(ctx, "ip", "route", "get", client.String(), "from", baddr.String())
		if err != nil {
			t.Fatal(err)
		}
		return lab.RouteMTU(out)
	}
	if m := routeMTU(); m != 0 {
		t.Fatalf("%s has a path MTU %d toward %s before any ICMP", backend.Short, m, client)
	}
	routerMAC, err := l.Router.MAC(l.Router.Iface)
	if err != nil {
		t.Fatal(err)
	}
	nodeMAC, err := l.Nodes[0].MAC(l.Nodes[0].Iface)
	if err != nil {
		t.Fatal(err)
	}
	seq, err := lab.TCPReceiveNext(c)
	if err != nil {
		t.Fatal(err)
	}
	const mtu = 1400
	before := e.stats(t)
	// As the router would send it: about VIP:5001 -> client, to the VIP.
	frame := tooBigFrame(l.Router.Addr(vip), vip, client, target.Port(), cport, seq, mtu, [6]byte(routerMAC), [6]byte(nodeMAC))
	if err := l.Router.SendFrame(l.Router.Iface, frame); err != nil {
		t.Fatal(err)
	}
	got, deadline := 0, time.Now().Add(5*time.Second)
	for got = routeMTU(); got != mtu && time.Now().Before(deadline); got = routeMTU() {
		time.Sleep(50 * time.Millisecond)
	}
	after := e.stats(t)
	t.Logf("too big (MTU %d) about %s -> %s:%d; %s's route to the client: mtu %d; counters: %v",
		mtu, target, client, cport, backend.Short, got, movedCounters(before, after))
	if got != mtu {
		t.Fatalf("%s's path MTU toward %s is %d after the ICMP, want %d", backend.Short, client, got, mtu)
	}
	for _, k := range []string{"nat_icmp", "icmp_frag_needed"} {
		if after[k]-before[k] != 1 {
			t.Errorf("counter %s moved by %d, want 1", k, after[k]-before[k])
		}
	}
	ss, err := backend.Run(ctx, "ss", "-tinH", "state", "established",
		fmt.Sprintf("( sport = :%d and dport = :%d )", natPorts.TCP, cport))
	if err != nil {
		t.Fatal(err)
	}
	if pmtu, _ := lab.SocketPMTU(ss); pmtu != mtu {
		t.Errorf("%s's socket %s:%d -> %s:%d: pmtu %d, want %d:\n%s", backend.Short, baddr, natPorts.TCP, client, cport, pmtu, mtu, ss)
	}
	if got := echoLine(t, c, r, strings.Repeat("x", 3000)); got != name {
		t.Errorf("long message echoed by %s, want %s", got, name)
	}
}

// checkNATRefused sends a datagram to the refused service on vip from a
// connected socket with IP_RECVERR / IPV6_RECVERR and checks the error
// its kernel queued: port unreachable, from the VIP, about the datagram
// to VIP:port.
func checkNATRefused(t *testing.T, ctx context.Context, e *env, vip netip.Addr) {
	before := e.stats(t)
	var got recvErr
	err := e.lab.Client.Do(func() error {
		var err error
		got, err = udpRefused(netip.AddrPortFrom(vip, natRefusedVIPPort), 5*time.Second)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	after := e.stats(t)
	t.Logf("error queue: errno %v, origin %d, type %d, code %d, offender %s, about %s; counters: %v",
		got.errno, got.origin, got.typ, got.code, got.offender, got.dest, movedCounters(before, after))
	wantOrigin, wantType, wantCode := uint8(unix.SO_EE_ORIGIN_ICMP), uint8(3), uint8(3)
	if vip.Is6() {
		wantOrigin, wantType, wantCode = unix.SO_EE_ORIGIN_ICMP6, 1, 4
	}
	if got.errno != unix.ECONNREFUSED || got.origin != wantOrigin || got.typ != wantType || got.code != wantCode {
		t.Errorf("error %v origin %d type %d code %d, want ECONNREFUSED from ICMP origin %d type %d code %d",
			got.errno, got.origin, got.typ, got.code, wantOrigin, wantType, wantCode)
	}
	if got.offender != vip {
		t.Errorf("the error came from %s, want the VIP %s", got.offender, vip)
	}
	if want := netip.AddrPortFrom(vip, natRefusedVIPPort); got.dest != want {
		t.Errorf("the error is about a datagram to %s, want %s", got.dest, want)
	}
	if n := after["nat_icmp_reply"] - before["nat_icmp_reply"]; n != 1 {
		t.Errorf("nat_icmp_reply moved by %d, want 1", n)
	}
}

// recvErr is what an error queue's message said.
type recvErr struct {
	errno     unix.Errno
	origin    uint8
	typ, code uint8
	offender  netip.Addr
	dest      netip.AddrPort // the failed datagram's destination
}

// udpRefused sends one datagram from a connected UDP socket with
// IP(V6)_RECVERR to target and reads the socket's error queue until an
// error comes or timeout passes. Runs in the caller's network namespace.
func udpRefused(target netip.AddrPort, timeout time.Duration) (recvErr, error) {
	var res recvErr
	af, level, opt := unix.AF_INET6, unix.SOL_IPV6, unix.IPV6_RECVERR
	var sa unix.Sockaddr = &unix.SockaddrInet6{Port: int(target.Port()), Addr: target.Addr().As16()}
	if target.Addr().Is4() {
		af, level, opt = unix.AF_INET, unix.SOL_IP, unix.IP_RECVERR
		sa = &unix.SockaddrInet4{Port: int(target.Port()), Addr: target.Addr().As4()}
	}
	fd, err := unix.Socket(af, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return res, err
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, level, opt, 1); err != nil {
		return res, err
	}
	if err := unix.Connect(fd, sa); err != nil {
		return res, err
	}
	if _, err := unix.Write(fd, []byte("anyone there?")); err != nil {
		return res, err
	}
	buf, oob := make([]byte, 512), make([]byte, 512)
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		_, oobn, _, from, err := unix.Recvmsg(fd, buf, oob, unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
		if errors.Is(err, unix.EAGAIN) {
			continue
		}
		if err != nil {
			return res, err
		}
		switch a := from.(type) {
		case *unix.SockaddrInet4:
			res.dest = netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
		case *unix.SockaddrInet6:
			res.dest = netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port))
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return res, err
		}
		for _, m := range msgs {
			if m.Header.Level != int32(level) || m.Header.Type != int32(opt) || len(m.Data) < 16 {
				continue
			}
			res.errno = unix.Errno(binary.NativeEndian.Uint32(m.Data[0:]))
			res.origin, res.typ, res.code = m.Data[4], m.Data[5], m.Data[6]
			off := m.Data[16:] // SO_EE_OFFENDER: the ICMP's source
			if af == unix.AF_INET && len(off) >= 8 {
				res.offender = netip.AddrFrom4([4]byte(off[4:8]))
			} else if len(off) >= 24 {
				res.offender = netip.AddrFrom16([16]byte(off[8:24]))
			}
			return res, nil
		}
		return res, fmt.Errorf("error queue message without an IP(V6)_RECVERR record")
	}
	return res, fmt.Errorf("no error queued within %v: the client never matched an ICMP error to its datagram", timeout)
}

// dialEcho connects the client to the echo service at target and finds
// the backend that answers (its name in the echo); the connection is
// closed at the test's end.
func dialEcho(t *testing.T, ctx context.Context, l *lab.Lab, target netip.AddrPort) (net.Conn, *bufio.Reader, *lab.Host) {
	t.Helper()
	c, err := l.Client.DialContext(ctx, "tcp", target.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := bufio.NewReader(c)
	name := echoLine(t, c, r, "echo hello")
	for _, b := range l.Backends {
		if b.Short == name {
			return c, r, b
		}
	}
	t.Fatalf("reply from %q, not a backend", name)
	return nil, nil, nil
}
