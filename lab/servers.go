package lab

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Ports are the ports of the backend servers.
type Ports struct {
	HTTP uint16 // HTTP server answering the backend's name
	UDP  uint16 // UDP echo: replies "<name> <payload>"
	TCP  uint16 // TCP line echo: replies "<name> <line>" per line
}

// DefaultPorts are the ports used when a Ports field is zero.
var DefaultPorts = Ports{HTTP: 80, UDP: 5000, TCP: 5001}

func (p Ports) withDefaults() Ports {
	if p.HTTP == 0 {
		p.HTTP = DefaultPorts.HTTP
	}
	if p.UDP == 0 {
		p.UDP = DefaultPorts.UDP
	}
	if p.TCP == 0 {
		p.TCP = DefaultPorts.TCP
	}
	return p
}

// Servers are one backend's in-process servers. Each service listens on
// every VIP and on the backend's own LAN addresses (where health checks
// connect); the counters tell the two apart.
type Servers struct {
	// Name is what the servers answer with: the backend's short name.
	Name  string
	Host  *Host
	Ports Ports

	httpVIP, httpDirect atomic.Int64
	udpVIP, udpDirect   atomic.Int64
	tcpVIP, tcpDirect   atomic.Int64
	status              atomic.Int32

	mu       sync.Mutex
	closed   bool
	https    []*http.Server
	lns      []net.Listener
	pcs      []net.PacketConn
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
	closeErr error
}

// StartServers starts the HTTP, UDP echo and TCP line-echo servers of
// backend h, named h.Short, on every address in vips and on h's LAN
// addresses. Sockets are created inside h's namespace; serving runs in
// goroutines of this process until Close.
func StartServers(h *Host, vips []netip.Addr, ports Ports) (*Servers, error) {
	ports = ports.withDefaults()
	s := &Servers{Name: h.Short, Host: h, Ports: ports, conns: map[net.Conn]struct{}{}}
	s.status.Store(http.StatusOK)
	type bind struct {
		addr netip.Addr
		vip  bool
	}
	var binds []bind
	for _, v := range vips {
		binds = append(binds, bind{v, true})
	}
	binds = append(binds, bind{h.Addr4, false}, bind{h.Addr6, false})
	for _, b := range binds {
		if err := s.listenHTTP(netip.AddrPortFrom(b.addr, ports.HTTP), b.vip); err != nil {
			return nil, errors.Join(err, s.Close())
		}
		if err := s.listenUDP(netip.AddrPortFrom(b.addr, ports.UDP), b.vip); err != nil {
			return nil, errors.Join(err, s.Close())
		}
		if err := s.listenTCP(netip.AddrPortFrom(b.addr, ports.TCP), b.vip); err != nil {
			return nil, errors.Join(err, s.Close())
		}
	}
	return s, nil
}

// StartServers starts Servers on every backend (see StartServers) and
// closes them when the lab is destroyed. They are also kept in l.Servers.
func (l *Lab) StartServers(ports Ports) ([]*Servers, error) {
	var all []*Servers
	for _, h := range l.Backends {
		s, err := StartServers(h, l.VIPs, ports)
		if err != nil {
			for _, s := range all {
				s.Close()
			}
			return nil, err
		}
		all = append(all, s)
	}
	if !l.onDestroy(func() error {
		var errs []error
		for _, s := range all {
			errs = append(errs, s.Close())
		}
		return errors.Join(errs...)
	}) {
		for _, s := range all {
			s.Close()
		}
		return nil, errors.New("lab destroyed")
	}
	l.mu.Lock()
	l.servers = append(l.servers, all...)
	l.mu.Unlock()
	return all, nil
}

// Servers returns the servers started by l.StartServers.
func (l *Lab) Servers() []*Servers {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Servers(nil), l.servers...)
}

// HTTPRequests returns the HTTP requests served on a VIP.
func (s *Servers) HTTPRequests() int64 { return s.httpVIP.Load() }

