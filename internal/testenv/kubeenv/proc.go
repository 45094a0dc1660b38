package kubeenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is one child process (etcd or the API server) whose output goes to
// a log file.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done is closed
}

// startProc starts bin with args, its stdout and stderr appended to
// logPath. The child gets SIGKILL when the test process dies, so that no
// API server outlives a killed test.
func startProc(name, bin string, args []string, logPath string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig follows the thread that started the child, not the
		// process: this goroutine keeps that thread until the child exits,
		// so the runtime never ends it under the child (a test's network
		// namespace work ends the threads it locked, and etcd died with
		// one of them).
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	if err := <-started; err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return p, nil
}

// exited returns a non-nil error when the process has exited.
func (p *proc) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited (%v); its log ends:\n%s", p.name, p.err, p.tail(40))
	default:
		return nil
	}
}

// stop sends SIGTERM, and SIGKILL after grace; it returns once the process
// has exited.
func (p *proc) stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// tail returns the last n lines of the process's log.
func (p *proc) tail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// waitFor calls ready every 50 ms until it returns nil, p exits, or ctx
// ends; the error names what was last wrong.
func (p *proc) waitFor(ctx context.Context, ready func(context.Context) error) error {
	for {
		err := ready(ctx)
		if err == nil {
			return nil
		}
		if e := p.exited(); e != nil {
			return e
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w; its log ends:\n%s", p.name, err, p.tail(40))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// freePorts returns n distinct TCP ports free on 127.0.0.1 now, below
// the kernel's ephemeral range (ip_local_port_range) when it leaves room:
// there no outgoing connection can take one while a server is down
// between StopAPIServer and StartAPIServer. Another test may still bind
// one before it is used; startup then reports the bind error.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	lo := ephemeralLow()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		addr := "127.0.0.1:0"
		if lo > minPort+1000 && tries < 1000 {
			addr = "127.0.0.1:" + strconv.Itoa(minPort+rand.IntN(lo-minPort))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if addr == "127.0.0.1:0" {
				return nil, err
			}
			continue
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// minPort is the lowest port freePorts picks.
const minPort = 10000

// ephemeralLow is the first port of the kernel's ephemeral range, 0 when
// it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	lo, _ := strconv.Atoi(f[0])
	return lo
}

// errNotOK is a readiness probe's answer other than "ok".
var errNotOK = errors.New("not ok")

func notOK(body []byte) error {
	return fmt.Errorf("%w: %s", errNotOK, strings.TrimSpace(string(body)))
}
