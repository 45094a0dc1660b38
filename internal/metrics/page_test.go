package metrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/xlbproject/xlb/internal/api/apitest"
)

// TestStatusPageMount: without a page, / says how to turn it on; with
// one, / and the paths /metrics and /healthz do not take are the page's,
// and those two stay the exporter's.
func TestStatusPageMount(t *testing.T) {
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "page "+r.URL.Path) })
	for _, tc := range []struct {
		page http.Handler
		path string
		want string
	}{
		{nil, "/", "the status page is off (xlbd --status-page, node.status_page)"},
		{page, "/", "page /"},
		{page, "/status.json", "page /status.json"},
		{page, "/healthz", "ok"},
		{page, "/metrics", "xlb_selfcheck_ok"},
	} {
		m := New(apitest.New(), Options{Log: quiet, Page: tc.page})
		srv := httptest.NewServer(m.Handler())
		resp, err := http.Get(srv.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		if !strings.Contains(string(b), tc.want) {
			t.Errorf("page %v, GET %s: %q, want %q", tc.page != nil, tc.path, b, tc.want)
		}
	}
}