// DirectHTTPRequests returns the HTTP requests served on the backend's own
// addresses (health checks).
func (s *Servers) DirectHTTPRequests() int64 { return s.httpDirect.Load() }

// UDPDatagrams returns the datagrams echoed on a VIP.
func (s *Servers) UDPDatagrams() int64 { return s.udpVIP.Load() }

// DirectUDPDatagrams returns the datagrams echoed on the backend's own
// addresses.
func (s *Servers) DirectUDPDatagrams() int64 { return s.udpDirect.Load() }

// TCPConns returns the TCP echo connections accepted on a VIP.
func (s *Servers) TCPConns() int64 { return s.tcpVIP.Load() }

// DirectTCPConns returns the TCP echo connections accepted on the
// backend's own addresses.
func (s *Servers) DirectTCPConns() int64 { return s.tcpDirect.Load() }

// SetHTTPStatus makes the HTTP server answer every request with code (the
// body is still the name): e.g. 503 to fail an HTTP health check.
func (s *Servers) SetHTTPStatus(code int) { s.status.Store(int32(code)) }

func (s *Servers) track(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	f()
	return true
}

func (s *Servers) listenHTTP(ap netip.AddrPort, vip bool) error {
	ln, err := s.Host.Listen("tcp", ap.String())
	if err != nil {
		return fmt.Errorf("http server %s on %v: %w", s.Name, ap, err)
	}
	counter := &s.httpDirect
	if vip {
		counter = &s.httpVIP
	}
	body := []byte(s.Name + "\n")
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			counter.Add(1)
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(int(s.status.Load()))
			w.Write(body)
		}),
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       30 * time.Second,
	}
	if !s.track(func() { s.https = append(s.https, srv); s.wg.Add(1) }) {
		ln.Close()
		return errors.New("servers closed")
	}
	go func() {
		defer s.wg.Done()
		srv.Serve(ln)
	}()
	return nil
}

func (s *Servers) listenUDP(ap netip.AddrPort, vip bool) error {
	pc, err := s.Host.ListenPacket("udp", ap.String())
	if err != nil {
		return fmt.Errorf("udp echo %s on %v: %w", s.Name, ap, err)
	}
	counter := &s.udpDirect
	if vip {
		counter = &s.udpVIP
	}
	if !s.track(func() { s.pcs = append(s.pcs, pc); s.wg.Add(1) }) {
		pc.Close()
		return errors.New("servers closed")
	}
	go func() {
		defer s.wg.Done()
		buf := make([]byte, 64<<10)
		prefix := []byte(s.Name + " ")
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			counter.Add(1)
			pc.WriteTo(append(append([]byte(nil), prefix...), buf[:n]...), from)
		}
	}()
	return nil
}

func (s *Servers) listenTCP(ap netip.AddrPort, vip bool) error {
	ln, err := s.Host.Listen("tcp", ap.String())
	if err != nil {
		return fmt.Errorf("tcp echo %s on %v: %w", s.Name, ap, err)
	}
	counter := &s.tcpDirect
	if vip {
		counter = &s.tcpVIP
	}
	if !s.track(func() { s.lns = append(s.lns, ln); s.wg.Add(1) }) {
		ln.Close()
		return errors.New("servers closed")
	}
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			counter.Add(1)
			if !s.track(func() { s.conns[c] = struct{}{}; s.wg.Add(1) }) {
				c.Close()
				return
			}
			go s.echoLines(c)
		}
	}()
	return nil
}

func (s *Servers) echoLines(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if _, err := c.Write([]byte(s.Name + " " + line)); err != nil {
			return
		}
	}
}

// Close stops every server and closes open connections. It is idempotent.
func (s *Servers) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return s.closeErr
	}
	s.closed = true
	var errs []error
	for _, srv := range s.https {
		if err := srv.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close http server %s: %w", s.Name, err))
		}
	}
	for _, ln := range s.lns {
		ln.Close()
	}
	for _, pc := range s.pcs {
		pc.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.closeErr = errors.Join(errs...)
	return s.closeErr
}
