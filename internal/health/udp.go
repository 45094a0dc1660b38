package health

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/xlbproject/xlb/internal/config"
)

// udpChecker sends one datagram from a fresh connected socket and succeeds
// when the first reply holds the expected bytes (any reply when none are
// expected). On a connected socket an ICMP port unreachable fails the probe
// at once ("connection refused") instead of at the timeout.
type udpChecker struct {
	port    uint16
	payload []byte
	expect  []byte
	dialer  net.Dialer
}

func newUDP(hc config.HealthCheck) (*udpChecker, error) {
	if len(hc.Payload) == 0 {
		return nil, fmt.Errorf("health check %q: udp needs a payload", hc.Name)
	}
	return &udpChecker{port: hc.Port, payload: hc.Payload, expect: hc.Expect}, nil
}

var replyBufs = sync.Pool{New: func() any { b := make([]byte, maxRead); return &b }}

func (c *udpChecker) Check(ctx context.Context, target netip.Addr) error {
	conn, err := c.dialer.DialContext(ctx, "udp", netip.AddrPortFrom(target, c.port).String())
	if err != nil {
		return err
	}
	defer conn.Close()
	// Unblock the read when ctx ends (deadline or cancellation).
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := conn.Write(c.payload); err != nil {
		return err
	}
	bp := replyBufs.Get().(*[]byte)
	defer replyBufs.Put(bp)
	n, err := conn.Read(*bp)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("no reply: %w", ctx.Err())
		}
		return err
	}
	if len(c.expect) > 0 && !bytes.Contains((*bp)[:n], c.expect) {
		return fmt.Errorf("reply of %d bytes lacks %q", n, c.expect)
	}
	return nil
}
