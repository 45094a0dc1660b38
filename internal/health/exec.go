package health

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xlbproject/xlb/internal/config"
)

// maxOutput is how much of a command's output (stdout and stderr together)
// is kept for the error message; the rest is read and dropped.
const maxOutput = 1024

// waitDelay bounds how long a probe waits for a killed command's output
// pipes to close (a child that left the process group may hold them).
const waitDelay = 2 * time.Second

// execChecker runs a command and succeeds when it exits with status 0. The
// command runs without a shell, in a process group of its own that is
// killed (SIGKILL) when the probe times out, children included. It gets the
// daemon's environment plus XLB_BACKEND (the address), XLB_CHECK (the check's
// name) and, when the check has a port, XLB_PORT; "{{address}}" and
// "{{port}}" in its arguments are replaced by the same values.
type execChecker struct {
	name string
	argv []string
	port uint16
}

func newExec(hc config.HealthCheck) (*execChecker, error) {
	if len(hc.Command) == 0 || hc.Command[0] == "" {
		return nil, fmt.Errorf("health check %q: exec needs a command", hc.Name)
	}
	return &execChecker{name: hc.Name, argv: hc.Command, port: hc.Port}, nil
}

func (c *execChecker) Check(ctx context.Context, target netip.Addr) error {
	port := ""
	if c.port != 0 {
		port = strconv.Itoa(int(c.port))
	}
	r := strings.NewReplacer("{{address}}", target.String(), "{{port}}", port)
	args := make([]string, len(c.argv))
	for i, a := range c.argv {
		args[i] = r.Replace(a)
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "XLB_BACKEND="+target.String(), "XLB_CHECK="+c.name)
	if port != "" {
		cmd.Env = append(cmd.Env, "XLB_PORT="+port)
	}
	out := &capped{max: maxOutput}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = waitDelay
	err := cmd.Run()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s killed: %w", args[0], ctx.Err())
	}
	if msg := out.String(); msg != "" {
		return fmt.Errorf("%s: %w: %s", args[0], err, msg)
	}
	return fmt.Errorf("%s: %w", args[0], err)
}

// capped keeps the first max bytes written to it and counts the rest. exec
// calls Write from one goroutine at a time when Stdout and Stderr are the
// same writer.
type capped struct {
	max     int
	buf     []byte
	dropped int
}

func (w *capped) Write(p []byte) (int, error) {
	keep := min(len(p), w.max-len(w.buf))
	w.buf = append(w.buf, p[:keep]...)
	w.dropped += len(p) - keep
	return len(p), nil
}

// String returns the kept output, trimmed, with a note of what was dropped.
func (w *capped) String() string {
	s := strings.TrimSpace(strings.ToValidUTF8(string(w.buf), "?"))
	if w.dropped > 0 {
		s += fmt.Sprintf(" ... (%d more bytes)", w.dropped)
	}
	return s
}
