package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/xlbproject/xlb/internal/testenv"
	"github.com/xlbproject/xlb/lab"
)

// artifactsDir is where tests leave files for people to look at
// ($XLB_ARTIFACTS_DIR, else e2e/out), created when missing.
func artifactsDir(t *testing.T) string {
	t.Helper()
	d := os.Getenv("XLB_ARTIFACTS_DIR")
	if d == "" {
		d = "out"
	}
	d, err := filepath.Abs(d)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// withStatusPage turns the status page on in a generated config.
func withStatusPage(cfg string) string {
	return strings.Replace(cfg, "node:\n", "node:\n  status_page: true\n", 1)
}

// pageSnapshot is the part of /status.json the test reads.
type pageSnapshot struct {
	Status struct {
		Node string `json:"node"`
	} `json:"status"`
	Services struct {
		Services []struct {
			Name     string `json:"name"`
			Backends []struct {
				Address string `json:"address"`
			} `json:"backends"`
		} `json:"services"`
	} `json:"services"`
	Error string `json:"error"`
}

func (s pageSnapshot) names() []string {
	var out []string
	for _, sv := range s.Services.Services {
		for _, b := range sv.Backends {
			out = append(out, sv.Name+" "+b.Address)
		}
	}
	slices.Sort(out)
	return out
}

// TestStatusPage opens the node's status page in headless Chromium: it
// loads without console errors, shows every service of the lab with its
// backends (the same ones `xlbctl -o json services` lists), shows a
// backend failing its health check as down within 3 s of the failure,
// counts the connections of running sessions, and leaves a screenshot.
func TestStatusPage(t *testing.T) {
	testenv.RequireCommands(t, "chromium")
	e := setupWith(t, []int{1, 1, 1}, "native", func(c string) string { return withHTTPCheck(withStatusPage(c)) })
	addr, err := e.lab.ForwardTCP(e.lab.Nodes[0], lab.StatusPageAddr)
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + addr + "/"
	snap := waitPageSample(t, url)
	out, err := e.ctl(t, "-o", "json", "services")
	if err != nil {
		t.Fatalf("xlbctl services: %v\n%s", err, out)
	}
	var ctl pageSnapshot
	if err := json.Unmarshal([]byte(`{"services":`+out+`}`), &ctl); err != nil {
		t.Fatalf("xlbctl -o json services: %v\n%s", err, out)
	}
	if got, want := snap.names(), ctl.names(); !slices.Equal(got, want) || len(got) == 0 {
		t.Fatalf("status.json services %v, xlbctl's %v", got, want)
	}
	// Traffic, so the rates and the charts have something to show.
	sess, err := lab.StartTCPSessions(context.Background(), e.lab.Client.NS, e.echo4(), 30, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Stop()

	ctx, problems := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.CSS(`.service[data-service="web4"] tr[data-backend]`))); err != nil {
		t.Fatalf("page: %v", err)
	}
	for _, sv := range snap.Services.Services {
		for _, b := range sv.Backends {
			if h := cellText(t, ctx, sv.Name, b.Address, "health"); h != "up" {
				t.Errorf("%s %s health %q on the page, want up", sv.Name, b.Address, h)
			}
		}
	}
	b2 := e.lab.Backends[1].Addr4.String()
	e.lab.Servers()[1].SetHTTPStatus(503)
	failed := time.Now()
	for cellText(t, ctx, "web4", b2, "health") != "down" {
		if time.Since(failed) > 3*time.Second {
			t.Fatalf("b2 not shown down 3 s after its check started failing")
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the page showed b2 down %v after its check started failing", time.Since(failed).Round(time.Millisecond))
	// The echo sessions are counted in the connection table (counted
	// every 10 s) on the backends that serve them.
	b1 := e.lab.Backends[0].Addr4.String()
	for deadline := time.Now().Add(15 * time.Second); slices.Contains([]string{"0", "–", ""}, cellText(t, ctx, "echo4", b1, "conns")); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("echo4's b1 shows no connection with %d sessions running", 30)
		}
	}
	t.Logf("echo4 b1: %s connections on the page", cellText(t, ctx, "echo4", b1, "conns"))
	time.Sleep(2 * time.Second) // a few more points on the charts
	screenshot(t, ctx, "statuspage.png")
	if p := problems(); len(p) > 0 {
		t.Fatalf("console errors:\n%s", strings.Join(p, "\n"))
	}
}

// waitPageSample waits for /status.json to carry a sample.
func waitPageSample(t *testing.T, url string) pageSnapshot {
	t.Helper()
	var last string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		resp, err := http.Get(url + "status.json")
		if err != nil {
			last = err.Error()
			continue
		}
		var s pageSnapshot
		err = json.NewDecoder(resp.Body).Decode(&s)
		resp.Body.Close()
		if err == nil && s.Error == "" && s.Status.Node != "" {
			return s
		}
		last = fmt.Sprint(err, s.Error)
	}
	t.Fatalf("status.json has no sample: %s", last)
	return pageSnapshot{}
}

// browser starts headless Chromium for t and returns its context and a
// function listing the console errors, exceptions and failed loads so far.
func browser(t *testing.T) (context.Context, func() []string) {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path),
		chromedp.NoSandbox, chromedp.WindowSize(1400, 1100), chromedp.Flag("disable-gpu", true))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelA() })
	var mu sync.Mutex
	var problems []string
	err = chromedp.Listen(ctx, func(ev any) {
		var p string
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeWarning {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				p = fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " "))
			}
		case *runtime.EventExceptionThrown:
			p = fmt.Sprintf("exception: %s line %d: %s", ev.ExceptionDetails.URL, ev.ExceptionDetails.LineNumber, ev.ExceptionDetails.Text)
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.EntryLevelError || ev.Entry.Level == log.EntryLevelWarning {
				p = fmt.Sprintf("log %s: %s %s", ev.Entry.Level, ev.Entry.Text, ev.Entry.URL)
			}
		}
		if p != "" {
			mu.Lock()
			problems = append(problems, p)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(problems)
	}
}

// cellText reads a backend row's cell (by class) on the page; "" when the
// row is not there.
func cellText(t *testing.T, ctx context.Context, svc, backend, class string) string {
	t.Helper()
	js := fmt.Sprintf(`(() => { const c = document.querySelector('.service[data-service=%q] tr[data-backend=%q] td.%s'); return c ? c.textContent : ""; })()`, svc, backend, class)
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
	if err != nil {
		t.Fatalf("read the page: %v", err)
	}
	return s
}

// screenshot writes the whole page as PNG into the artifacts directory and
// names it in the log.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	p := filepath.Join(artifactsDir(t), name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (artifacts directory %s)", p, filepath.Dir(p))
}
