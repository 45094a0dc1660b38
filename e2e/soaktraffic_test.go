package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xlbproject/xlb/lab"
)

// soakTraffic is the soak's clients, all in the client namespace:
// long-lived TCP sessions (echo4), long-lived UDP flows (udp4), and churn
// of short ones: HTTP requests to web4 (persistent) and web6 (lblc), each
// on a new connection, and short UDP flows of three datagrams.
type soakTraffic struct {
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	sessions *lab.TCPSessions
	mu       sync.Mutex
	res      soakTrafficResult
}

// soakTrafficResult is what the clients saw.
type soakTrafficResult struct {
	TCP      lab.TCPResult
	UDPFlows []udpFlowRecord
	HTTP     map[string]*httpRecord // by service
	Churn    udpChurnRecord
	// UDPSent counts the datagrams written to the VIP (every one is a
	// packet: they are far under the MTU).
	UDPSent int
}

// udpFlowRecord is one long-lived UDP flow.
type udpFlowRecord struct {
	Sent, Answered int
	Backends       []string // each backend that answered, in order, once per change
	Changes        []time.Time
}

// httpRecord counts one churn service's requests.
type httpRecord struct {
	Requests int
	OK       map[string]int // 200, by backend
	Other    map[string]int // another status, by backend
	Errors   []time.Time    // no answer (the backend is not known)
	First    []string
}

// udpChurnRecord counts the short UDP flows.
type udpChurnRecord struct {
	Flows, Sent, Answered int
	Split                 []string    // "b1 b3": a flow answered by two backends
	Unanswered            []time.Time // datagrams without an echo
	// Repeats: flows from a source port that an earlier flow used less
	// than the UDP timeout (real time, as the test clock runs) before.
	Repeats int
}

func startSoakTraffic(ctx context.Context, t *testing.T, s *soakLab, p soakPlan) *soakTraffic {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	tr := &soakTraffic{cancel: cancel, res: soakTrafficResult{UDPFlows: make([]udpFlowRecord, p.udpFlows), HTTP: map[string]*httpRecord{}}}
	ns := s.Client.NS
	var err error
	echo := netip.AddrPortFrom(s.VIP4(), lab.DefaultPorts.TCP)
	if tr.sessions, err = lab.StartTCPSessions(ctx, ns, echo, p.sessions, p.sessionEvery); err != nil {
		cancel()
		t.Fatal(err)
	}
	udp := netip.AddrPortFrom(s.VIP4(), lab.DefaultPorts.UDP)
	for i := range p.udpFlows {
		c, err := ns.DialContext(ctx, "udp", udp.String())
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		tr.wg.Add(1)
		go tr.udpFlow(ctx, c, i, p.udpGap)
	}
	for name, vip := range map[string]netip.Addr{"web4": s.VIP4(), "web6": s.VIP6()} {
		tr.res.HTTP[name] = &httpRecord{OK: map[string]int{}, Other: map[string]int{}}
		tr.wg.Add(1)
		go tr.httpChurn(ctx, ns, name, netip.AddrPortFrom(vip, lab.DefaultPorts.HTTP), p.httpPause)
	}
	tr.wg.Add(1)
	go tr.udpChurn(ctx, ns, udp, p.udpChurnPause, p.udpTimeoutReal())
	return tr
}

// stop ends every client and returns what they saw.
func (tr *soakTraffic) stop() soakTrafficResult {
	tcp := tr.sessions.Stop()
	tr.cancel()
	tr.wg.Wait()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.res.TCP = tcp
	return tr.res
}

// echoUDP sends msg on c and waits up to wait for its echo, returning the
// backend that answered ("" for none); sent says the datagram left.
func echoUDP(c net.Conn, msg string, wait time.Duration, buf []byte) (backend string, sent bool) {
	c.SetDeadline(time.Now().Add(wait))
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", false
	}
	for {
		n, err := c.Read(buf)
		if err != nil {
			return "", true
		}
		if name, got, _ := strings.Cut(string(buf[:n]), " "); got == msg {
			return name, true
		} // else a late echo of an earlier datagram
	}
}

