package statuspage

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/api/apitest"
)

func get(t *testing.T, srv *httptest.Server, path string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// TestSnapshot: /status.json carries the API's messages in their
// xlbctl -o json form, rates measured over the interval (the fake's
// counters grow 100 packets per reading), a history per service that
// keeps only the configured span, and the connection table's count.
func TestSnapshot(t *testing.T) {
	fake := apitest.New()
	fake.OnRead = func(f *apitest.Fake) { f.AddCounters("web", "10.0.1.1", api.Counters{Packets: 100, Bytes: 1000}) }
	p := New(api.NewService(fake), Options{Interval: 50 * time.Millisecond, History: 200 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	time.Sleep(600 * time.Millisecond)
	cancel()
	<-done
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	resp, body := get(t, srv, "/status.json")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status.json: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	var snap struct {
		Status struct {
			Node      string `json:"node"`
			Conntrack struct {
				InUse string `json:"in_use"` // uint64: a JSON string, as xlbctl prints it
			} `json:"conntrack"`
		} `json:"status"`
		Services struct {
			Services []struct {
				Name  string `json:"name"`
				Rates struct {
					Packets float64 `json:"packets"`
				} `json:"rates"`
			} `json:"services"`
		} `json:"services"`
		Counters struct {
			Global []struct {
				Name string `json:"name"`
			} `json:"global"`
		} `json:"counters"`
		History     History      `json:"history"`
		Connections *Connections `json:"connections"`
		Error       string       `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &snap); err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	if snap.Error != "" || snap.Status.Node != "fake" || snap.Status.Conntrack.InUse != "3" || len(snap.Counters.Global) == 0 {
		t.Fatalf("snapshot: %+v", snap)
	}
	if len(snap.Services.Services) != 2 || snap.Services.Services[0].Name != "web" || snap.Services.Services[0].Rates.Packets <= 0 {
		t.Fatalf("services: %+v", snap.Services)
	}
	// The fake's table: web's two backends one live entry each, an
	// expired entry of dns (in use, not counted per backend).
	if c := snap.Connections; c == nil || c.InUse != 3 || c.Capacity != 1<<20 || c.Truncated ||
		c.Backends["web 10.0.1.1"] != 1 || c.Backends["web 10.0.1.2"] != 1 || len(c.Backends) != 2 {
		t.Fatalf("connections: %+v", snap.Connections)
	}
	if len(snap.History.Series) != 2 {
		t.Fatalf("history: %+v", snap.History)
	}
	web := snap.History.Series[0]
	if n := len(web.T); n < 2 || n > 5 || len(web.Packets) != n || web.Packets[n-1] <= 0 {
		t.Fatalf("web's series over 200ms of 50ms samples: %+v", web)
	}
	if span := web.T[len(web.T)-1] - web.T[0]; span > 200 {
		t.Fatalf("series spans %d ms, more than the history", span)
	}
}

// TestFailure: a sample that fails is reported in the snapshot's error;
// the last good parts stay.
func TestFailure(t *testing.T) {
	fake := apitest.New()
	p := New(api.NewService(fake), Options{Interval: 20 * time.Millisecond})
	if err := p.sample(context.Background()); err != nil {
		t.Fatal(err)
	}
	fake.Lock()
	fake.Err = io.ErrUnexpectedEOF
	fake.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	p.Run(ctx)
	s := p.Snapshot()
	if !strings.Contains(s.Error, "unexpected EOF") || !strings.Contains(string(s.Status), `"node":"fake"`) {
		t.Fatalf("after a failure: error %q, status %s", s.Error, s.Status)
	}
}

// TestAssets: the page and its files are served from the binary with a
// policy that lets nothing else load, and refer to nothing outside it.
func TestAssets(t *testing.T) {
	srv := httptest.NewServer(New(api.NewService(apitest.New()), Options{}).Handler())
	defer srv.Close()
	external := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//|url\(\s*["']?(https?:)?//|import\s`)
	for _, path := range []string{"/", "/status/app.js", "/status/style.css"} {
		resp, body := get(t, srv, path)
		if resp.StatusCode != 200 || len(body) < 100 {
			t.Fatalf("%s: %s, %d bytes", path, resp.Status, len(body))
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Fatalf("%s: Content-Security-Policy %q", path, csp)
		}
		if m := external.FindString(body); m != "" {
			t.Fatalf("%s refers to something outside: %q", path, m)
		}
	}
	for _, path := range []string{"/nothing", "/status/nothing.js", "/status/"} {
		if resp, _ := get(t, srv, path); resp.StatusCode != 404 {
			t.Fatalf("%s: %s, want 404", path, resp.Status)
		}
	}
	if resp, err := http.Post(srv.URL+"/status.json", "application/json", strings.NewReader("{}")); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST /status.json: %v %v, want 405 (read-only)", resp.Status, err)
	}
}
