package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// Client timeouts: one HTTP request, one UDP reply, one TCP echo reply.
const (
	HTTPTimeout  = 5 * time.Second
	UDPTimeout   = time.Second
	maxErrorKept = 10
)

// TCPTimeout is how long a long-lived TCP session waits for an echo before
// it counts a break. Tests of node failures raise it: rerouting takes the
// router's hold time plus TCP retransmission backoff.
var TCPTimeout = 2 * time.Second

// HTTPResult is the outcome of HTTPLoad.
type HTTPResult struct {
	Requests int
	// Counts maps backend name (the response body) to successful responses.
	Counts map[string]int
	// Errors counts failed requests; FirstErrors holds the first few.
	Errors      int
	FirstErrors []string
	Elapsed     time.Duration
}

// OK returns the successful responses.
func (r HTTPResult) OK() int {
	n := 0
	for _, c := range r.Counts {
		n += c
	}
	return n
}

// Backends returns the backend names that answered, sorted.
func (r HTTPResult) Backends() []string { return sortedKeys(r.Counts) }

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// HTTPClient returns an HTTP client whose connections are made inside ns,
// one new TCP connection per request (keep-alive off), with timeout per
// request.
func HTTPClient(ns *NS, timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			DialContext:       ns.DialContext,
			DisableKeepAlives: true,
			Proxy:             nil,
		},
	}
}

// HTTPGet makes one GET http://target/ from ns on a new connection and
// returns the backend name that answered (the body without its newline).
// A status other than 200 is an error.
func HTTPGet(ctx context.Context, ns *NS, target netip.AddrPort, timeout time.Duration) (string, error) {
	return httpGet(ctx, HTTPClient(ns, timeout), target)
}

func httpGet(ctx context.Context, c *http.Client, target netip.AddrPort) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+target.String()+"/", nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if err != nil {
		return "", fmt.Errorf("GET %v: read body: %w", target, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %v: status %s", target, resp.Status)
	}
	return strings.TrimSpace(string(body)), nil
}

// HTTPLoad makes n GET requests from ns to target, each on a new TCP
// connection, at most concurrency at a time (default 16), each bounded by
// HTTPTimeout, and counts which backend answered. It stops early when ctx
// is done (the rest count as errors).
func HTTPLoad(ctx context.Context, ns *NS, target netip.AddrPort, n, concurrency int) HTTPResult {
	if concurrency <= 0 {
		concurrency = 16
	}
	c := HTTPClient(ns, HTTPTimeout)
	res := HTTPResult{Requests: n, Counts: map[string]int{}}
	var mu sync.Mutex
	start := time.Now()
	jobs := make(chan struct{})
	var wg sync.WaitGroup
	for range min(concurrency, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				name, err := httpGet(ctx, c, target)
				mu.Lock()
				if err != nil {
					res.Errors++
					if len(res.FirstErrors) < maxErrorKept {
						res.FirstErrors = append(res.FirstErrors, err.Error())
					}
				} else {
					res.Counts[name]++
				}
				mu.Unlock()
			}
		}()
	}
	for range n {
		jobs <- struct{}{}
	}
	close(jobs)
	wg.Wait()
	res.Elapsed = time.Since(start)
	return res
}

// UDPFlow is one UDP flow of UDPFlows: one source port, several datagrams.
type UDPFlow struct {
	Source         netip.AddrPort
	Sent, Received int
	// Backends maps backend name to the replies it sent on this flow.
	Backends map[string]int
	Err      string // first error other than a lost reply
}

// UDPResult is the outcome of UDPFlows.
type UDPResult struct {
	Flows []UDPFlow
}

// Lost returns the datagrams that got no reply.
func (r UDPResult) Lost() int {
	n := 0
	for _, f := range r.Flows {
		n += f.Sent - f.Received
	}
	return n
}

// Counts maps backend name to replies over all flows.
func (r UDPResult) Counts() map[string]int {
	m := map[string]int{}
	for _, f := range r.Flows {
		for b, c := range f.Backends {
			m[b] += c
		}
	}
	return m
}

