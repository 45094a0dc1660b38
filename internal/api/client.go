package api

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/xlbproject/xlb/api/xlb/v1"
)

// DialOptions say how to reach xlbd: the unix socket (default), or TCP with
// mutual TLS when TCP is set.
type DialOptions struct {
	Socket string // required unless TCP is set (FindSocket finds one)
	TCP    string // host:port; needs TLS
	TLS    TLSFiles
	// ServerName overrides the name checked in the server's certificate
	// (default: the host of TCP).
	ServerName string
}

// Client is a connection to xlbd. Calls that cannot reach it fail with an
// error that says why and what to do (is xlbd running, permissions, TLS).
type Client struct {
	pb.XLBClient
	conn   *grpc.ClientConn
	target string // for messages
	tcp    bool

	mu      sync.Mutex
	dialErr error // the last failed connection attempt
}

// Dial prepares a client; no connection is made until the first call.
func Dial(o DialOptions) (*Client, error) {
	c := &Client{}
	var opts []grpc.DialOption
	dialer := &net.Dialer{}
	var network, address string
	if o.TCP != "" {
		if o.TLS.Cert == "" || o.TLS.Key == "" || o.TLS.CA == "" {
			return nil, fmt.Errorf("xlbd over TCP (%s) needs mutual TLS: give --tls-cert, --tls-key and --tls-ca", o.TCP)
		}
		cfg, err := ClientTLS(o.TLS, o.ServerName, o.TCP)
		if err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		network, address, c.target, c.tcp = "tcp", o.TCP, o.TCP, true
	} else {
		if o.Socket == "" {
			return nil, errors.New("api: no socket path given")
		}
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
		network, address, c.target = "unix", o.Socket, o.Socket
	}
	opts = append(opts,
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			conn, err := dialer.DialContext(ctx, network, address)
			c.mu.Lock()
			c.dialErr = err
			c.mu.Unlock()
			return conn, err
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)),
		grpc.WithChainUnaryInterceptor(c.explain),
	)
	conn, err := grpc.NewClient("passthrough:///xlbd", opts...)
	if err != nil {
		return nil, fmt.Errorf("xlbd client: %w", err)
	}
	c.conn = conn
	c.XLBClient = pb.NewXLBClient(conn)
	return c, nil
}

// ClientTLS builds the client side of mutual TLS. serverName defaults to
// the host part of addr.
func ClientTLS(f TLSFiles, serverName, addr string) (*tls.Config, error) {
	cert, pool, err := loadTLSFiles(f, "tls: load client certificate")
	if err != nil {
		return nil, err
	}
	if serverName == "" {
		if h, _, err := net.SplitHostPort(addr); err == nil {
			serverName = h
		}
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		ServerName:   serverName,
		MinVersion:   tls.VersionTLS13,
	}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// explain turns "could not connect" into a message an operator can act on.
// An UNAVAILABLE answered by xlbd itself (it carries serverTrailer) is left
// alone.
func (c *Client) explain(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var trailer metadata.MD
	err := inv(ctx, method, req, reply, cc, append(opts, grpc.Trailer(&trailer))...)
	if status.Code(err) != codes.Unavailable || len(trailer.Get(serverTrailer)) > 0 {
		return err // not a connection problem, or xlbd's own answer
	}
	c.mu.Lock()
	derr := c.dialErr
	c.mu.Unlock()
	return ReachError(c.target, c.tcp, derr, err)
}

// reachError is an UNAVAILABLE whose text is the operator's message.
type reachError struct{ msg string }

func (e *reachError) Error() string { return e.msg }

// GRPCStatus keeps the code for status.Code.
func (e *reachError) GRPCStatus() *status.Status { return status.New(codes.Unavailable, e.msg) }

// ReachError is the message for a call that failed with UNAVAILABLE: why
// xlbd at target (a socket path, or host:port when tcp) cannot be reached
// (dialErr, the connection error if any) and what to do. The error keeps
// the code UNAVAILABLE (status.Code).
func ReachError(target string, tcp bool, dialErr, callErr error) error {
	msg := "cannot reach xlbd at " + target + ": "
	switch {
	case errors.Is(dialErr, syscall.ENOENT):
		msg += "no such file (is xlbd running? --socket)"
	case errors.Is(dialErr, syscall.EACCES), errors.Is(dialErr, syscall.EPERM):
		msg += "permission denied (the socket is 0600, owned by xlbd's user: run as root)"
	case errors.Is(dialErr, syscall.ECONNREFUSED):
		msg += "connection refused (is xlbd running? --socket / --addr)"
	case dialErr != nil:
		msg += dialErr.Error()
	case tcp:
		msg += status.Convert(callErr).Message() +
			" (mutual TLS: check --tls-cert, --tls-key, --tls-ca; the server's client CA must have signed your certificate)"
	default:
		msg += status.Convert(callErr).Message()
	}
	return &reachError{msg}
}
