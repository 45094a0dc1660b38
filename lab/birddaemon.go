package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// BIRD is a bird daemon running in the foreground in a lab namespace, with
// its config file and control socket in the lab directory.
type BIRD struct {
	*Proc
	Host   *Host
	Config string // config file
	Socket string // control socket, for birdc -s

	lab    *Lab
	mode   SessionMode
	router bool // the router's BIRD, not a node's stand-in speaker
}

// SessionName returns the name of a BGP protocol of b. For the router's
// BIRD: its session with node i for the family of like ("n1_v4", "n1_v6";
// "n1" in SessionDualStack). For a node's stand-in speaker (i is ignored):
// its session with the router ("uplink_v4", "uplink_v6"; "uplink").
func (b *BIRD) SessionName(i int, like netip.Addr) string {
	if b.router {
		return sessionName(b.lab.Nodes[i].Short, b.mode, like)
	}
	return sessionName("uplink", b.mode, like)
}

// maxSocketPath is the longest path of a unix socket (sun_path less NUL).
const maxSocketPath = 107

// StartBIRD writes the router's BIRD config (RouterBIRDConfig) to
// <Dir>/<router ns>-bird.conf and starts `bird -f -c CONF -s SOCK` in the
// router's namespace, logging to <Dir>/<router ns>-bird.log. It returns
// once BIRD answers on its control socket. Destroy stops it (SIGTERM:
// BIRD ends every session with a NOTIFICATION and removes its kernel
// routes). Build the lab with Routing: RouteNone, so that the only VIP
// routes are BIRD's.
func (l *Lab) StartBIRD(ctx context.Context, opts BIRDOptions) (*BIRD, error) {
	log := l.birdLogPath(l.Router)
	cfg, err := l.RouterBIRDConfig(opts, log)
	if err != nil {
		return nil, err
	}
	b, err := l.startBIRD(ctx, l.Router, cfg, nil)
	if err != nil {
		return nil, err
	}
	b.mode, b.router = opts.Sessions, true
	l.mu.Lock()
	l.routerBIRD = b
	l.mu.Unlock()
	return b, nil
}

// StartNodeBIRD starts node i's stand-in BGP speaker: a BIRD with
// NodeBIRDConfig in the node's namespace (files <Dir>/<node ns>-bird.*,
// as StartBIRD). Stop, Kill and start again to exercise the router.
func (l *Lab) StartNodeBIRD(ctx context.Context, i int, opts NodeBIRDOptions) (*BIRD, error) {
	if i < 0 || i >= len(l.Nodes) {
		return nil, fmt.Errorf("bird: node index %d out of range", i)
	}
	n := l.Nodes[i]
	cfg, err := l.NodeBIRDConfig(i, opts, l.birdLogPath(n))
	if err != nil {
		return nil, err
	}
	var extra []string
	if opts.Recover {
		extra = append(extra, "-R")
	}
	b, err := l.startBIRD(ctx, n, cfg, extra)
	if err != nil {
		return nil, err
	}
	b.mode = opts.Sessions
	return b, nil
}

// birdLogPath is where BIRD in h logs: the file Lab.Start sends its output
// to, absolute (BIRD would resolve it against its working directory).
func (l *Lab) birdLogPath(h *Host) string {
	p := filepath.Join(l.Dir, h.Name+"-bird.log")
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

func (l *Lab) startBIRD(ctx context.Context, h *Host, cfg []byte, extra []string) (*BIRD, error) {
	l.mu.Lock()
	prev := l.birds[h]
	l.mu.Unlock()
	if prev != nil && !prev.Exited() {
		// It would take over the control socket (and fail on port 179).
		return nil, fmt.Errorf("bird: a BIRD already runs in %s (pid %d): stop it first", h.Name, prev.PID())
	}
	bin, err := exec.LookPath(BIRDBinary)
	if err != nil {
		return nil, fmt.Errorf("bird: %w (install BIRD 2: apt-get install bird2)", err)
	}
	if _, err := exec.LookPath(BIRDCBinary); err != nil {
		return nil, fmt.Errorf("bird: %w (install BIRD 2: apt-get install bird2)", err)
	}
	dir, err := filepath.Abs(l.Dir)
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, h.Name+"-bird.conf")
	sock := filepath.Join(dir, h.Name+"-bird.ctl")
	if len(sock) > maxSocketPath {
		return nil, fmt.Errorf("bird: control socket path %s is longer than %d bytes: use a shorter lab Dir", sock, maxSocketPath)
	}
	if err := os.WriteFile(conf, cfg, 0o600); err != nil { // may hold passwords
		return nil, fmt.Errorf("write bird config: %w", err)
	}
	// BIRD logs to the same file as Lab.Start's capture of its stderr
	// (both append): startup errors come before its log is open. Its
	// stdout and stderr stay quiet afterwards, so it survives the exit of
	// a process that started it and did not destroy the lab (xlb-lab up).
	args := append([]string{bin, "-f", "-c", conf, "-s", sock}, extra...)
	p, err := l.Start(context.WithoutCancel(ctx), h.NS, args...)
	if err != nil {
		return nil, err
	}
	b := &BIRD{Proc: p, Host: h, Config: conf, Socket: sock, lab: l}
	l.mu.Lock()
	if l.birds == nil {
		l.birds = map[*Host]*BIRD{}
	}
	l.birds[h] = b
	l.mu.Unlock()
	if err := b.waitUp(ctx, 10*time.Second); err != nil {
		p.Stop(5 * time.Second)
		return nil, err
	}
	return b, nil
}

// waitUp waits until BIRD answers `show status`.
func (b *BIRD) waitUp(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if b.Exited() {
			return fmt.Errorf("bird in %s exited (%v) at start; output:\n%s", b.Host.Name, b.Wait(), lastLines(b.Output(), 20))
		}
		out, err := b.Birdc(ctx, "show", "status")
		if err == nil && strings.Contains(out, "Daemon is up and running") {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("bird in %s not up within %v (%v); output:\n%s", b.Host.Name, timeout, last, lastLines(b.Output(), 20))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Stop sends SIGTERM and waits up to 5 s. BIRD ends its sessions with a
// NOTIFICATION (Cease), so its peers drop its routes at once, even with
// graceful restart.
func (b *BIRD) Stop() error {
	if err := b.Proc.Stop(5 * time.Second); err != nil {
		return fmt.Errorf("bird in %s: %w; output:\n%s", b.Host.Name, err, lastLines(b.Output(), 20))
	}
	return nil
}

// Kill sends SIGKILL and waits for the exit: the kernel closes BIRD's TCP
// sessions without any NOTIFICATION, as when a speaker crashes or is
// restarted. A graceful restart helper keeps its routes as stale.
func (b *BIRD) Kill() error {
	if b.Exited() {
		return nil
	}
	if err := b.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-b.Done()
	return nil
}

// Birdc runs `birdc -s SOCK args...` and returns its output. A failure's
// error includes the output.
func (b *BIRD) Birdc(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, BIRDCBinary, append([]string{"-s", b.Socket}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("birdc %s (%s): %w: %s", strings.Join(args, " "), b.Host.Name, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