// Split returns the flows whose replies came from more than one backend
// (a flow must stick to one backend).
func (r UDPResult) Split() []UDPFlow {
	var out []UDPFlow
	for _, f := range r.Flows {
		if len(f.Backends) > 1 {
			out = append(out, f)
		}
	}
	return out
}

// UDPFlows sends, from ns, `flows` UDP flows of `datagrams` datagrams each
// to target, each flow from its own socket (own source port), and waits up
// to UDPTimeout for each echo. Flows run concurrently (at most 32 at a
// time); the datagrams of one flow are sent one after the other. The error
// is only for flows that could not start.
func UDPFlows(ctx context.Context, ns *NS, target netip.AddrPort, flows, datagrams int) (UDPResult, error) {
	res := UDPResult{Flows: make([]UDPFlow, flows)}
	conns := make([]net.Conn, flows)
	for i := range conns {
		c, err := ns.DialContext(ctx, "udp", target.String())
		if err != nil {
			for _, c := range conns[:i] {
				c.Close()
			}
			return res, fmt.Errorf("udp flow %d to %v: %w", i, target, err)
		}
		conns[i] = c
		res.Flows[i] = UDPFlow{Source: netip.MustParseAddrPort(c.LocalAddr().String()), Backends: map[string]int{}}
	}
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			sem <- struct{}{}
			defer func() { <-sem }()
			f := &res.Flows[i]
			buf := make([]byte, 2048)
			for j := range datagrams {
				if ctx.Err() != nil {
					return
				}
				payload := fmt.Sprintf("flow%d-%d", i, j)
				f.Sent++
				if _, err := c.Write([]byte(payload)); err != nil {
					f.Err = err.Error()
					continue
				}
				c.SetReadDeadline(time.Now().Add(UDPTimeout))
				for {
					n, err := c.Read(buf)
					if err != nil {
						var ne net.Error
						if !errors.As(err, &ne) || !ne.Timeout() {
							f.Err = err.Error()
						}
						break
					}
					name, got, _ := strings.Cut(string(buf[:n]), " ")
					if got != payload {
						continue // a late reply to an earlier datagram
					}
					f.Received++
					f.Backends[name]++
					break
				}
			}
		}()
	}
	wg.Wait()
	return res, nil
}

// BreakKind says how a long-lived TCP session broke.
type BreakKind string

const (
	BreakError   BreakKind = "error"   // a read or write failed (reset, ...)
	BreakEOF     BreakKind = "eof"     // the server side closed
	BreakTimeout BreakKind = "timeout" // no reply within TCPTimeout
	BreakBackend BreakKind = "backend" // a reply from a different backend
	BreakReply   BreakKind = "reply"   // a reply that does not echo the message
	BreakDial    BreakKind = "dial"    // reconnecting after a break failed
)

// Break is one break of a long-lived TCP session.
type Break struct {
	Session int
	At      time.Time
	Kind    BreakKind
	Detail  string
	// Backend is the backend the session was on when it broke: the last
	// one that answered it (for BreakBackend, the one before the change).
	Backend string
	// Local is the client address and port of the connection (invalid for
	// BreakDial), and Since when it was made.
	Local netip.AddrPort
	Since time.Time
}

func (b Break) String() string {
	return fmt.Sprintf("session %d on %s (connected %s) at %s: %s: %s", b.Session, b.Backend, b.Since.Format("15:04:05.000"),
		b.At.Format("15:04:05.000"), b.Kind, b.Detail)
}

// TCPSession is the record of one long-lived connection.
type TCPSession struct {
	// Backend is the backend that answered first.
	Backend string
	// Messages counts the replies that were right.
	Messages int
	// Reconnects counts new connections made after breaks.
	Reconnects int
}

// TCPResult is the outcome of a TCPSessions run.
type TCPResult struct {
	Sessions []TCPSession
	Breaks   []Break
	// Samples has one entry per message that was due after the sessions
	// started: answered right (Latency), or skipped. A message that broke
	// the session is a Break instead.
	Samples []TCPSample
}

