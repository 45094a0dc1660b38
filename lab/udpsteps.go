package lab

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"
)

// UDPStepFlows are long-lived UDP flows through a VIP, measured step by
// step: each flow is one socket (its own source port, so the router's L4
// hash spreads the flows over the nodes) sending a numbered datagram every
// interval, and the backend named in the echo of each datagram is noted.
// Mark ends a step: a flow answered by a surviving backend when the step
// began moved in it if any datagram of the step was answered by another
// backend.
type UDPStepFlows struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	local  []netip.AddrPort
	cur    []string // backend of each flow's last answered datagram
	base   []string // cur when the step began
	moved  []string // in this step: the first other backend that answered ("": none)
	heard  []bool   // in this step: a datagram was answered
	gone   []bool   // answered by udpGone when a step began: that flow broke with it
	steps  []UDPStep
}

// UDPStep is what one step did to the flows.
type UDPStep struct {
	Name string
	// Flows: flows answered by a surviving backend when the step began,
	// and never before by the killed one; Moved: those of them answered
	// by another backend during the step; Silent: those of them with no
	// datagram answered during the step.
	Flows, Moved, Silent int
	Examples             []string // a few moved flows: "<source> b1 -> b3"
	// GoneFlows: the flows the killed backend answered as an earlier step
	// began (they broke with it and were placed again); GoneMoved: those
	// of them answered by another backend during this step.
	GoneFlows, GoneMoved int
}

// StartUDPStepFlows starts n flows from ns to target (the backends' UDP
// echo, which answers "<backend> <payload>"), one datagram per interval
// each, and waits until every flow was answered once (at most 10 s).
func StartUDPStepFlows(ctx context.Context, ns *NS, target netip.AddrPort, n int, interval time.Duration) (*UDPStepFlows, error) {
	ctx, cancel := context.WithCancel(ctx)
	u := &UDPStepFlows{cancel: cancel, local: make([]netip.AddrPort, n), cur: make([]string, n), base: make([]string, n),
		moved: make([]string, n), heard: make([]bool, n), gone: make([]bool, n)}
	for i := range n {
		c, err := ns.DialContext(ctx, "udp", target.String())
		if err != nil {
			u.Stop()
			return nil, fmt.Errorf("udp flow %d to %v: %w", i, target, err)
		}
		u.local[i] = netip.MustParseAddrPort(c.LocalAddr().String())
		u.wg.Add(1)
		go u.run(ctx, c, i, interval)
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if u.answering() == n {
			break
		}
		if time.Now().After(end) {
			u.Stop()
			return nil, fmt.Errorf("udp flows to %v: %d of %d answered within 10 s", target, u.answering(), n)
		}
	}
	return u, nil
}

// answering: flows answered since the last Mark.
func (u *UDPStepFlows) answering() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, h := range u.heard {
		if h {
			n++
		}
	}
	return n
}

func (u *UDPStepFlows) run(ctx context.Context, c net.Conn, i int, interval time.Duration) {
	defer u.wg.Done()
	defer c.Close()
	buf := make([]byte, 512)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for seq := 0; ; seq++ {
		msg := fmt.Sprintf("u%d-%d", i, seq)
		c.SetDeadline(time.Now().Add(interval))
		if _, err := c.Write([]byte(msg)); err == nil {
			for {
				n, err := c.Read(buf)
				if err != nil {
					break // no answer in time, or refused (ICMP)
				}
				if name, got, _ := strings.Cut(string(buf[:n]), " "); got == msg {
					u.note(i, name)
					break
				} // else a late answer to an earlier datagram
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// note records that backend answered flow i.
func (u *UDPStepFlows) note(i int, backend string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.cur[i] = backend
	u.heard[i] = true
	if u.moved[i] == "" && u.base[i] != "" && backend != u.base[i] {
		u.moved[i] = backend
	}
}

// Mark ends the step under way, if any, and begins the next, named name:
// the flows' backends now are what the step is measured against.
func (u *UDPStepFlows) Mark(name string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.endStep()
	u.steps = append(u.steps, UDPStep{Name: name})
	copy(u.base, u.cur)
	for i, b := range u.cur {
		u.gone[i] = u.gone[i] || b == udpGone
	}
	clear(u.moved)
	clear(u.heard)
}

// endStep tallies the step under way (u.mu held).
func (u *UDPStepFlows) endStep() {
	if len(u.steps) == 0 {
		return
	}
	s := &u.steps[len(u.steps)-1]
	for i, b := range u.base {
		switch {
		case b == "":
			continue
		case u.gone[i]:
			s.GoneFlows++
			if u.moved[i] != "" {
				s.GoneMoved++
			}
			continue
		}
		s.Flows++
		switch {
		case u.moved[i] != "":
			s.Moved++
			if len(s.Examples) < 3 {
				s.Examples = append(s.Examples, fmt.Sprintf("%v %s -> %s", u.local[i], b, u.moved[i]))
			}
		case !u.heard[i]:
			s.Silent++
		}
	}
}

// udpGone is the backend RunSimultaneous kills: a flow it answered as a
// step began is counted apart from then on (GoneFlows), as the TCP
// connections on it are: it broke with it.
const udpGone = "b2"

// Stop ends the flows and returns the steps (the one under way ends too).
func (u *UDPStepFlows) Stop() []UDPStep {
	u.cancel()
	u.wg.Wait()
	u.mu.Lock()
	defer u.mu.Unlock()
	u.endStep()
	out := u.steps
	u.steps = nil
	return out
}

// Backends counts the flows by the backend that answered them last.
func (u *UDPStepFlows) Backends() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	m := map[string]int{}
	for _, b := range u.cur {
		m[b]++
	}
	return countString(m)
}

// Locals returns each flow's client address and port.
func (u *UDPStepFlows) Locals() []netip.AddrPort { return u.local }

// countString prints m as "k=v ..." in key order.
func countString(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}

// routerSpread counts flows (client address and port, to dst over proto)
// by the node the router's multipath route sends them to: `ip route get`
// with the flow's ports, which the kernel hashes as it hashes the packets
// it forwards (fib_multipath_hash_policy=3 over addresses, protocol and ports).
func (l *Lab) routerSpread(ctx context.Context, flows []netip.AddrPort, dst netip.AddrPort, proto string) (string, error) {
	node := map[string]string{}
	for _, n := range l.Nodes {
		node[n.Addr(dst.Addr()).String()] = n.Short
	}
	m := map[string]int{}
	for _, f := range flows {
		out, err := l.Router.Run(ctx, "ip", "route", "get", dst.Addr().String(), "from", f.Addr().String(), "iif", "eth0",
			"ipproto", proto, "sport", fmt.Sprint(f.Port()), "dport", fmt.Sprint(dst.Port()))
		if err != nil {
			return "", err
		}
		_, via, ok := strings.Cut(string(out), " via ")
		if !ok {
			return "", fmt.Errorf("ip route get %v from %v: no next hop in %q", dst, f, out)
		}
		via, _, _ = strings.Cut(via, " ")
		name := node[via]
		if name == "" {
			name = via
		}
		m[name]++
	}
	return countString(m), nil
}
