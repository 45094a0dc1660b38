package api_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io/fs"
	"log/slog"
	"math"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/xlbproject/xlb/api/xlb/v1"
	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/api/apitest"
)

// serve starts a server over b on a socket in a temporary directory and
// returns a client connected to it.
func serve(t *testing.T, b api.Backend, o api.Options) (*api.Server, *api.Client) {
	t.Helper()
	if o.Socket == "" {
		o.Socket = filepath.Join(t.TempDir(), "run", "xlbd.sock")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	srv, err := api.Listen(b, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	c, err := api.Dial(api.DialOptions{Socket: o.Socket})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return srv, c
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestSocketMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "new", "dir", "xlbd.sock")
	srv, c := serve(t, apitest.New(), api.Options{Socket: path})
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		t.Fatalf("%s: mode %v, want a socket", path, fi.Mode())
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Fatalf("socket mode %o, want 600", perm)
	}
	if srv.SocketPath() != path {
		t.Fatalf("SocketPath %q", srv.SocketPath())
	}
	if _, err := c.Status(ctx(t), &pb.StatusRequest{}); err != nil {
		t.Fatal(err)
	}
	// No temporary file left behind.
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Fatalf("socket directory holds %d entries, want 1", len(ents))
	}
}

func TestSocketRemovedOnStop(t *testing.T) {
	path := filepath.Join(t.TempDir(), "xlbd.sock")
	srv, err := api.Listen(apitest.New(), api.Options{Socket: path})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := srv.Serve(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("socket still there after Serve returned: %v", err)
	}
}

func TestSocketInUse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "xlbd.sock")
	serve(t, apitest.New(), api.Options{Socket: path})
	_, err := api.Listen(apitest.New(), api.Options{Socket: path})
	if !errors.Is(err, api.ErrSocketInUse) {
		t.Fatalf("second Listen: %v, want ErrSocketInUse", err)
	}
	if !strings.Contains(err.Error(), "another xlbd") {
		t.Errorf("message %q does not say another xlbd listens", err)
	}
	// The first server still answers on it.
	c, _ := api.Dial(api.DialOptions{Socket: path})
	defer c.Close()
	if _, err := c.Status(ctx(t), &pb.StatusRequest{}); err != nil {
		t.Fatal(err)
	}
}

func TestStaleSocketReplaced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "xlbd.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close() // the file stays, nobody listens: a crashed daemon's socket
	_, c := serve(t, apitest.New(), api.Options{Socket: path})
	if _, err := c.Status(ctx(t), &pb.StatusRequest{}); err != nil {
		t.Fatal(err)
	}
}

func TestSocketPathNotASocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "xlbd.sock")
	if err := os.WriteFile(path, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Listen(apitest.New(), api.Options{Socket: path}); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("Listen over a regular file: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "precious" {
		t.Fatal("the regular file was touched")
	}
}

func TestTCPRequiresTLS(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		o    api.Options
		want error
	}{
		{"no tls", api.Options{TCP: "127.0.0.1:0"}, api.ErrTLSRequired},
		{"no ca", api.Options{TCP: "127.0.0.1:0", TLS: api.TLSFiles{Cert: "c", Key: "k"}}, api.ErrTLSRequired},
		{"tls without tcp", api.Options{TLS: api.TLSFiles{Cert: "c", Key: "k", CA: "ca"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Socket = filepath.Join(dir, tc.name+".sock")
			srv, err := api.Listen(apitest.New(), tc.o)
			if err == nil {
				srv.Close()
				t.Fatal("Listen accepted the options")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			if _, serr := os.Lstat(tc.o.Socket); serr == nil {
				t.Fatal("socket left behind by a failed Listen")
			}
		})
	}
}

// pki is a CA with files for a server and clients.
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caFile string
}

func newPKI(t *testing.T, name string) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	p := &pki{dir: t.TempDir(), caCert: cert, caKey: key}
	p.caFile = p.write(t, name+"-ca.pem", "CERTIFICATE", der)
	return p
}

func (p *pki) write(t *testing.T, name, typ string, der []byte) string {
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// issue returns certificate and key files for cn, a server (with
// 127.0.0.1 and localhost as names) or a client certificate.
func (p *pki) issue(t *testing.T, cn string, server bool) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return p.write(t, cn+".pem", "CERTIFICATE", der), p.write(t, cn+"-key.pem", "EC PRIVATE KEY", kder)
}

