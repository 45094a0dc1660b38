package prober

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/state"
	"golang.org/x/sys/unix"
)

// XDP verdicts a forwarded probe gets (enum xdp_action).
const (
	xdpTX       = 3
	xdpRedirect = 4
)

// probe sends one probe to k and waits for the answer: for TCP a SYN,
// answered by SYN-ACK or RST (either proves the backend got it); for UDP a
// datagram, answered by any datagram from the VIP's port.
func (p *Prober) probe(ctx context.Context, k state.VIPKey) Result {
	r := Result{VIP: k, CheckedAt: time.Now()}
	lat, err := p.exchange(ctx, k)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	r.Up, r.Latency = true, lat
	return r
}

func (p *Prober) exchange(ctx context.Context, k state.VIPKey) (time.Duration, error) {
	src := p.o.Src4
	if k.Addr.Is6() {
		src = p.o.Src6
	}
	if !src.IsValid() {
		return 0, errors.New("no node address of the VIP's family to probe from")
	}
	port, release, err := reservePort(src, k.Proto)
	if err != nil {
		return 0, err
	}
	defer release()
	raw, err := net.ListenIP(rawNetwork(k), &net.IPAddr{IP: src.AsSlice()})
	if err != nil {
		return 0, fmt.Errorf("raw socket: %w", err)
	}
	defer raw.Close()
	dport := k.Port
	if dport == 0 {
		dport = 1 // an all-ports VIP: any port is forwarded
	}
	f := packet.Flow{Src: src, Dst: k.Addr, SrcPort: port, DstPort: dport, Proto: k.Proto}
	if k.Proto == packet.ProtoTCP {
		f.TCPFlags = packet.SYN
	}
	sent := time.Now()
	verdict, err := p.o.Send(f)
	if err != nil {
		return 0, err
	}
	if verdict != xdpTX && verdict != xdpRedirect {
		return 0, fmt.Errorf("the forwarder did not forward the probe (verdict %d)", verdict)
	}
	if err := awaitAnswer(ctx, raw, k, dport, port, p.o.Timeout); err != nil {
		return 0, err
	}
	return time.Since(sent), nil
}

func rawNetwork(k state.VIPKey) string {
	fam := "ip4:"
	if k.Addr.Is6() {
		fam = "ip6:"
	}
	return fmt.Sprintf("%s%d", fam, k.Proto)
}

// reservePort binds a socket of the probe's protocol (not listening) to
// an ephemeral port of src, so no other socket takes the port while the
// answer is awaited; a TCP answer then meets no connection and the kernel
// resets it, which also ends the backend's half-open connection.
func reservePort(src netip.Addr, proto uint8) (uint16, func(), error) {
	fam, typ := unix.AF_INET, unix.SOCK_STREAM
	if src.Is6() {
		fam = unix.AF_INET6
	}
	if proto == packet.ProtoUDP {
		typ = unix.SOCK_DGRAM
	}
	fd, err := unix.Socket(fam, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, nil, fmt.Errorf("probe port: %w", err)
	}
	var sa unix.Sockaddr
	if src.Is6() {
		sa = &unix.SockaddrInet6{Addr: src.As16()}
	} else {
		sa = &unix.SockaddrInet4{Addr: src.As4()}
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return 0, nil, fmt.Errorf("probe port on %s: %w", src, err)
	}
	got, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return 0, nil, fmt.Errorf("probe port: %w", err)
	}
	port := 0
	switch a := got.(type) {
	case *unix.SockaddrInet4:
		port = a.Port
	case *unix.SockaddrInet6:
		port = a.Port
	}
	return uint16(port), func() { unix.Close(fd) }, nil
}

// awaitAnswer reads the raw socket until the answer to the probe from
// port to k (dport) arrives or the deadline passes.
func awaitAnswer(ctx context.Context, raw *net.IPConn, k state.VIPKey, dport, port uint16, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	raw.SetReadDeadline(deadline)
	buf := make([]byte, 2048)
	for {
		n, from, err := raw.ReadFrom(buf)
		if err != nil {
			return fmt.Errorf("no answer from %s within %v", k, timeout)
		}
		a, _ := netip.AddrFromSlice(from.(*net.IPAddr).IP)
		if a.Unmap() != k.Addr || n < 8 {
			continue
		}
		seg := buf[:n]
		if binary.BigEndian.Uint16(seg[0:2]) != dport || binary.BigEndian.Uint16(seg[2:4]) != port {
			continue
		}
		if k.Proto != packet.ProtoTCP || (n >= 14 && seg[13]&(packet.SYN|packet.RST) != 0) {
			return nil
		}
	}
}
