package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Binaries the lab runs, looked up in the bin directory.
const (
	XLBDBinary  = "xlbd"
	DecapBinary = "xlb-decap"
	modulePath  = "github.com/xlbproject/xlb"
)

// ErrNoBinary means an xlb binary is not where the lab looks for it.
var ErrNoBinary = errors.New("xlb binary not found")

// FindBinDir returns the directory holding the xlb binaries: $XLB_BIN_DIR if
// set; else the directory of the running executable if xlbd is next to it
// (bin/xlb-lab); else <repository root>/bin, the root found by walking up
// from the working directory to the go.mod of this module (tests).
func FindBinDir() (string, error) {
	if d := os.Getenv("XLB_BIN_DIR"); d != "" {
		return d, nil
	}
	if exe, err := os.Executable(); err == nil {
		d := filepath.Dir(exe)
		if _, err := os.Stat(filepath.Join(d, XLBDBinary)); err == nil {
			return d, nil
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && isModule(b) {
			return filepath.Join(d, "bin"), nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("%w: no bin directory (set XLB_BIN_DIR or run from the repository)", ErrNoBinary)
		}
	}
}

func isModule(gomod []byte) bool {
	sc := bufio.NewScanner(strings.NewReader(string(gomod)))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "module" && f[1] == modulePath {
			return true
		}
	}
	return false
}

// Binary returns the path of the named xlb binary (XLBDBinary,
// DecapBinary), wrapping ErrNoBinary with a hint if it is missing.
func (l *Lab) Binary(name string) (string, error) {
	dir := l.cfg.BinDir
	if dir == "" {
		d, err := FindBinDir()
		if err != nil {
			return "", err
		}
		dir = d
	}
	p := filepath.Join(dir, name)
	st, err := os.Stat(p)
	if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%w: %s (run 'make build', or point --bin / XLB_BIN_DIR at the binaries)", ErrNoBinary, p)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	return abs, nil
}

// Service is one service of an xlbd config.
type Service struct {
	Name     string
	VIP      netip.Addr
	Port     uint16
	Protocol string   // "tcp" or "udp"
	Pools    []string // ordered
	Encap    string   // "gre", "ipip", "gue", ...
}

// XLBDOptions shape the xlbd config that XLBDConfig writes.
type XLBDOptions struct {
	// Weights are the backends' weights in order; missing ones are 1.
	Weights []int
	// Exclude lists backends (indexes into Lab.Backends) left out of both
	// pools, e.g. to remove one by a reload.
	Exclude []int
	// Encap4 and Encap6 are the encapsulations of the default services of
	// IPv4 and IPv6 VIPs (default "gre" and "ipip").
	Encap4, Encap6 string
	// Services replaces the default services (see DefaultServices).
	Services []Service
	// Ports are the ports of the default services (DefaultPorts).
	Ports            Ports
	ConntrackEntries int    // default 65536
	XDPMode          string // default "native"
	// FloodSynRate is node.flood_syn_rate, the new SYN flows per second
	// each CPU tracks (0: not written, no limit).
	FloodSynRate int
	// BGP adds a bgp section peering with the router's BIRD (StartBIRD
	// defaults: router AS RouterASN, node AS NodeASN, one session per
	// family, 3 s hold time, graceful restart), draining in ShutdownWait
	// (default 1 s).
	BGP          bool
	ShutdownWait time.Duration
	// RouteTable or DummyInterface: bgp.mode external instead, the VIP
	// routes kept in that kernel table or on that dummy interface for the
	// node's own BIRD (StartNodeBIRD with the same KernelTable or Dummy).
	RouteTable     uint32
	DummyInterface string
	// StatusPage writes node.status_page: true (the page at StatusPageAddr
	// in the node's namespace; ForwardTCP brings it out).
	StatusPage bool
	// Instance, when set, names a further xlb instance of the node:
	// node.name is <NodeName>-<Instance>, on the node's second interface
	// (Config.SecondIface) with its addresses.
	Instance string
	// Sync adds node.sync: connection sync with every other node of the
	// lab (sync.go).
	Sync bool
}

// Pools of the generated config: the backends' IPv4 and IPv6 addresses.
const (
	Pool4 = "web"
	Pool6 = "web6"
)

// NodeName returns the xlbd node name of node i (from 0): <prefix>n<i+1>,
// unique per lab; xlbd pins under PinDir/<name>.
func (l *Lab) NodeName(i int) string { return l.Prefix + l.Nodes[i].Short }

