package health

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"

	"github.com/xlbproject/xlb/internal/config"
)

// httpChecker sends GET and succeeds on the expected status and, when set,
// a body holding the expected substring. Redirects are not followed (a 301
// is a status like any other), no proxy is used, and every probe opens a new
// connection, as a client's would.
type httpChecker struct {
	scheme     string
	port       uint16
	target     string // request target: path and query
	host       string // Host header; "" for the address
	status     int
	expectBody []byte
	client     *http.Client
}

func newHTTP(hc config.HealthCheck) (*httpChecker, error) {
	if _, err := url.ParseRequestURI(hc.Path); err != nil {
		return nil, fmt.Errorf("health check %q: path %q: %w", hc.Name, hc.Path, err)
	}
	c := &httpChecker{
		scheme: "http", port: hc.Port, target: hc.Path, host: hc.Host,
		status: int(hc.ExpectStatus), expectBody: []byte(hc.ExpectBody),
	}
	tr := &http.Transport{
		Proxy:                  nil, // never HTTP_PROXY: probe the backend itself
		DialContext:            (&net.Dialer{}).DialContext,
		DisableKeepAlives:      true,
		DisableCompression:     true,
		MaxResponseHeaderBytes: maxRead,
	}
	if hc.Type == config.CheckHTTPS {
		c.scheme = "https"
		tr.TLSClientConfig = &tls.Config{
			InsecureSkipVerify: hc.TLSSkipVerify,
			// With no host, Go verifies the certificate against the
			// address (IP SANs).
			ServerName: hostOnly(hc.Host),
		}
	}
	c.client = &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return c, nil
}

// hostOnly strips an optional port from a Host header value.
func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return h
}

func (c *httpChecker) Check(ctx context.Context, target netip.Addr) error {
	u := c.scheme + "://" + netip.AddrPortFrom(target, c.port).String() + c.target
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	if c.host != "" {
		req.Host = c.host
	}
	req.Header.Set("User-Agent", "xlb-health-check/1")
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != c.status {
		return fmt.Errorf("GET %s: status %d, want %d", u, resp.StatusCode, c.status)
	}
	if len(c.expectBody) == 0 {
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxRead))
	switch {
	case bytes.Contains(body, c.expectBody):
		return nil
	case err != nil:
		return fmt.Errorf("GET %s: read body: %w", u, err)
	}
	return fmt.Errorf("GET %s: body (%d bytes read) lacks %q", u, len(body), c.expectBody)
}
