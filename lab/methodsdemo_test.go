package lab

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/testenv"
)

// TestMethodsDemo runs `xlb-lab demo --methods` small: every method's
// line is there, and the demo's own checks (every backend served, NAT's
// replies through the node, the others' direct) pass.
func TestMethodsDemo(t *testing.T) {
	testenv.RequireNetns(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := RunMethodsDemo(ctx, &out, MethodsDemoOptions{Requests: 200}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log(out.String())
	for _, m := range methodPorts {
		if !strings.Contains(out.String(), "\n"+m.method+" ") {
			t.Errorf("no line for method %s", m.method)
		}
	}
	if !strings.Contains(out.String(), "through the node") || !strings.Contains(out.String(), "demo OK") {
		t.Errorf("demo output:\n%s", out.String())
	}
}
