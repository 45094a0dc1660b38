package health

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/config"
)

var loopback = netip.MustParseAddr("127.0.0.1")

// check runs chk once against addr with timeout and returns its error and
// duration.
func check(t *testing.T, chk Checker, addr netip.Addr, timeout time.Duration) (error, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	err := chk.Check(ctx, addr)
	return err, time.Since(start)
}

func mustChecker(t *testing.T, hc config.HealthCheck) Checker {
	t.Helper()
	chk, err := NewChecker(hc)
	if err != nil {
		t.Fatalf("NewChecker(%+v): %v", hc, err)
	}
	return chk
}

// freePort returns a loopback TCP or UDP port nobody listens on.
func freePort(t *testing.T, network string) uint16 {
	t.Helper()
	if network == "udp" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return uint16(c.LocalAddr().(*net.UDPAddr).Port)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

// tcpServer accepts and closes connections, counting them.
func tcpServer(t *testing.T, network, addr string) (port uint16, accepted *atomic.Int64) {
	t.Helper()
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Skipf("listen %s %s: %v", network, addr, err)
	}
	t.Cleanup(func() { l.Close() })
	accepted = new(atomic.Int64)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	return uint16(l.Addr().(*net.TCPAddr).Port), accepted
}

func TestTCP(t *testing.T) {
	port, accepted := tcpServer(t, "tcp", "127.0.0.1:0")
	chk := mustChecker(t, config.HealthCheck{Name: "t", Type: config.CheckTCP, Port: port})
	if err, _ := check(t, chk, loopback, 5*time.Second); err != nil {
		t.Errorf("listening port: %v", err)
	}
	closed := mustChecker(t, config.HealthCheck{Name: "t", Type: config.CheckTCP, Port: freePort(t, "tcp")})
	if err, _ := check(t, closed, loopback, 5*time.Second); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("closed port: %v, want connection refused", err)
	}
	for deadline := time.Now().Add(time.Second); accepted.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if n := accepted.Load(); n != 1 {
		t.Errorf("server accepted %d connections, want 1", n)
	}

	port6, _ := tcpServer(t, "tcp6", "[::1]:0")
	chk6 := mustChecker(t, config.HealthCheck{Name: "t", Type: config.CheckTCP, Port: port6})
	if err, _ := check(t, chk6, netip.IPv6Loopback(), 5*time.Second); err != nil {
		t.Errorf("IPv6: %v", err)
	}
}

func TestTCPTimeout(t *testing.T) {
	// The checker honours its context (the Monitor's timeout).
	chk := mustChecker(t, config.HealthCheck{Name: "t", Type: config.CheckTCP, Port: 9})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := chk.Check(ctx, loopback); err == nil {
		t.Error("Check with a cancelled context succeeded")
	}
}

func httpCheck(port uint16, mod func(*config.HealthCheck)) config.HealthCheck {
	hc := config.HealthCheck{Name: "h", Type: config.CheckHTTP, Port: port, Path: "/", ExpectStatus: 200}
	if mod != nil {
		mod(&hc)
	}
	return hc
}