// DefaultServices returns, for each VIP, three services matching the
// backend Servers: HTTP (tcp ports.HTTP), UDP echo (udp ports.UDP) and TCP
// line echo (tcp ports.TCP), named web4/udp4/echo4 for the first IPv4 VIP,
// web6/udp6/echo6 for the first IPv6 VIP, with "-2", "-3"... for further
// VIPs of a family. IPv4 VIPs use pool Pool4, IPv6 VIPs Pool6.
func (l *Lab) DefaultServices(ports Ports, encap4, encap6 string) []Service {
	ports = ports.withDefaults()
	if encap4 == "" {
		encap4 = "gre"
	}
	if encap6 == "" {
		encap6 = "ipip"
	}
	var out []Service
	seen := map[bool]int{}
	for _, v := range l.VIPs {
		fam, pool, encap := "4", Pool4, encap4
		if v.Is6() {
			fam, pool, encap = "6", Pool6, encap6
		}
		seen[v.Is4()]++
		suffix := ""
		if k := seen[v.Is4()]; k > 1 {
			suffix = "-" + strconv.Itoa(k)
		}
		for _, s := range []struct {
			kind, proto string
			port        uint16
		}{{"web", "tcp", ports.HTTP}, {"udp", "udp", ports.UDP}, {"echo", "tcp", ports.TCP}} {
			out = append(out, Service{Name: s.kind + fam + suffix, VIP: v, Port: s.port, Protocol: s.proto, Pools: []string{pool}, Encap: encap})
		}
	}
	return out
}

