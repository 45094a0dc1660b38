package api

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	pb "github.com/xlbproject/xlb/api/xlb/v1"
	"github.com/xlbproject/xlb/internal/config"
)

// Options configure Listen.
type Options struct {
	// Socket is the unix socket path (required; xlbd's default is
	// SocketPath(node.name)). Its directory
	// is created (0755) when missing; the socket is 0600.
	Socket string
	// TCP is an optional "host:port" for remote clients; "" for none. It
	// requires TLS: Listen refuses a TCP address without all three files.
	TCP string
	TLS TLSFiles
	Log *slog.Logger
	// ShutdownGrace bounds how long Serve waits for running calls after
	// its context ends (default 5 s).
	ShutdownGrace time.Duration
}

// TLSFiles are PEM files for mutual TLS: the server's (or client's)
// certificate and key, and the CA that signs the peer's certificates.
type TLSFiles struct {
	Cert, Key, CA string
}

func (t TLSFiles) set() bool { return t.Cert != "" || t.Key != "" || t.CA != "" }

// Errors of Listen.
var (
	// ErrSocketInUse: another process (another xlbd) answers on the socket.
	ErrSocketInUse = errors.New("socket in use")
	// ErrTLSRequired: a TCP listener was asked for without mTLS files.
	ErrTLSRequired = errors.New("TCP listener requires mutual TLS")
)

// Server is the API server: one gRPC server on the unix socket, another with
// TLS credentials on TCP, both over the same Backend.
type Server struct {
	log     *slog.Logger
	grace   time.Duration
	socket  string
	sockID  os.FileInfo // the socket file we created, to remove only it
	unix    net.Listener
	tcp     net.Listener
	unixSrv *grpc.Server
	tcpSrv  *grpc.Server
}

// Listen validates o, opens the listeners and returns a Server ready to
// Serve. It fails with an error wrapping ErrSocketInUse when something
// answers on the socket (a stale socket file is replaced), with
// ErrTLSRequired for TCP without TLS files, and when a file cannot be read.
func Listen(b Backend, o Options) (*Server, error) {
	if o.Socket == "" {
		return nil, errors.New("api: no socket path given")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.ShutdownGrace == 0 {
		o.ShutdownGrace = 5 * time.Second
	}
	var tlsCfg *tls.Config
	switch {
	case o.TCP != "":
		if o.TLS.Cert == "" || o.TLS.Key == "" || o.TLS.CA == "" {
			return nil, fmt.Errorf("api listener %s: %w: give --tls-cert, --tls-key and --tls-client-ca (see docs/OPERATIONS.md)", o.TCP, ErrTLSRequired)
		}
		var err error
		if tlsCfg, err = ServerTLS(o.TLS); err != nil {
			return nil, err
		}
	case o.TLS.set():
		return nil, errors.New("api: TLS files given without a TCP address: they only apply to the TCP listener")
	}
	s := &Server{log: o.Log, grace: o.ShutdownGrace, socket: o.Socket}
	svc := &service{b: b, now: time.Now}
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(config.MaxFileSize + 1<<20),
		grpc.ChainUnaryInterceptor(s.logCalls),
	}
	l, id, err := listenUnix(o.Socket)
	if err != nil {
		return nil, err
	}
	s.unix, s.sockID = l, id
	s.unixSrv = grpc.NewServer(opts...)
	pb.RegisterXLBServer(s.unixSrv, svc)
	if o.TCP != "" {
		tl, err := net.Listen("tcp", o.TCP)
		if err != nil {
			s.closeUnix()
			return nil, fmt.Errorf("api listener: %w", err)
		}
		s.tcp = tl
		s.tcpSrv = grpc.NewServer(append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))...)
		pb.RegisterXLBServer(s.tcpSrv, svc)
	}
	return s, nil
}

// ServerTLS builds the server side of mutual TLS: the certificate and key,
// clients must present a certificate signed by the CA (TLS 1.3).
func ServerTLS(f TLSFiles) (*tls.Config, error) {
	cert, pool, err := loadTLSFiles(f, "api tls: load certificate")
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}, nil
}

// loadTLSFiles reads the certificate and key of one side of mutual TLS and
// the CA it checks the other side with; loading names the certificate in
// the error when the pair cannot be read.
func loadTLSFiles(f TLSFiles, loading string) (tls.Certificate, *x509.CertPool, error) {
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("%s %s / key %s: %w", loading, f.Cert, f.Key, err)
	}
	pem, err := os.ReadFile(f.CA)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("api tls: read CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return tls.Certificate{}, nil, fmt.Errorf("api tls: %s holds no PEM certificate", f.CA)
	}
	return cert, pool, nil
}