func serverPort(t *testing.T, s *httptest.Server) uint16 {
	t.Helper()
	ap, err := netip.ParseAddrPort(s.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return ap.Port()
}

func TestHTTP(t *testing.T) {
	var hits atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "all systems ok\n") })
	mux.HandleFunc("/fail", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "down", http.StatusServiceUnavailable) })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(2 * time.Second):
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/host", func(w http.ResponseWriter, r *http.Request) {
		if r.Host != "web.example" {
			http.Error(w, "wrong host "+r.Host, http.StatusMisdirectedRequest)
		}
	})
	mux.HandleFunc("/query", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("full") != "1" || r.Method != http.MethodGet {
			http.Error(w, "bad", http.StatusBadRequest)
		}
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/fail", http.StatusFound) })
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Repeat("x", 2*maxRead)))
		io.WriteString(w, "needle")
	})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.Header.Get("Connection") != "close" {
			t.Errorf("request without Connection: close: %v", r.Header)
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	port := serverPort(t, s)

	for _, tc := range []struct {
		name    string
		mod     func(*config.HealthCheck)
		wantErr string // "" for healthy
	}{
		// The timeout is 5s except where a timeout is the point.
		{"status", func(h *config.HealthCheck) { h.Path = "/ok" }, ""},
		{"status mismatch", func(h *config.HealthCheck) { h.Path = "/fail" }, "status 503, want 200"},
		{"expected non-200", func(h *config.HealthCheck) { h.Path = "/fail"; h.ExpectStatus = 503 }, ""},
		{"not found", func(h *config.HealthCheck) { h.Path = "/nope" }, "status 404, want 200"},
		{"body", func(h *config.HealthCheck) { h.Path = "/ok"; h.ExpectBody = "systems ok" }, ""},
		{"body lacks", func(h *config.HealthCheck) { h.Path = "/ok"; h.ExpectBody = "degraded" }, `lacks "degraded"`},
		{"body beyond the read limit", func(h *config.HealthCheck) { h.Path = "/big"; h.ExpectBody = "needle" }, `body (65536 bytes read) lacks "needle"`},
		{"host header", func(h *config.HealthCheck) { h.Path = "/host"; h.Host = "web.example" }, ""},
		{"host header missing", func(h *config.HealthCheck) { h.Path = "/host" }, "status 421"},
		{"query", func(h *config.HealthCheck) { h.Path = "/query?full=1" }, ""},
		{"redirect not followed", func(h *config.HealthCheck) { h.Path = "/moved"; h.ExpectStatus = 302 }, ""},
		{"timeout", func(h *config.HealthCheck) { h.Path = "/slow" }, "context deadline exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chk := mustChecker(t, httpCheck(port, tc.mod))
			timeout := 5 * time.Second
			if tc.name == "timeout" {
				timeout = 300 * time.Millisecond
			}
			err, d := check(t, chk, loopback, timeout)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Check = %v, want healthy", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Check = %v, want an error containing %q", err, tc.wantErr)
			}
			if d > timeout+time.Second {
				t.Errorf("Check took %v with a timeout of %v", d, timeout)
			}
		})
	}

	chk := mustChecker(t, httpCheck(freePort(t, "tcp"), nil))
	if err, _ := check(t, chk, loopback, 5*time.Second); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("closed port: %v", err)
	}
}

func TestHTTPIgnoresProxyEnvironment(t *testing.T) {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(s.Close)
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1")
	t.Setenv("http_proxy", "http://127.0.0.1:1")
	chk := mustChecker(t, httpCheck(serverPort(t, s), nil))
	if err, _ := check(t, chk, loopback, 5*time.Second); err != nil {
		t.Errorf("Check through HTTP_PROXY: %v", err)
	}
}

func TestHTTPS(t *testing.T) {
	var sni atomic.Value
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sni.Store(r.TLS.ServerName)
		io.WriteString(w, "secure ok")
	}))
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // the failed handshakes below
	s.StartTLS()
	t.Cleanup(s.Close)
	port := serverPort(t, s)
	https := func(mod func(*config.HealthCheck)) config.HealthCheck {
		return httpCheck(port, func(h *config.HealthCheck) {
			h.Type = config.CheckHTTPS
			if mod != nil {
				mod(h)
			}
		})
	}

	chk := mustChecker(t, https(func(h *config.HealthCheck) {
		h.TLSSkipVerify, h.ExpectBody, h.Host = true, "secure", "web.example:8443"
	}))
	if err, _ := check(t, chk, loopback, 5*time.Second); err != nil {
		t.Errorf("skip verify: %v", err)
	}
	if got, _ := sni.Load().(string); got != "web.example" {
		t.Errorf("TLS server name %q, want web.example (the host without port)", got)
	}
	// httptest's certificate is signed by a CA the system does not trust.
	chk = mustChecker(t, https(nil))
	if err, _ := check(t, chk, loopback, 5*time.Second); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("verify: %v, want a certificate error", err)
	}
	// Plain HTTP to a TLS port fails.
	chk = mustChecker(t, httpCheck(port, nil))
	if err, _ := check(t, chk, loopback, 5*time.Second); err == nil {
		t.Error("http to a TLS server succeeded")
	}
}

// udpServer answers each datagram with reply(datagram), or not at all when
// reply returns nil.
func udpServer(t *testing.T, reply func([]byte) []byte) (uint16, *atomic.Int64) {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var n atomic.Int64
	go func() {
		buf := make([]byte, 2048)
		for {
			k, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			n.Add(1)
			if r := reply(buf[:k]); r != nil {
				c.WriteTo(r, from)
			}
		}
	}()
	return uint16(c.LocalAddr().(*net.UDPAddr).Port), &n
}

