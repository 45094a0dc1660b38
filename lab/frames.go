package lab

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// MAC returns the hardware address of dev in n.
func (n *NS) MAC(dev string) (net.HardwareAddr, error) {
	l, err := n.nl.LinkByName(dev)
	if err != nil {
		return nil, fmt.Errorf("%s in %s: %w", dev, n.Name, err)
	}
	return l.Attrs().HardwareAddr, nil
}

// SendFrame transmits frame, a whole Ethernet frame, on dev of n through a
// raw AF_PACKET socket: as it is, without routing or neighbour lookup. The
// frame goes to whichever host its destination MAC names, so a test can
// steer a packet to one node where the router would pick by hash.
func (n *NS) SendFrame(dev string, frame []byte) error {
	if len(frame) < 14 {
		return fmt.Errorf("frame of %d bytes: shorter than an Ethernet header", len(frame))
	}
	l, err := n.nl.LinkByName(dev)
	if err != nil {
		return fmt.Errorf("%s in %s: %w", dev, n.Name, err)
	}
	return n.Do(func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("packet socket in %s: %w", n.Name, err)
		}
		defer unix.Close(fd)
		sa := &unix.SockaddrLinklayer{Ifindex: l.Attrs().Index, Halen: 6,
			Protocol: htons(binary.BigEndian.Uint16(frame[12:14]))}
		copy(sa.Addr[:], frame[:6])
		if err := unix.Sendto(fd, frame, 0, sa); err != nil {
			return fmt.Errorf("send frame on %s in %s: %w", dev, n.Name, err)
		}
		return nil
	})
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// tcpRecvQueue is TCP_RECV_QUEUE of linux/tcp.h (TCP_REPAIR_QUEUE values).
const tcpRecvQueue = 1

// TCPReceiveNext returns the next sequence number c expects from its peer
// (the kernel's rcv_nxt), read in TCP repair mode (TCP_REPAIR,
// TCP_REPAIR_QUEUE = receive queue, TCP_QUEUE_SEQ; needs CAP_NET_ADMIN).
// When the peer has nothing unacknowledged in flight this is the peer's
// snd_nxt, the one sequence number an ICMP error about the peer's next
// segment may carry and still be accepted (Linux ignores ICMP errors whose
// sequence number is outside snd_una..snd_nxt). Leaving repair mode makes
// the kernel send one window probe; the connection is otherwise unchanged.
func TCPReceiveNext(c net.Conn) (uint32, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, fmt.Errorf("%T is not a socket", c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var seq int
	var serr error
	err = raw.Control(func(fd uintptr) {
		s := int(fd)
		if serr = unix.SetsockoptInt(s, unix.IPPROTO_TCP, unix.TCP_REPAIR, 1); serr != nil {
			serr = fmt.Errorf("TCP_REPAIR on: %w", serr)
			return
		}
		defer func() {
			if err := unix.SetsockoptInt(s, unix.IPPROTO_TCP, unix.TCP_REPAIR, 0); err != nil {
				serr = errors.Join(serr, fmt.Errorf("TCP_REPAIR off: %w", err))
			}
		}()
		if serr = unix.SetsockoptInt(s, unix.IPPROTO_TCP, unix.TCP_REPAIR_QUEUE, tcpRecvQueue); serr != nil {
			serr = fmt.Errorf("TCP_REPAIR_QUEUE: %w", serr)
			return
		}
		if seq, serr = unix.GetsockoptInt(s, unix.IPPROTO_TCP, unix.TCP_QUEUE_SEQ); serr != nil {
			serr = fmt.Errorf("TCP_QUEUE_SEQ: %w", serr)
		}
	})
	if err != nil {
		return 0, err
	}
	return uint32(seq), serr
}

var (
	routeMTU = regexp.MustCompile(`\bmtu (\d+)\b`)
	ssPMTU   = regexp.MustCompile(`\bpmtu:(\d+)\b`)
	ssMSS    = regexp.MustCompile(`\bmss:(\d+)\b`)
)

// RouteMTU returns the path MTU that `ip route get` reports in output (a
// cached exception: "mtu N"), or 0 when it shows none.
func RouteMTU(output []byte) int {
	m := routeMTU.FindSubmatch(output)
	if m == nil {
		return 0
	}
	v, _ := strconv.Atoi(string(m[1]))
	return v
}

// SocketPMTU returns the path MTU and MSS that `ss -tin` reports in output
// for a single socket ("pmtu:N", "mss:N"; 0 when absent).
func SocketPMTU(output []byte) (pmtu, mss int) {
	if m := ssPMTU.FindSubmatch(output); m != nil {
		pmtu, _ = strconv.Atoi(string(m[1]))
	}
	if m := ssMSS.FindSubmatch(output); m != nil {
		mss, _ = strconv.Atoi(string(m[1]))
	}
	return pmtu, mss
}