// listenUnix listens on path with mode 0600. The socket is created under a
// temporary name, chmod-ed, then renamed over path, so path never exists
// with a wider mode; an existing socket file is replaced only when nothing
// answers on it.
func listenUnix(path string) (net.Listener, os.FileInfo, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("api socket directory: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, nil, fmt.Errorf("api socket %s: exists and is not a socket: remove it or choose another --api-socket", path)
		}
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil, nil, fmt.Errorf("api socket %s: %w: another xlbd is listening there (stop it, or give this one another --api-socket)", path, ErrSocketInUse)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, nil, fmt.Errorf("api socket %s: probe the existing socket: %w", path, err)
		}
		// Stale: nobody listens. The rename below replaces it.
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".%s.%d.tmp", filepath.Base(path), os.Getpid()))
	_ = os.Remove(tmp)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, nil, fmt.Errorf("api socket: %w", err)
	}
	l.SetUnlinkOnClose(false)
	fail := func(err error) (net.Listener, os.FileInfo, error) {
		l.Close()
		os.Remove(tmp)
		return nil, nil, fmt.Errorf("api socket %s: %w", path, err)
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return fail(err)
	}
	return l, fi, nil
}

// SocketPath returns the unix socket's path.
func (s *Server) SocketPath() string { return s.socket }

// TCPAddr returns the TCP listener's address, nil without one.
func (s *Server) TCPAddr() net.Addr {
	if s.tcp == nil {
		return nil
	}
	return s.tcp.Addr()
}

// Serve answers calls until ctx ends, then stops: running calls get
// ShutdownGrace to finish, and the socket file is removed. It returns nil
// after ctx ends, or the first listener error.
func (s *Server) Serve(ctx context.Context) error {
	errc := make(chan error, 2)
	var wg sync.WaitGroup
	serve := func(srv *grpc.Server, l net.Listener) {
		defer wg.Done()
		if err := srv.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			errc <- err
		}
	}
	wg.Add(1)
	go serve(s.unixSrv, s.unix)
	if s.tcpSrv != nil {
		wg.Add(1)
		go serve(s.tcpSrv, s.tcp)
		s.log.Info("api listening on tcp with mutual TLS", "addr", s.tcp.Addr())
	}
	s.log.Info("api listening", "socket", s.socket)
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
		err = fmt.Errorf("api: %w", err)
	}
	s.stop()
	wg.Wait()
	return err
}

// stop stops both servers gracefully, forcefully after the grace period.
func (s *Server) stop() {
	done := make(chan struct{})
	go func() {
		s.unixSrv.GracefulStop()
		if s.tcpSrv != nil {
			s.tcpSrv.GracefulStop()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(s.grace):
		s.unixSrv.Stop()
		if s.tcpSrv != nil {
			s.tcpSrv.Stop()
		}
		<-done
	}
	s.closeUnix()
}

// Close releases the listeners of a Server that was not served.
func (s *Server) Close() {
	if s.tcp != nil {
		s.tcp.Close()
	}
	s.closeUnix()
}

// closeUnix removes the socket file if it is still the one we created.
func (s *Server) closeUnix() {
	s.unix.Close()
	if fi, err := os.Lstat(s.socket); err == nil && os.SameFile(fi, s.sockID) {
		os.Remove(s.socket)
	}
}

// mutations are the methods logged at Info (with the client); the others
// at Debug.
var mutations = map[string]bool{
	pb.XLB_ApplyConfig_FullMethodName: true,
	pb.XLB_SetBackend_FullMethodName:  true,
	pb.XLB_NodeDrain_FullMethodName:   true,
	pb.XLB_NodeUndrain_FullMethodName: true,
}

// serverTrailer is set on every answer, so a client tells xlbd's own
// UNAVAILABLE from a connection that failed.
const serverTrailer = "xlb-server"

func (s *Server) logCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	_ = grpc.SetTrailer(ctx, metadata.Pairs(serverTrailer, "1"))
	resp, err := h(ctx, req)
	method := info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]
	lvl := slog.LevelDebug
	if mutations[info.FullMethod] {
		lvl = slog.LevelInfo
	}
	if s.log.Enabled(ctx, lvl) {
		attrs := []any{"method", method, "client", client(ctx), "duration", time.Since(start).Round(time.Microsecond)}
		if err != nil {
			attrs = append(attrs, "code", status.Code(err).String(), "error", status.Convert(err).Message())
		}
		s.log.Log(ctx, lvl, "api call", attrs...)
	}
	return resp, err
}

// client names the caller: the subject of its certificate over TCP,
// "unix" on the socket.
func client(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "?"
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
		return p.Addr.String() + " (" + ti.State.PeerCertificates[0].Subject.String() + ")"
	}
	if p.Addr.Network() == "unix" {
		return "unix"
	}
	return p.Addr.String()
}