func (tr *soakTraffic) udpFlow(ctx context.Context, c net.Conn, i int, gap time.Duration) {
	defer tr.wg.Done()
	defer c.Close()
	buf := make([]byte, 512)
	for seq := 0; ctx.Err() == nil; seq++ {
		b, sent := echoUDP(c, fmt.Sprintf("soak%d-%d", i, seq), time.Second, buf)
		tr.mu.Lock()
		f := &tr.res.UDPFlows[i]
		if sent {
			f.Sent++
			tr.res.UDPSent++
		}
		if b != "" {
			f.Answered++
			if n := len(f.Backends); n == 0 || f.Backends[n-1] != b {
				f.Backends = append(f.Backends, b)
				f.Changes = append(f.Changes, time.Now())
			}
		}
		tr.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(gap):
		}
	}
}

func (tr *soakTraffic) httpChurn(ctx context.Context, ns *lab.NS, name string, target netip.AddrPort, pause time.Duration) {
	defer tr.wg.Done()
	c := lab.HTTPClient(ns, 5*time.Second)
	for ctx.Err() == nil {
		backend, code, err := httpOnce(ctx, c, target)
		tr.mu.Lock()
		r := tr.res.HTTP[name]
		switch {
		case ctx.Err() != nil:
		case err != nil:
			r.Requests++
			r.Errors = append(r.Errors, time.Now())
			if len(r.First) < 5 {
				r.First = append(r.First, err.Error())
			}
		case code == http.StatusOK:
			r.Requests++
			r.OK[backend]++
		default:
			r.Requests++
			r.Other[backend]++
		}
		tr.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

// httpOnce is one GET on a new connection: the backend that answered and
// the status.
func httpOnce(ctx context.Context, c *http.Client, target netip.AddrPort) (string, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+target.String()+"/", nil)
	if err != nil {
		return "", 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if err != nil {
		return "", 0, err
	}
	return strings.TrimSpace(string(body)), resp.StatusCode, nil
}

func (tr *soakTraffic) udpChurn(ctx context.Context, ns *lab.NS, target netip.AddrPort, pause, timeout time.Duration) {
	defer tr.wg.Done()
	buf := make([]byte, 512)
	lastUse := map[string]time.Time{} // source address and port
	for k := 0; ctx.Err() == nil; k++ {
		c, err := ns.DialContext(ctx, "udp", target.String())
		if err != nil {
			return
		}
		src := c.LocalAddr().String()
		if at, ok := lastUse[src]; ok && time.Since(at) < timeout+2*time.Second {
			tr.mu.Lock()
			tr.res.Churn.Repeats++
			tr.mu.Unlock()
		}
		seen := map[string]bool{}
		var order []string
		for j := range 3 {
			b, sent := echoUDP(c, fmt.Sprintf("churn%d-%d", k, j), time.Second, buf)
			tr.mu.Lock()
			if sent {
				tr.res.Churn.Sent++
				tr.res.UDPSent++
			}
			if b != "" {
				tr.res.Churn.Answered++
				if !seen[b] {
					seen[b] = true
					order = append(order, b)
				}
			} else if sent && ctx.Err() == nil {
				tr.res.Churn.Unanswered = append(tr.res.Churn.Unanswered, time.Now())
			}
			tr.mu.Unlock()
		}
		c.Close()
		lastUse[src] = time.Now()
		tr.mu.Lock()
		tr.res.Churn.Flows++
		if len(order) > 1 {
			tr.res.Churn.Split = append(tr.res.Churn.Split, strings.Join(order, " "))
		}
		tr.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

// describe sums the traffic up.
func (r *soakTrafficResult) describe() map[string]any {
	out := map[string]any{
		"tcp_sessions": len(r.TCP.Sessions), "tcp_messages": r.TCP.Messages(), "tcp_breaks": len(r.TCP.Breaks),
		"udp_flows": len(r.UDPFlows), "udp_sent": r.UDPSent, "udp_churn_flows": r.Churn.Flows,
		"udp_churn_unanswered": len(r.Churn.Unanswered), "udp_churn_split": len(r.Churn.Split),
	}
	answered := 0
	for _, f := range r.UDPFlows {
		answered += f.Answered
	}
	out["udp_long_answered"] = answered
	for name, h := range r.HTTP {
		out[name+"_requests"] = h.Requests
		out[name+"_errors"] = len(h.Errors)
		out[name+"_ok"] = h.OK
		out[name+"_other_status"] = h.Other
	}
	return out
}
