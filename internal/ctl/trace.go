package ctl

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/xlbproject/xlb/internal/tracer"
)

// DefaultTraceWait is how long 'xlbctl trace' waits for records when
// --timeout is not given.
const DefaultTraceWait = 3 * time.Second

// traceOpts is a parsed 'xlbctl trace' command line.
type traceOpts struct {
	vip    netip.AddrPort
	tcp    bool
	src    netip.AddrPort // port 0: ephemeral; invalid addr: the route's source
	listen netip.AddrPort // port 0: ephemeral; invalid addr: the source address
	count  int
	every  time.Duration // between marked packets
	wait   time.Duration
}

// parseHostPort accepts ADDR or ADDR:PORT ([v6]:PORT).
func parseHostPort(s string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap, nil
	}
	a, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%q is not ADDR or ADDR:PORT", s)
	}
	return netip.AddrPortFrom(a, 0), nil
}

func (c *CLI) parseTrace(args []string) (traceOpts, error) {
	fs := c.flags("trace")
	vip := fs.String("vip", "", "VIP to trace, ADDR:PORT (required)")
	proto := fs.String("proto", "udp", "tcp or udp")
	src := fs.String("src", "", "source ADDR[:PORT] of the traced flow (default: the route's source address, an ephemeral port)")
	listen := fs.String("listen", "", "ADDR[:PORT] the nodes send records to (default: the source address, an ephemeral port)")
	count := fs.Int("count", 1, "marked datagrams (udp) or connections (tcp) to send")
	every := fs.Duration("interval", 0, "pause between marked packets (0: back to back)")
	var o traceOpts
	pos, err := parse(fs, args)
	if err != nil {
		return o, err
	}
	if len(pos) != 0 {
		return o, usagef("trace takes no arguments besides flags: %q", pos)
	}
	if *vip == "" {
		return o, usagef("trace: --vip ADDR:PORT is required")
	}
	if o.vip, err = netip.ParseAddrPort(*vip); err != nil || o.vip.Port() == 0 {
		return o, usagef("trace: --vip %q: want ADDR:PORT with a port", *vip)
	}
	o.vip = netip.AddrPortFrom(o.vip.Addr().Unmap(), o.vip.Port())
	switch strings.ToLower(*proto) {
	case "tcp":
		o.tcp = true
	case "udp":
	default:
		return o, usagef("trace: --proto %q: tcp or udp", *proto)
	}
	if *src != "" {
		if o.src, err = parseHostPort(*src); err != nil {
			return o, usagef("trace: --src: %v", err)
		}
		if o.src.Addr().Unmap().Is4() != o.vip.Addr().Is4() {
			return o, usagef("trace: --src %s and --vip %s are of different families", o.src.Addr(), o.vip.Addr())
		}
	}
	if *listen != "" {
		if o.listen, err = parseHostPort(*listen); err != nil {
			return o, usagef("trace: --listen: %v", err)
		}
		if !tracer.Allowed(o.listen.Addr()) {
			return o, usagef("trace: --listen %s: nodes send records only to a unicast address", o.listen.Addr())
		}
	}
	if *count < 1 || *count > 10000 {
		return o, usagef("trace: --count %d: 1..10000", *count)
	}
	o.count = *count
	if *every < 0 || *every > time.Minute {
		return o, usagef("trace: --interval %v: 0..1m", *every)
	}
	o.every = *every
	if o.tcp && o.src.Port() != 0 && o.count > 1 {
		return o, usagef("trace: --proto tcp with a fixed source port takes --count 1 (each connection needs its own port)")
	}
	o.wait = c.timeout
	if o.wait == 0 {
		o.wait = DefaultTraceWait
	}
	return o, c.checkOutput()
}