func TestUDP(t *testing.T) {
	echo, _ := udpServer(t, func(b []byte) []byte {
		if string(b) == "\x00ping" {
			return []byte("\x01pong\xff")
		}
		return []byte("what?")
	})
	silent, got := udpServer(t, func([]byte) []byte { return nil })
	udp := func(port uint16, payload, expect string) config.HealthCheck {
		hc := config.HealthCheck{Name: "u", Type: config.CheckUDP, Port: port, Payload: []byte(payload)}
		if expect != "" {
			hc.Expect = []byte(expect)
		}
		return hc
	}
	for _, tc := range []struct {
		name    string
		hc      config.HealthCheck
		wantErr string
	}{
		{"reply", udp(echo, "\x00ping", "pong\xff"), ""},
		{"any reply", udp(echo, "hello", ""), ""},
		{"wrong reply", udp(echo, "hello", "pong"), `reply of 5 bytes lacks "pong"`},
		{"no reply", udp(silent, "\x00ping", "pong"), "no reply: context deadline exceeded"},
		// Refused, not "no reply": the ICMP error ends the probe at once.
		{"port unreachable", udp(freePort(t, "udp"), "\x00ping", ""), "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			timeout := 5 * time.Second
			if tc.name == "no reply" {
				timeout = 200 * time.Millisecond
			}
			err, d := check(t, mustChecker(t, tc.hc), loopback, timeout)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Check = %v, want healthy", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Check = %v, want an error containing %q", err, tc.wantErr)
			}
			if d > timeout+time.Second {
				t.Errorf("Check took %v with a timeout of %v", d, timeout)
			}
		})
	}
	if got.Load() != 1 {
		t.Errorf("silent server got %d datagrams, want 1", got.Load())
	}
	if _, err := NewChecker(config.HealthCheck{Name: "u", Type: config.CheckUDP, Port: 1}); err == nil {
		t.Error("NewChecker accepted a UDP check without payload")
	}
}

func TestExec(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	args := script("args.sh", `[ "$1" = "$XLB_BACKEND" ] && [ "$2" = "$XLB_PORT" ] && [ "$XLB_CHECK" = x ] && [ "$3" = "addr=$XLB_BACKEND:$XLB_PORT" ] || { echo "got $*" >&2; exit 3; }`)
	noPort := script("noport.sh", `[ -z "${XLB_PORT+set}" ] && [ "$1" = "" ]`)
	loud := script("loud.sh", `head -c 100000 /dev/zero | tr '\0' 'y'; echo; echo oops >&2; exit 1`)
	for _, tc := range []struct {
		name    string
		argv    []string
		port    uint16
		wantErr string
	}{
		{"true", []string{"/bin/true"}, 0, ""},
		{"false", []string{"/bin/false"}, 0, "/bin/false: exit status 1"},
		{"path lookup", []string{"true"}, 0, ""},
		{"substitution and environment", []string{args, "{{address}}", "{{port}}", "addr={{address}}:{{port}}"}, 8080, ""},
		{"no port", []string{noPort, "{{port}}"}, 0, ""},
		{"missing program", []string{filepath.Join(dir, "absent")}, 0, "no such file"},
		{"output kept, bounded", []string{loud}, 0, "exit status 1: yyyy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chk := mustChecker(t, config.HealthCheck{Name: "x", Type: config.CheckExec, Command: tc.argv, Port: tc.port})
			err, _ := check(t, chk, loopback, 5*time.Second)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Check = %v, want healthy", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Check = %v, want an error containing %q", err, tc.wantErr)
			}
			if err != nil && len(err.Error()) > maxOutput+200 {
				t.Errorf("error message is %d bytes long", len(err.Error()))
			}
		})
	}

	// A timeout kills the command's whole process group, so a child holding
	// the output pipe does not keep the probe waiting until waitDelay.
	hang := script("hang.sh", "sleep 30 &\nsleep 30\n")
	chk := mustChecker(t, config.HealthCheck{Name: "x", Type: config.CheckExec, Command: []string{hang}})
	err, d := check(t, chk, loopback, 100*time.Millisecond)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || d >= waitDelay {
		t.Errorf("hanging command: %v after %v, want a deadline error before waitDelay %v", err, d, waitDelay)
	}
	if _, err := NewChecker(config.HealthCheck{Name: "x", Type: config.CheckExec}); err == nil {
		t.Error("NewChecker accepted an exec check without command")
	}
}

func TestCapped(t *testing.T) {
	w := &capped{max: 4}
	for _, s := range []string{"ab", "cdef", "gh"} {
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if got, want := w.String(), "abcd ... (4 more bytes)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestNewCheckerUnknownType(t *testing.T) {
	if _, err := NewChecker(config.HealthCheck{Name: "z", Type: 99}); err == nil {
		t.Error("NewChecker accepted type 99")
	}
	if _, err := NewChecker(config.HealthCheck{Name: "z", Type: config.CheckHTTP, Path: "no-slash"}); err == nil {
		t.Error("NewChecker accepted an invalid path")
	}
}