func TestMutualTLS(t *testing.T) {
	ca := newPKI(t, "xlb")
	srvCert, srvKey := ca.issue(t, "xlbd", true)
	cliCert, cliKey := ca.issue(t, "operator", false)
	other := newPKI(t, "other")
	badCert, badKey := other.issue(t, "intruder", false)

	fake := apitest.New()
	srv, _ := serve(t, fake, api.Options{
		TCP: "127.0.0.1:0",
		TLS: api.TLSFiles{Cert: srvCert, Key: srvKey, CA: ca.caFile},
	})
	addr := srv.TCPAddr().String()

	t.Run("valid client certificate", func(t *testing.T) {
		c, err := api.Dial(api.DialOptions{TCP: addr, TLS: api.TLSFiles{Cert: cliCert, Key: cliKey, CA: ca.caFile}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		st, err := c.Status(ctx(t), &pb.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if st.Node != "fake" {
			t.Fatalf("node %q", st.Node)
		}
	})

	// A client that trusts the server but has no certificate of its own.
	refused := func(t *testing.T, cfg *tls.Config) {
		t.Helper()
		fake.Lock()
		fake.Err = errors.New("the backend must not be reached")
		fake.Unlock()
		defer func() { fake.Lock(); fake.Err = nil; fake.Unlock() }()
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, err = pb.NewXLBClient(conn).Status(ctx(t), &pb.StatusRequest{})
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("call: %v, want UNAVAILABLE (handshake refused)", err)
		}
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.caCert)
	t.Run("no client certificate", func(t *testing.T) {
		refused(t, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
	})
	t.Run("certificate from another CA", func(t *testing.T) {
		pair, err := tls.LoadX509KeyPair(badCert, badKey)
		if err != nil {
			t.Fatal(err)
		}
		refused(t, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", Certificates: []tls.Certificate{pair}})
	})
	t.Run("plaintext", func(t *testing.T) {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(2 * time.Second))
		conn.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
		buf := make([]byte, 64)
		n, _ := conn.Read(buf)
		if n > 0 && strings.Contains(string(buf[:n]), "\x00\x00") {
			t.Fatalf("plaintext HTTP/2 got an answer: %q", buf[:n])
		}
	})
	t.Run("xlbctl message", func(t *testing.T) {
		c, err := api.Dial(api.DialOptions{TCP: addr, TLS: api.TLSFiles{Cert: badCert, Key: badKey, CA: ca.caFile}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, err = c.Status(ctx(t), &pb.StatusRequest{})
		if err == nil || !strings.Contains(err.Error(), "mutual TLS") {
			t.Fatalf("error %v does not point at TLS", err)
		}
	})
}

func TestNotRunning(t *testing.T) {
	path := filepath.Join(t.TempDir(), "xlbd.sock")
	c, err := api.Dial(api.DialOptions{Socket: path})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Status(ctx(t), &pb.StatusRequest{})
	want := "cannot reach xlbd at " + path + ": no such file (is xlbd running? --socket)"
	if err == nil || err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
}

func TestReachError(t *testing.T) {
	for _, tc := range []struct {
		dial error
		want string
	}{
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.EACCES)}, "permission denied (the socket is 0600, owned by xlbd's user: run as root)"},
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, "connection refused (is xlbd running?"},
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ENOENT)}, "no such file (is xlbd running? --socket)"},
	} {
		got := api.ReachError("/run/xlb/xlbd.sock", false, tc.dial, status.Error(codes.Unavailable, "x")).Error()
		if !strings.HasPrefix(got, "cannot reach xlbd at /run/xlb/xlbd.sock: ") || !strings.Contains(got, tc.want) {
			t.Errorf("%v: %q, want ... %q", tc.dial, got, tc.want)
		}
	}
}