// XLBDConfig returns the xlbd YAML config for node i (from 0): the node on
// its eth0 with its LAN addresses, pools Pool4 and Pool6 of every backend
// with opts.Weights, and opts.Services (default DefaultServices).
func (l *Lab) XLBDConfig(i int, opts XLBDOptions) []byte {
	if opts.ConntrackEntries == 0 {
		opts.ConntrackEntries = 65536
	}
	if opts.XDPMode == "" {
		opts.XDPMode = "native"
	}
	svcs := opts.Services
	if svcs == nil {
		svcs = l.DefaultServices(opts.Ports, opts.Encap4, opts.Encap6)
	}
	n := l.Nodes[i]
	name, port := l.NodeName(i), Port{Iface: n.Iface, Addr4: n.Addr4, Addr6: n.Addr6}
	if opts.Instance != "" && n.Second != nil {
		name, port = name+"-"+opts.Instance, *n.Second
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# xlbd config for lab %s node %s (generated by lab)\n", l.Prefix, n.Short)
	fmt.Fprintf(&b, "node:\n")
	fmt.Fprintf(&b, "  name: %s\n", name)
	fmt.Fprintf(&b, "  interface: %s\n", port.Iface)
	fmt.Fprintf(&b, "  address: %q\n", port.Addr4)
	fmt.Fprintf(&b, "  address6: %q\n", port.Addr6)
	fmt.Fprintf(&b, "  xdp_mode: %s\n", opts.XDPMode)
	fmt.Fprintf(&b, "  conntrack_entries: %d\n", opts.ConntrackEntries)
	if opts.FloodSynRate > 0 {
		fmt.Fprintf(&b, "  flood_syn_rate: %d\n", opts.FloodSynRate)
	}
	if opts.StatusPage {
		fmt.Fprintf(&b, "  status_page: true\n")
	}
	if opts.Sync {
		b.WriteString(l.syncSection(i))
	}
	fmt.Fprintf(&b, "pools:\n")
	for _, p := range []struct {
		name string
		v4   bool
	}{{Pool4, true}, {Pool6, false}} {
		fmt.Fprintf(&b, "  %s:\n    backends:\n", p.name)
		for j, h := range l.Backends {
			if slices.Contains(opts.Exclude, j) {
				continue
			}
			w := 1
			if j < len(opts.Weights) {
				w = opts.Weights[j]
			}
			a := h.Addr6
			if p.v4 {
				a = h.Addr4
			}
			fmt.Fprintf(&b, "      - {address: %q, weight: %d}\n", a, w)
		}
	}
	if opts.BGP {
		wait := opts.ShutdownWait
		if wait == 0 {
			wait = time.Second
		}
		fmt.Fprintf(&b, "bgp:\n  asn: %d\n  router_id: %q\n  graceful_restart_time: 120s\n  shutdown_wait: %s\n  peers:\n", NodeASN, n.Addr4, wait)
		for _, a := range []netip.Addr{l.Router.Addr4, l.Router.Addr6} {
			fmt.Fprintf(&b, "    - {address: %q, asn: %d, hold_time: 3s, keepalive: 1s}\n", a, RouterASN)
		}
	}
	if opts.RouteTable != 0 {
		fmt.Fprintf(&b, "bgp: {mode: external, route_table: %d}\n", opts.RouteTable)
	} else if opts.DummyInterface != "" {
		fmt.Fprintf(&b, "bgp: {mode: external, dummy_interface: %s}\n", opts.DummyInterface)
	}
	fmt.Fprintf(&b, "services:\n")
	for _, s := range svcs {
		fmt.Fprintf(&b, "  - {name: %s, vip: %q, port: %d, protocol: %s, pools: [%s], encap: %s}\n",
			s.Name, s.VIP, s.Port, s.Protocol, strings.Join(s.Pools, ", "), s.Encap)
	}
	return []byte(b.String())
}

// WriteXLBDConfig writes XLBDConfig(i, opts) to <Dir>/xlbd-<node>.yaml and
// returns the path (rewrite it and Reload the daemon to change the config).
func (l *Lab) WriteXLBDConfig(i int, opts XLBDOptions) (string, error) {
	p := filepath.Join(l.Dir, "xlbd-"+l.Nodes[i].Short+".yaml")
	if err := os.WriteFile(p, l.XLBDConfig(i, opts), 0o644); err != nil {
		return "", fmt.Errorf("write xlbd config: %w", err)
	}
	return p, nil
}

// Daemon is an xlbd started by StartXLBD.
type Daemon struct {
	*Proc
	Node   *Host
	Config string
	bin    string
	killed bool
}

// StartXLBD starts `xlbd --config config` in node i's namespace (network
// namespace only, so it sees /sys/fs/bpf). It does not wait for readiness:
// see WaitForwarding. When the lab is destroyed every daemon is stopped,
// then `xlbd --cleanup` runs once per node, with a copy of the config the
// node's last daemon started with, to detach and unpin its data plane
// (whatever is left is removed with the namespaces: see Cleanup).
func (l *Lab) StartXLBD(ctx context.Context, i int, config string) (*Daemon, error) {
	bin, err := l.Binary(XLBDBinary)
	if err != nil {
		return nil, err
	}
	var flags []string
	if ProbeInterval > 0 {
		flags = []string{"--probe-interval", ProbeInterval.String()}
	}
	return l.StartXLBDBinary(ctx, i, config, bin, flags...)
}

// ProbeInterval is the interval of the blackbox prober of the daemons
// StartXLBD starts (xlbd --probe-interval); 0, the default for tests, runs
// none: its probes are real datagrams and connections to the backends'
// servers, which tests that count what those servers receive would see.
// xlb-lab sets it (the prober is on in the lab it builds), and so do the
// tests of the prober.
var ProbeInterval time.Duration

// StartXLBDBinary is StartXLBD with another xlbd binary (an upgrade test's
// other build) and its own extra flags (StartXLBD's prober flag is not
// passed). The node's cleanup uses the binary its first daemon ran.
func (l *Lab) StartXLBDBinary(ctx context.Context, i int, config, bin string, flags ...string) (*Daemon, error) {
	abs, err := filepath.Abs(config)
	if err != nil {
		return nil, err
	}
	// Every node has its own API socket: the file system is shared.
	return l.startXLBD(ctx, i, l.NodeName(i), abs, bin, append([]string{"--api-socket", l.APISocket(i)}, flags...)...)
}

// StartXLBDInstance starts `xlbd --config config`, nothing more, in node
// i's namespace: an instance named name (its node.name) among several of
// the node, with the per-instance defaults (pin directory, API socket
// /run/xlb/<name>.sock) or what its config sets. Cleaned up as StartXLBD.
func (l *Lab) StartXLBDInstance(ctx context.Context, i int, name, config string) (*Daemon, error) {
	bin, err := l.Binary(XLBDBinary)
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(config)
	if err != nil {
		return nil, err
	}
	return l.startXLBD(ctx, i, name, abs, bin)
}

func (l *Lab) startXLBD(ctx context.Context, i int, name, abs, bin string, flags ...string) (*Daemon, error) {
	n := l.Nodes[i]
	// The daemon outlives ctx only until the lab is destroyed.
	p, err := l.Start(context.WithoutCancel(ctx), n.NS, append([]string{bin, "--config", abs}, flags...)...)
	if err != nil {
		return nil, err
	}
	d := &Daemon{Proc: p, Node: n, Config: abs, bin: bin}
	// The cleanup runs with a copy of the config as it was at start: tests
	// overwrite the file with broken configs to check that reloads reject
	// them.
	snapshot := filepath.Join(l.Dir, "xlbd-"+strings.TrimPrefix(name, l.Prefix)+"-started.yaml")
	if b, err := os.ReadFile(abs); err == nil {
		if err := os.WriteFile(snapshot, b, 0o644); err != nil {
			return nil, fmt.Errorf("keep a copy of the xlbd config: %w", err)
		}
	} else {
		snapshot = abs
	}
	l.mu.Lock()
	if l.xlbdConfig == nil {
		l.xlbdConfig = map[string]string{}
	}
	first := l.xlbdConfig[name] == ""
	l.xlbdConfig[name] = snapshot
	l.mu.Unlock()
	if first {
		// Registered once per instance, before any daemon's stop, so that
		// it runs after all of them (undo runs last-in first-out).
		l.onDestroy(func() error { return l.cleanupXLBD(n, name, bin) })
	}
	l.onDestroy(d.Stop)
	return d, nil
}

// cleanupXLBD runs `xlbd --cleanup` in node n for the instance name with
// the config its last daemon started with. A failure is reported only if
// the instance has pins (a daemon that never got going leaves nothing to
// clean up).
func (l *Lab) cleanupXLBD(n *Host, name, bin string) error {
	l.mu.Lock()
	cfg := l.xlbdConfig[name]
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := n.Run(ctx, bin, "--cleanup", "--config", cfg); err != nil {
		if _, serr := os.Stat(filepath.Join(PinDir, name)); errors.Is(serr, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("xlbd cleanup on %s: %w", n.Short, err)
	}
	return nil
}

// APISocket is node i's xlbd API socket (in the lab directory).
func (l *Lab) APISocket(i int) string {
	return filepath.Join(l.Dir, "xlbd-"+l.Nodes[i].Short+".sock")
}

// Reload sends SIGHUP: xlbd rereads its config file.
func (d *Daemon) Reload() error { return d.Signal(syscall.SIGHUP) }

// Kill sends SIGKILL (a crash: no BGP notification, nothing cleaned up) and
// waits for the process; a later Stop then reports nothing.
func (d *Daemon) Kill() {
	d.killed = true
	d.Signal(syscall.SIGKILL)
	d.Wait()
}

// Stop sends SIGTERM and waits up to 10 s; xlbd exits leaving its data plane
// pinned and forwarding. Stopping a daemon that has exited returns its exit
// error, if any (none after Kill).
func (d *Daemon) Stop() error {
	if d.killed {
		return nil
	}
	err := d.Proc.Stop(10 * time.Second)
	if err != nil {
		return fmt.Errorf("xlbd on %s: %w; log tail:\n%s", d.Node.Short, err, lastLines(d.Output(), 20))
	}
	return nil
}

// Cleanup runs `xlbd --cleanup --config <config>` in the node's namespace:
// it detaches and unpins the data plane. Stop the daemon first.
func (d *Daemon) Cleanup(ctx context.Context) error {
	_, err := d.Node.Run(ctx, d.bin, "--cleanup", "--config", d.Config)
	return err
}

// AttachDecap runs `xlb-decap attach <iface>` on every backend, and
// `xlb-decap detach <iface>` on each when the lab is destroyed.
func (l *Lab) AttachDecap(ctx context.Context) error {
	bin, err := l.Binary(DecapBinary)
	if err != nil {
		return err
	}
	for _, h := range l.Backends {
		if _, err := h.Run(ctx, bin, "attach", h.Iface); err != nil {
			return fmt.Errorf("attach decap: %w", err)
		}
		l.onDestroy(func() error {
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := h.Run(cctx, bin, "detach", h.Iface)
			return err
		})
	}
	return nil
}

// DetachDecap runs `xlb-decap detach <iface>` on every backend now (Destroy
// does it too; a second detach is expected to be harmless).
func (l *Lab) DetachDecap(ctx context.Context) error {
	bin, err := l.Binary(DecapBinary)
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range l.Backends {
		if _, err := h.Run(ctx, bin, "detach", h.Iface); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// WaitForwarding polls GET http://target/ from the client every 200 ms
// until it succeeds, parent is done (the error wraps its error), timeout
// passes, or one of the daemons exits (its log tail is in the error).
func (l *Lab) WaitForwarding(parent context.Context, target netip.AddrPort, timeout time.Duration, daemons ...*Daemon) error {
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	exited := make(chan *Daemon, len(daemons))
	for _, d := range daemons {
		go func() {
			select {
			case <-d.Done():
				exited <- d
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	var last error
	for {
		_, err := HTTPGet(ctx, l.Client.NS, target, time.Second)
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
			continue
		}
		select {
		case d := <-exited:
			return fmt.Errorf("xlbd on %s exited (%v) before %v answered; log tail:\n%s", d.Node.Short, d.Wait(), target, lastLines(d.Output(), 20))
		default:
		}
		if err := parent.Err(); err != nil {
			return fmt.Errorf("waiting for %v to be forwarded: %w", target, err)
		}
		return fmt.Errorf("%v not forwarded within %v: %w", target, timeout, last)
	}
}

// NodeStats returns the counters of node i's LAN interface.
func (l *Lab) NodeStats(i int) (IfaceStats, error) {
	return l.Nodes[i].IfaceStats(l.Nodes[i].Iface)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