// TCPSample is one due message of a session.
type TCPSample struct {
	Session int
	// Due is when the message was due (session start + k * interval); it
	// is sent then, or when the previous exchange ends if that is later.
	Due time.Time
	// Latency is from Due to the right echo's arrival (0 if Skipped).
	Latency time.Duration
	// Skipped: the due time passed during a break of the session; the
	// message was never sent.
	Skipped bool
}

// OnTime counts the messages due in [from, to): all of them (samples and
// breaks), and those echoed right within bound of their due time.
func (r TCPResult) OnTime(from, to time.Time, bound time.Duration) (onTime, due int) {
	for _, s := range r.Samples {
		if s.Due.Before(from) || !s.Due.Before(to) {
			continue
		}
		due++
		if !s.Skipped && s.Latency <= bound {
			onTime++
		}
	}
	for _, b := range r.Breaks {
		if !b.At.Before(from) && b.At.Before(to) {
			due++
		}
	}
	return onTime, due
}

// Latencies returns the latencies of the messages due in [from, to) that
// were answered, sorted.
func (r TCPResult) Latencies(from, to time.Time) []time.Duration {
	var out []time.Duration
	for _, s := range r.Samples {
		if !s.Skipped && !s.Due.Before(from) && s.Due.Before(to) {
			out = append(out, s.Latency)
		}
	}
	slices.Sort(out)
	return out
}

// Messages returns the right replies over all sessions.
func (r TCPResult) Messages() int {
	n := 0
	for _, s := range r.Sessions {
		n += s.Messages
	}
	return n
}

// Counts maps backend name to the sessions it first served.
func (r TCPResult) Counts() map[string]int {
	m := map[string]int{}
	for _, s := range r.Sessions {
		m[s.Backend]++
	}
	return m
}

// TCPSessions are long-lived TCP connections to a line-echo service, each
// sending a message every interval and checking the echo.
type TCPSessions struct {
	cancel   context.CancelFunc
	interval time.Duration
	wg       sync.WaitGroup
	mu       sync.Mutex
	res      TCPResult
	conns    []net.Conn
	since    []time.Time // when each session's connection was made
}

// StartTCPSessions opens n TCP connections from ns to target (a TCP line
// echo of the backend Servers) and returns once every one got its first
// reply, so each session knows its backend. Each then sends a line every
// interval, expecting "<backend> <line>" within TCPTimeout, and records
// each due message's latency (TCPResult.Samples). A failure, EOF,
// timeout, or a reply from another backend is recorded as a Break, and the
// session reconnects and goes on. Stop ends them and returns the result.
func StartTCPSessions(ctx context.Context, ns *NS, target netip.AddrPort, n int, interval time.Duration) (*TCPSessions, error) {
	ctx, cancel := context.WithCancel(ctx)
	s := &TCPSessions{cancel: cancel, interval: interval, res: TCPResult{Sessions: make([]TCPSession, n)}, conns: make([]net.Conn, n),
		since: make([]time.Time, n)}
	readers := make([]*bufio.Reader, n)
	for i := range n {
		c, err := ns.DialContext(ctx, "tcp", target.String())
		s.since[i] = time.Now()
		if err == nil {
			readers[i] = bufio.NewReader(c)
			var name string
			name, err = exchange(c, readers[i], fmt.Sprintf("s%d hello", i))
			s.res.Sessions[i].Backend = name
		}
		if err != nil {
			if c != nil {
				c.Close()
			}
			for _, c := range s.conns[:i] {
				c.Close()
			}
			cancel()
			return nil, fmt.Errorf("tcp session %d to %v: %w", i, target, err)
		}
		s.conns[i] = c
	}
	for i := range n {
		s.wg.Add(1)
		go s.run(ctx, ns, target, i, interval, readers[i])
	}
	return s, nil
}

// exchange sends line and reads the echo, returning the backend name.
func exchange(c net.Conn, r *bufio.Reader, line string) (string, error) {
	c.SetDeadline(time.Now().Add(TCPTimeout))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	reply, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	name, got, _ := strings.Cut(strings.TrimSuffix(reply, "\n"), " ")
	if got != line {
		return name, fmt.Errorf("%w: sent %q, got %q", errBadReply, line, reply)
	}
	return name, nil
}