// trace sends marked packets to a VIP and prints the records the nodes
// that saw them send back (docs/ARCHITECTURE.md, Packet tracer).
func (c *CLI) trace(ctx context.Context, args []string) error {
	o, err := c.parseTrace(args)
	if err != nil {
		return err
	}
	recs, err := runTrace(ctx, o)
	if err != nil {
		return err
	}
	if c.json() {
		if recs == nil {
			recs = []tracer.Record{}
		}
		enc := json.NewEncoder(c.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(recs); err != nil {
			return err
		}
	} else {
		tw := c.table()
		fmt.Fprintln(tw, "ID\tNODE\tCPU\tPROTO\tSOURCE\tVIP\tBACKEND\tCONNTRACK\tVERDICT\tREASON")
		for _, r := range recs {
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Node, r.CPU, r.Proto, r.Src, r.VIP,
				dash(r.Backend), r.Conntrack, r.Verdict, dash(r.Reason))
		}
		tw.Flush()
	}
	if len(recs) == 0 {
		return fmt.Errorf("no trace record within %v: the receiver must be reachable from the nodes (see --listen), "+
			"node.trace_rate must not be 0, and the packets must reach the VIP", o.wait)
	}
	if len(recs) < o.count {
		fmt.Fprintf(c.Err, "xlbctl: %d of %d marked packets traced (the others: rate limit node.trace_rate, or lost)\n", len(recs), o.count)
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// localFor returns the address this host sends from toward dst.
func localFor(dst netip.AddrPort) (netip.Addr, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("no route to %s: %w", dst.Addr(), err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

// runTrace sends the marked packets and collects the records until all
// arrived or o.wait passed.
func runTrace(ctx context.Context, o traceOpts) ([]tracer.Record, error) {
	src := o.src.Addr()
	if !src.IsValid() {
		a, err := localFor(o.vip)
		if err != nil {
			return nil, err
		}
		src = a
	}
	la := o.listen
	if !la.Addr().IsValid() {
		la = netip.AddrPortFrom(src, la.Port())
	}
	ln, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(la))
	if err != nil {
		return nil, fmt.Errorf("listen for records on %s: %w", la, err)
	}
	defer ln.Close()
	recv := ln.LocalAddr().(*net.UDPAddr).AddrPort()
	recv = netip.AddrPortFrom(recv.Addr().Unmap(), recv.Port())
	var b [4]byte
	rand.Read(b[:])
	base := binary.BigEndian.Uint32(b[:]) &^ 0xffff // ids base .. base+count-1
	markers := make([][]byte, o.count)
	for i := range markers {
		if markers[i], err = (tracer.Marker{ID: base + uint32(i), Receiver: recv}).Encode(); err != nil {
			return nil, err
		}
		markers[i] = append(markers[i], "xlbctl trace\n"...)
	}
	srcAP := netip.AddrPortFrom(src, o.src.Port())
	if o.tcp {
		conns, err := sendTCP(ctx, srcAP, o.vip, markers, o.every, time.Now().Add(o.wait))
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		if err != nil {
			return nil, err
		}
	} else {
		// The socket stays open until the records are in: the service's
		// answers then reach it instead of drawing ICMP port unreachable
		// errors toward the VIP.
		c, err := sendUDP(ctx, srcAP, o.vip, markers, o.every)
		if c != nil {
			defer c.Close()
		}
		if err != nil {
			return nil, err
		}
	}
	// The wait starts when the last marked packet is out; records that
	// came in meanwhile wait in the socket's buffer.
	return collect(ctx, ln, base, o.count, time.Now().Add(o.wait))
}

// pacer spaces packets every apart on average: the i-th leaves at
// start + i*every (sleeps are coarse; a late packet does not delay the
// schedule of the next ones).
type pacer struct {
	start time.Time
	every time.Duration
}

func (p pacer) wait(ctx context.Context, i int) {
	if p.every <= 0 {
		return
	}
	if d := time.Until(p.start.Add(time.Duration(i) * p.every)); d > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
}

func sendUDP(ctx context.Context, src, vip netip.AddrPort, markers [][]byte, every time.Duration) (*net.UDPConn, error) {
	c, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(src), net.UDPAddrFromAddrPort(vip))
	if err != nil {
		return nil, fmt.Errorf("udp socket %s -> %s: %w", src, vip, err)
	}
	pace := pacer{time.Now(), every}
	for i, m := range markers {
		pace.wait(ctx, i)
		if _, err := c.Write(m); err != nil {
			return c, fmt.Errorf("send to %s: %w", vip, err)
		}
	}
	return c, ctx.Err()
}

// sendTCP opens one connection per marker and sends the marker as its
// first data; the connections stay open (the caller closes them) so the
// trace follows an established flow and nothing else is sent on it.
func sendTCP(ctx context.Context, src, vip netip.AddrPort, markers [][]byte, every time.Duration, deadline time.Time) ([]net.Conn, error) {
	var conns []net.Conn
	d := net.Dialer{Deadline: deadline}
	if src.Addr().IsValid() {
		d.LocalAddr = net.TCPAddrFromAddrPort(src)
	}
	pace := pacer{time.Now(), every}
	for i, m := range markers {
		pace.wait(ctx, i)
		c, err := d.DialContext(ctx, "tcp", vip.String())
		if err != nil {
			return conns, fmt.Errorf("connect to %s: %w", vip, err)
		}
		conns = append(conns, c)
		if _, err := c.Write(m); err != nil {
			return conns, fmt.Errorf("send to %s: %w", vip, err)
		}
	}
	return conns, nil
}

// collect reads records with ids base..base+count-1 until each id has one
// or the deadline.
func collect(ctx context.Context, ln *net.UDPConn, base uint32, count int, deadline time.Time) ([]tracer.Record, error) {
	var recs []tracer.Record
	seen := map[uint32]bool{}
	buf := make([]byte, 64<<10)
	stop := context.AfterFunc(ctx, func() { ln.SetReadDeadline(time.Now()) })
	defer stop()
	for len(seen) < count {
		// A deadline in the past fails a read at once, even with records
		// buffered: take what is there first.
		rd := deadline
		if time.Now().After(deadline) {
			rd = time.Now().Add(time.Millisecond)
		}
		ln.SetReadDeadline(rd)
		n, _, err := ln.ReadFromUDPAddrPort(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			return recs, fmt.Errorf("read records: %w", err)
		}
		var r tracer.Record
		if json.Unmarshal(buf[:n], &r) != nil || r.ID < base || r.ID-base >= uint32(count) {
			continue // not one of ours
		}
		seen[r.ID] = true
		recs = append(recs, r)
	}
	slices.SortStableFunc(recs, func(a, b tracer.Record) int { return int(a.ID) - int(b.ID) })
	return recs, ctx.Err()
}
