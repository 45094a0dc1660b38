package health

import (
	"context"
	"net"
	"net/netip"
)

// tcpChecker succeeds when the backend accepts a TCP connection on the port.
type tcpChecker struct {
	port   uint16
	dialer net.Dialer
}

func newTCP(port uint16) *tcpChecker { return &tcpChecker{port: port} }

// Check connects and closes the connection with a reset (SO_LINGER 0), so
// that frequent probes leave no TIME_WAIT sockets behind on this node.
func (c *tcpChecker) Check(ctx context.Context, target netip.Addr) error {
	conn, err := c.dialer.DialContext(ctx, "tcp", netip.AddrPortFrom(target, c.port).String())
	if err != nil {
		return err
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
	return nil
}