func TestStatus(t *testing.T) {
	_, c := serve(t, apitest.New(), api.Options{})
	st, err := c.Status(ctx(t), &pb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Node != "fake" || st.Interface != "eth0" || st.XdpMode != "native" || st.ProgramId != 42 || !st.SelfCheck.Ok {
		t.Fatalf("status %v", st)
	}
	if len(st.BgpSessions) != 1 || st.BgpSessions[0].Peer != "10.0.0.254" || st.BgpSessions[0].State != "established" ||
		st.BgpSessions[0].Uptime.AsDuration() != 90*time.Second {
		t.Fatalf("bgp %v", st.BgpSessions)
	}
	if st.Config.Services != 2 || st.Config.Backends != 5 || st.Config.Source != "/etc/xlb/xlb.yaml" ||
		!st.Config.CommittedAt.AsTime().Equal(time.Unix(1700000050, 0)) {
		t.Fatalf("config %v", st.Config)
	}
	if st.Conntrack.Capacity != 1<<20 || st.Conntrack.InUse == nil || *st.Conntrack.InUse != 3 {
		t.Fatalf("conntrack %v", st.Conntrack)
	}
	if st.SelfCheck.LastFailureAt != nil {
		t.Fatal("zero time sent as a timestamp")
	}
}

func TestListServices(t *testing.T) {
	_, c := serve(t, apitest.New(), api.Options{})
	r, err := c.ListServices(ctx(t), &pb.ListServicesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Services) != 2 {
		t.Fatalf("%d services", len(r.Services))
	}
	web := r.Services[0]
	if web.Name != "web" || web.Vip != "10.0.0.100" || web.Port != 80 || web.Protocol != pb.Protocol_PROTOCOL_TCP ||
		web.TableSize != 65537 || web.Encap != "gre" || web.ActivePool != "web" || web.Counters.Packets != 1000 || web.Rates != nil {
		t.Fatalf("web %v", web)
	}
	if len(web.Backends) != 3 {
		t.Fatalf("web backends %v", web.Backends)
	}
	b := web.Backends[0]
	if b.Address != "10.0.1.1" || b.Service != "web" || b.Weight != 2 || b.State != pb.BackendState_BACKEND_STATE_ACTIVE ||
		!b.Health.Healthy || b.Health.Check != "web" || b.Counters.Packets != 600 || b.Counters.NewFlows != 60 || !b.InDataPlane || b.TableEntries == 0 {
		t.Fatalf("backend %v", b)
	}
	if r.Sample.At == nil || r.Sample.Interval != nil {
		t.Fatalf("sample %v", r.Sample)
	}
	one, err := c.ListServices(ctx(t), &pb.ListServicesRequest{Service: "dns"})
	if err != nil || len(one.Services) != 1 || one.Services[0].Vip != "2001:db8::100" {
		t.Fatalf("filter: %v %v", one, err)
	}
	_, err = c.ListServices(ctx(t), &pb.ListServicesRequest{Service: "nope"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("unknown service: %v", err)
	}
}

func TestRates(t *testing.T) {
	fake := apitest.New()
	reads := 0
	fake.OnRead = func(f *apitest.Fake) {
		if reads > 0 {
			f.AddCounters("web", "10.0.1.1", api.Counters{Packets: 100, Bytes: 10000, NewFlows: 10})
		}
		reads++
	}
	_, c := serve(t, fake, api.Options{})
	r, err := c.ListServices(ctx(t), &pb.ListServicesRequest{RateInterval: durationpb.New(50 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	iv := r.Sample.Interval.AsDuration()
	if iv < 50*time.Millisecond {
		t.Fatalf("interval %v", iv)
	}
	want := 100 / iv.Seconds()
	web := r.Services[0]
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*b }
	if web.Rates == nil || !near(web.Rates.Packets, want) || !near(web.Rates.Bytes, 100*want) || !near(web.Rates.NewFlows, want/10) {
		t.Fatalf("service rates %v, want %v pps", web.Rates, want)
	}
	if !near(web.Backends[0].Rates.Packets, want) || web.Backends[1].Rates.Packets != 0 {
		t.Fatalf("backend rates %v %v", web.Backends[0].Rates, web.Backends[1].Rates)
	}
	_, err = c.ListServices(ctx(t), &pb.ListServicesRequest{RateInterval: durationpb.New(time.Minute)})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("rate interval of a minute: %v", err)
	}
}

func TestListBackends(t *testing.T) {
	_, c := serve(t, apitest.New(), api.Options{})
	r, err := c.ListBackends(ctx(t), &pb.ListBackendsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range r.Backends {
		got = append(got, b.Service+"/"+b.Address)
	}
	want := "dns/2001:db8:1::1 dns/2001:db8:1::2 web/10.0.1.1 web/10.0.1.2 web/10.0.2.1"
	if strings.Join(got, " ") != want {
		t.Fatalf("backends %v, want %s", got, want)
	}
	r, err = c.ListBackends(ctx(t), &pb.ListBackendsRequest{Address: "10.0.1.2"})
	if err != nil || len(r.Backends) != 1 || r.Backends[0].Counters.Packets != 400 {
		t.Fatalf("by address: %v %v", r, err)
	}
	if _, err = c.ListBackends(ctx(t), &pb.ListBackendsRequest{Address: "nope"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad address: %v", err)
	}
}

func TestCounters(t *testing.T) {
	fake := apitest.New()
	_, c := serve(t, fake, api.Options{})
	r, err := c.Counters(ctx(t), &pb.CountersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Global) != len(fake.Global) {
		t.Fatalf("%d global counters, want %d", len(r.Global), len(fake.Global))
	}
	for i, g := range r.Global {
		if g.Name != fake.Global[i].Name || g.Value != fake.Global[i].Value {
			t.Fatalf("global[%d] = %v, want %v", i, g, fake.Global[i])
		}
	}
	if len(r.Services) != 2 || r.Services[0].Counters.Bytes != 100000 || len(r.Backends) != 5 || r.Backends[1].Counters.Packets != 400 {
		t.Fatalf("counters %v", r)
	}
}

const badConfig = `node:
  interface: eth0
  address: 10.0.0.1
pools:
  p:
    backends: [{address: 10.0.1.1}]
services:
  - name: s
    vip: 10.0.0.100
    port: 80
    protocol: tcp
    table_size: 65536
    pools: [p]
`

func TestApplyConfigRejected(t *testing.T) {
	fake := apitest.New()
	_, c := serve(t, fake, api.Options{})
	before := fake.Desired()
	for _, dry := range []bool{true, false} {
		_, err := c.ApplyConfig(ctx(t), &pb.ApplyConfigRequest{Yaml: []byte(badConfig), Source: "bad.yaml", DryRun: dry})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("dry run %v: %v, want INVALID_ARGUMENT", dry, err)
		}
		errs := api.ConfigErrorsOf(err)
		if len(errs) != 1 {
			t.Fatalf("details %v", errs)
		}
		e := errs[0]
		if e.Field != "services[0].table_size" || e.Line != 12 || e.Source != "bad.yaml" || e.Kind != "invalid value" || e.Message == "" {
			t.Fatalf("detail %v", e)
		}
		if !strings.Contains(status.Convert(err).Message(), "bad.yaml:12: services[0].table_size") {
			t.Fatalf("message %q", status.Convert(err).Message())
		}
	}
	if fake.Desired() != before || len(fake.Applied) != 0 {
		t.Fatal("a rejected config changed the running state")
	}
	// A config that validates but needs a restart.
	moved := strings.Replace(apitest.Config, "interface: eth0", "interface: eth1", 1)
	_, err := c.ApplyConfig(ctx(t), &pb.ApplyConfigRequest{Yaml: []byte(moved)})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "restart") {
		t.Fatalf("interface change: %v", err)
	}
	if _, err := c.ApplyConfig(ctx(t), &pb.ApplyConfigRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty: %v", err)
	}
}

func TestApplyConfig(t *testing.T) {
	fake := apitest.New()
	_, c := serve(t, fake, api.Options{})
	next := strings.Replace(apitest.Config, "      - {address: 10.0.1.2}\n", "      - {address: 10.0.1.3}\n", 1)
	next = strings.Replace(next, "table_size: 251", "table_size: 509", 1)
	before := fake.Desired()
	r, err := c.ApplyConfig(ctx(t), &pb.ApplyConfigRequest{Yaml: []byte(next), DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Committed || fake.Desired() != before {
		t.Fatal("dry run committed")
	}
	d := r.Diff
	if len(d.BackendsAdded) != 1 || d.BackendsAdded[0].Address != "10.0.1.3" || d.BackendsAdded[0].Service != "web" ||
		len(d.BackendsRemoved) != 1 || d.BackendsRemoved[0].Address != "10.0.1.2" ||
		len(d.ServicesChanged) != 1 || d.ServicesChanged[0] != "dns" || len(d.ServicesAdded)+len(d.ServicesRemoved) != 0 {
		t.Fatalf("diff %v", d)
	}
	r, err = c.ApplyConfig(ctx(t), &pb.ApplyConfigRequest{Yaml: []byte(next), Source: "next.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Committed || r.Generation != 2 || len(fake.Applied) != 1 {
		t.Fatalf("commit %v", r)
	}
	st, _ := c.Status(ctx(t), &pb.StatusRequest{})
	if st.Config.Generation != 2 || st.Config.Source != "api (next.yaml)" {
		t.Fatalf("status after apply: %v", st.Config)
	}
	// A file larger than gRPC's default 4 MiB message limit still goes.
	big := next + strings.Repeat("# "+strings.Repeat("x", 1000)+"\n", 5000)
	if _, err := c.ApplyConfig(ctx(t), &pb.ApplyConfigRequest{Yaml: []byte(big), DryRun: true}); err != nil {
		t.Fatalf("5 MB config: %v", err)
	}
}

func TestSetBackend(t *testing.T) {
	_, c := serve(t, apitest.New(), api.Options{})
	r, err := c.SetBackend(ctx(t), &pb.SetBackendRequest{Address: "10.0.1.1", Action: &pb.SetBackendRequest_Drain{Drain: true}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Backends) != 1 || r.Backends[0].Service != "web" {
		t.Fatalf("affected %v", r.Backends)
	}
	if _, err := c.SetBackend(ctx(t), &pb.SetBackendRequest{Address: "10.0.1.2", Service: "web", Action: &pb.SetBackendRequest_Weight{Weight: 7}}); err != nil {
		t.Fatal(err)
	}
	l, _ := c.ListBackends(ctx(t), &pb.ListBackendsRequest{Service: "web"})
	b1, b2 := l.Backends[0], l.Backends[1]
	if b1.State != pb.BackendState_BACKEND_STATE_DRAIN || b1.Override == nil || b1.Override.Drain == nil || !*b1.Override.Drain || b1.TableEntries != 0 {
		t.Fatalf("drained backend %v", b1)
	}
	if b2.Weight != 7 || b2.Override == nil || b2.Override.GetWeight() != 7 {
		t.Fatalf("weighted backend %v", b2)
	}
	if _, err := c.SetBackend(ctx(t), &pb.SetBackendRequest{Address: "10.0.1.1", Action: &pb.SetBackendRequest_Reset_{Reset_: true}}); err != nil {
		t.Fatal(err)
	}
	l, _ = c.ListBackends(ctx(t), &pb.ListBackendsRequest{Address: "10.0.1.1"})
	if l.Backends[0].Override != nil || l.Backends[0].State != pb.BackendState_BACKEND_STATE_ACTIVE {
		t.Fatalf("after reset %v", l.Backends[0])
	}
	for _, tc := range []struct {
		req  *pb.SetBackendRequest
		code codes.Code
	}{
		{&pb.SetBackendRequest{Address: "10.9.9.9", Action: &pb.SetBackendRequest_Drain{Drain: true}}, codes.NotFound},
		{&pb.SetBackendRequest{Address: "10.0.1.1", Service: "dns", Action: &pb.SetBackendRequest_Drain{Drain: true}}, codes.NotFound},
		{&pb.SetBackendRequest{Address: "x", Action: &pb.SetBackendRequest_Drain{Drain: true}}, codes.InvalidArgument},
		{&pb.SetBackendRequest{Address: "10.0.1.1"}, codes.InvalidArgument},
		{&pb.SetBackendRequest{Address: "10.0.1.1", Action: &pb.SetBackendRequest_Weight{Weight: 70000}}, codes.InvalidArgument},
	} {
		if _, err := c.SetBackend(ctx(t), tc.req); status.Code(err) != tc.code {
			t.Errorf("%v: %v, want %v", tc.req, err, tc.code)
		}
	}
}

func TestConntrackDump(t *testing.T) {
	_, c := serve(t, apitest.New(), api.Options{})
	r, err := c.ConntrackDump(ctx(t), &pb.ConntrackDumpRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Entries) != 2 || r.InUse != 3 || r.Matched != 2 || r.Truncated || r.Capacity != 1<<20 {
		t.Fatalf("dump %v", r)
	}
	e := r.Entries[0]
	if e.Cpu != 0 || e.Bucket != 7 || e.Tag != 0xabcdef1 || e.RealId != 1 || e.Backend != "10.0.1.1" || e.Service != "web" ||
		e.State != pb.ConntrackState_CONNTRACK_STATE_ESTABLISHED || e.Age.AsDuration() != 2*time.Second {
		t.Fatalf("entry %v", e)
	}
	r, _ = c.ConntrackDump(ctx(t), &pb.ConntrackDumpRequest{Limit: 1})
	if len(r.Entries) != 1 || !r.Truncated || r.Matched != 2 {
		t.Fatalf("limit 1: %v", r)
	}
	r, _ = c.ConntrackDump(ctx(t), &pb.ConntrackDumpRequest{State: pb.ConntrackState_CONNTRACK_STATE_SYN})
	if len(r.Entries) != 1 || r.Entries[0].Backend != "10.0.1.2" {
		t.Fatalf("syn: %v", r)
	}
	r, _ = c.ConntrackDump(ctx(t), &pb.ConntrackDumpRequest{Backend: "2001:db8:1::1", IncludeExpired: true})
	if len(r.Entries) != 1 || !r.Entries[0].Expired {
		t.Fatalf("backend filter: %v", r)
	}
	if _, err := c.ConntrackDump(ctx(t), &pb.ConntrackDumpRequest{Limit: 1 << 20}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("huge limit: %v", err)
	}
}

func TestExplain(t *testing.T) {
	_, c := serve(t, apitest.New(), api.Options{})
	r, err := c.Explain(ctx(t), &pb.ExplainRequest{Src: "192.0.2.1:40000", Dst: "10.0.0.100:80", Protocol: pb.Protocol_PROTOCOL_TCP, TcpFlags: 0x02})
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != "XDP_TX" || r.XdpAction != 3 || r.Service != "web" || r.Backend != "10.0.1.1" || r.Encap != "gre" ||
		r.Conntrack != pb.ConntrackResult_CONNTRACK_RESULT_MISS || len(r.Frame) == 0 {
		t.Fatalf("explain %v", r)
	}
	want := []string{
		"eth 02:00:00:00:00:01 > 02:00:00:00:00:02 type 0x0800",
		"ipv4 10.0.0.1 > 10.0.1.1 proto gre ttl 64 len 64",
		"gre proto 0x0800",
		"ipv4 192.0.2.1 > 10.0.0.100 proto tcp ttl 64 len 40",
		"tcp 40000 > 80 [S] seq 1000",
	}
	if strings.Join(r.Headers, "\n") != strings.Join(want, "\n") {
		t.Fatalf("headers:\n%s\nwant:\n%s", strings.Join(r.Headers, "\n"), strings.Join(want, "\n"))
	}
	r, err = c.Explain(ctx(t), &pb.ExplainRequest{Src: "[2001:db8::9]:5353", Dst: "[2001:db8::200]:53", Protocol: pb.Protocol_PROTOCOL_UDP})
	if err != nil || r.Verdict != "XDP_PASS" || r.Conntrack != pb.ConntrackResult_CONNTRACK_RESULT_NOT_LOOKED_UP || r.Reason == "" {
		t.Fatalf("not a VIP: %v %v", r, err)
	}
	for _, req := range []*pb.ExplainRequest{
		{Src: "192.0.2.1", Dst: "10.0.0.100:80", Protocol: pb.Protocol_PROTOCOL_TCP},
		{Src: "192.0.2.1:1", Dst: "[2001:db8::1]:80", Protocol: pb.Protocol_PROTOCOL_TCP},
		{Src: "192.0.2.1:1", Dst: "10.0.0.100:80"},
		{Src: "192.0.2.1:1", Dst: "10.0.0.100:80", Protocol: pb.Protocol_PROTOCOL_TCP, TcpFlags: 0x100},
	} {
		if _, err := c.Explain(ctx(t), req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v, want INVALID_ARGUMENT", req, err)
		}
	}
}

func TestNodeDrain(t *testing.T) {
	fake := apitest.New()
	_, c := serve(t, fake, api.Options{})
	for i, want := range []bool{true, false} {
		r, err := c.NodeDrain(ctx(t), &pb.NodeDrainRequest{})
		if err != nil || r.Changed != want {
			t.Fatalf("drain %d: %v %v", i, r, err)
		}
	}
	st, _ := c.Status(ctx(t), &pb.StatusRequest{})
	if !st.Drained {
		t.Fatal("status does not show the drain")
	}
	r, err := c.NodeUndrain(ctx(t), &pb.NodeUndrainRequest{})
	if err != nil || !r.Changed {
		t.Fatalf("undrain: %v %v", r, err)
	}
	fake.Lock()
	fake.HasBGP = false
	fake.Unlock()
	if _, err := c.NodeDrain(ctx(t), &pb.NodeDrainRequest{}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("drain without bgp: %v", err)
	}
}

func TestErrorCodes(t *testing.T) {
	fake := apitest.New()
	_, c := serve(t, fake, api.Options{})
	for _, tc := range []struct {
		err  error
		code codes.Code
	}{
		{errors.New("boom"), codes.Internal},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{api.ErrUnavailable, codes.Unavailable},
		{api.ErrUnimplemented, codes.Unimplemented},
	} {
		fake.Lock()
		fake.Err = tc.err
		fake.Unlock()
		_, err := c.Status(ctx(t), &pb.StatusRequest{})
		if status.Code(err) != tc.code {
			t.Errorf("%v: %v, want %v", tc.err, err, tc.code)
		}
	}
}