var errBadReply = errors.New("reply does not echo the message")

func (s *TCPSessions) run(ctx context.Context, ns *NS, target netip.AddrPort, i int, interval time.Duration, r *bufio.Reader) {
	defer s.wg.Done()
	s.mu.Lock()
	c := s.conns[i]
	want := s.res.Sessions[i].Backend
	s.mu.Unlock()
	// Message k is due at start + k*interval and sent then, or as soon as
	// the previous exchange ends if that is later: a slow echo delays the
	// next messages (each timed from its own due time), none is dropped.
	// After a break, the due times that passed meanwhile are skipped.
	due := time.Now().Add(interval)
	for seq := 0; ; seq++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(due)):
		}
		sent := due
		due = due.Add(interval)
		if c == nil { // reconnect after a break
			nc, err := ns.DialContext(ctx, "tcp", target.String())
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				s.addBreak(i, nil, want, BreakDial, err.Error())
				due = s.skip(i, due)
				continue
			}
			c, r = nc, bufio.NewReader(nc)
			s.mu.Lock()
			s.conns[i] = c
			s.since[i] = time.Now()
			s.res.Sessions[i].Reconnects++
			s.mu.Unlock()
		}
		name, err := exchange(c, r, fmt.Sprintf("s%d %d", i, seq))
		if ctx.Err() != nil {
			return // Stop closed the connection
		}
		took := time.Since(sent)
		kind, detail := BreakKind(""), ""
		switch {
		case err == nil && name != want:
			kind, detail = BreakBackend, fmt.Sprintf("was %s, now %s", want, name)
		case err == nil:
			s.mu.Lock()
			s.res.Sessions[i].Messages++
			s.res.Samples = append(s.res.Samples, TCPSample{Session: i, Due: sent, Latency: took})
			s.mu.Unlock()
			continue
		case errors.Is(err, io.EOF):
			kind, detail = BreakEOF, err.Error()
		case errors.Is(err, errBadReply):
			kind, detail = BreakReply, err.Error()
		default:
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				kind = BreakTimeout
			} else {
				kind = BreakError
			}
			detail = err.Error()
		}
		s.addBreak(i, c, want, kind, detail)
		if kind == BreakBackend {
			want = name // keep the connection; report each change once
			continue
		}
		c.Close()
		c = nil
		due = s.skip(i, due)
	}
}

// skip records the due times from due up to now as skipped messages of
// session i (they passed during a break) and returns the next due time.
func (s *TCPSessions) skip(i int, due time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	for now := time.Now(); due.Before(now); due = due.Add(s.interval) {
		s.res.Samples = append(s.res.Samples, TCPSample{Session: i, Due: due, Skipped: true})
	}
	return due
}

func (s *TCPSessions) addBreak(i int, c net.Conn, backend string, kind BreakKind, detail string) {
	b := Break{Session: i, At: time.Now(), Kind: kind, Detail: detail, Backend: backend}
	if c != nil {
		if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
			b.Local = netip.AddrPortFrom(a.AddrPort().Addr().Unmap(), a.AddrPort().Port())
		}
	}
	s.mu.Lock()
	b.Since = s.since[i]
	s.res.Breaks = append(s.res.Breaks, b)
	s.mu.Unlock()
}

// Breaks returns the breaks so far.
func (s *TCPSessions) Breaks() []Break {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.res.Breaks)
}

// Stop ends every session, closes the connections and returns the result.
func (s *TCPSessions) Stop() TCPResult {
	s.cancel()
	s.mu.Lock()
	for _, c := range s.conns {
		if c != nil {
			c.Close()
		}
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return TCPResult{Sessions: slices.Clone(s.res.Sessions), Breaks: slices.Clone(s.res.Breaks),
		Samples: slices.Clone(s.res.Samples)}
}

// LocalAddrs returns each session's current local address (invalid for a
// session that is between a break and its reconnection).
func (s *TCPSessions) LocalAddrs() []netip.AddrPort {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]netip.AddrPort, len(s.conns))
	for i, c := range s.conns {
		if c != nil {
			if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
				out[i] = a.AddrPort()
			}
		}
	}
	return out
}
