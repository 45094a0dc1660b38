package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is a process started in a namespace. Its stdout and stderr go to a
// bounded in-memory tail (Output) and, when started by a Lab, to a log file.
type Proc struct {
	// Args are the command and its arguments, without the nsenter prefix.
	Args []string
	// LogPath is the file receiving its output, or "".
	LogPath string

	cmd  *startedCmd
	tail *tailBuffer
	done chan struct{}
	err  error // valid after done
}

type startedCmd struct {
	pid    int
	signal func(os.Signal) error
}

// maxTail is how much of a process's latest output Proc keeps in memory.
const maxTail = 256 << 10

// Start starts args inside the namespace (nsenter --net, which execs the
// command: the process's PID is the command's). Output goes to Proc.Output
// and, if log is not nil, to log. Cancelling ctx sends SIGTERM, then SIGKILL
// after 5 s.
func (n *NS) Start(ctx context.Context, log io.Writer, args ...string) (*Proc, error) {
	cmd := n.Command(ctx, args...)
	p := &Proc{Args: args, tail: &tailBuffer{}, done: make(chan struct{})}
	var w io.Writer = p.tail
	if log != nil {
		w = io.MultiWriter(p.tail, log)
	}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s in %s: %w", strings.Join(args, " "), n.Name, err)
	}
	p.cmd = &startedCmd{pid: cmd.Process.Pid, signal: cmd.Process.Signal}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// PID returns the process ID.
func (p *Proc) PID() int { return p.cmd.pid }

// Signal sends sig to the process.
func (p *Proc) Signal(sig os.Signal) error {
	if p.Exited() {
		return fmt.Errorf("signal %s: %s has exited", sig, p.Args[0])
	}
	return p.cmd.signal(sig)
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait waits for the process to exit and returns its exit error.
func (p *Proc) Wait() error {
	<-p.done
	return p.err
}

// Stop sends SIGTERM and waits up to grace for the exit, then kills the
// process. It returns nil for an exit by SIGTERM or with status 0.
func (p *Proc) Stop(grace time.Duration) error {
	if !p.Exited() {
		p.cmd.signal(syscall.SIGTERM)
	}
	select {
	case <-p.done:
	case <-time.After(grace):
		p.cmd.signal(syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("%s did not exit within %v of SIGTERM; killed", p.Args[0], grace)
	}
	return exitedCleanly(p.err)
}

func exitedCleanly(err error) error {
	var ee interface{ Sys() any }
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM {
			return nil
		}
	}
	return err
}

// Output returns the latest output of the process (up to 256 KiB).
func (p *Proc) Output() string { return p.tail.String() }

// WaitOutput waits until the output holds n occurrences of substr (polling
// every 20 ms) and fails when ctx is done, timeout passes or the process
// exits first; the error carries the output's last lines. Count first and
// wait for count+1 to catch the next occurrence (e.g. of a log line that a
// reload prints).
func (p *Proc) WaitOutput(ctx context.Context, substr string, n int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if strings.Count(p.Output(), substr) >= n {
			return nil
		}
		select {
		case <-p.done:
			if strings.Count(p.Output(), substr) >= n {
				return nil
			}
			return fmt.Errorf("%s exited (%v) before printing %q; last lines:\n%s", p.Args[0], p.err, substr, lastLines(p.Output(), 20))
		case <-ctx.Done():
			return fmt.Errorf("%s did not print %q (%d times) within %v: %w; last lines:\n%s", p.Args[0], substr, n, timeout, ctx.Err(), lastLines(p.Output(), 20))
		case <-t.C:
		}
	}
}

// Start starts args in ns like NS.Start, logging to <Dir>/<ns>-<command>.log,
// and stops the process (SIGTERM, 5 s grace) when the lab is destroyed.
func (l *Lab) Start(ctx context.Context, ns *NS, args ...string) (*Proc, error) {
	logPath := filepath.Join(l.Dir, ns.Name+"-"+filepath.Base(args[0])+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("log file: %w", err)
	}
	p, err := ns.Start(ctx, f, args...)
	if err != nil {
		f.Close()
		return nil, err
	}
	p.LogPath = logPath
	go func() { <-p.done; f.Close() }()
	stop := func() error {
		if p.Exited() {
			return nil // stopped (and reported) by its owner
		}
		return p.Stop(5 * time.Second)
	}
	if !l.onDestroy(stop) {
		p.Stop(5 * time.Second)
		return nil, errors.New("lab destroyed")
	}
	return p, nil
}

// tailBuffer keeps the last maxTail bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > 2*maxTail {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-maxTail:]...)
	}
	return len(b), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.buf) > maxTail {
		return string(t.buf[len(t.buf)-maxTail:])
	}
	return string(t.buf)
}
