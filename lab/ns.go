package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NetnsDir is where named network namespaces are bind-mounted, as iproute2
// does: /run/netns/<name> works with `ip netns`, nsenter --net and setns(2).
const NetnsDir = "/run/netns"

// NS is a named network namespace, /run/netns/<Name>, with an open handle
// and a netlink socket inside it.
//
// Only the network namespace is ever switched: commands and functions run in
// an NS keep the caller's mount namespace, so /sys/fs/bpf pins and the file
// system are shared with the host. (sysfs is not remounted either: read link
// state through netlink, never /sys/class/net, which shows the host's devices.)
type NS struct {
	// Name is the namespace's full name, the file name under NetnsDir.
	Name string

	fd netns.NsHandle
	nl *netlink.Handle

	mu     sync.RWMutex // guards closed against fd and nl use
	closed bool
}

// ErrClosed is returned by NS methods called after the lab was destroyed.
var ErrClosed = errors.New("namespace handle closed (lab destroyed)")

// Path returns /run/netns/<Name>, the argument of nsenter --net=.
func (n *NS) Path() string { return filepath.Join(NetnsDir, n.Name) }

// Netlink returns a netlink handle that operates inside the namespace. It is
// owned by n and valid until the lab is destroyed: do not close it.
func (n *NS) Netlink() *netlink.Handle { return n.nl }

// Handle returns the namespace's file handle (for netns.Set or
// netlink.NsFd). It is owned by n and valid until the lab is destroyed: do
// not close it.
func (n *NS) Handle() netns.NsHandle { return n.fd }

// dup returns a new file descriptor for the namespace, which the caller
// closes: operations still under way when the lab is destroyed keep a
// valid descriptor, and never setns(2) into a reused number.
func (n *NS) dup() (netns.NsHandle, error) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.closed {
		return -1, fmt.Errorf("netns %s: %w", n.Name, ErrClosed)
	}
	fd, err := unix.FcntlInt(uintptr(n.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("netns %s: dup: %w", n.Name, err)
	}
	return netns.NsHandle(fd), nil
}

// netlink returns the namespace's netlink handle, or ErrClosed. A closed
// handle must not be used: it would fall back to this thread's namespace.
func (n *NS) netlink() (*netlink.Handle, error) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.closed {
		return nil, fmt.Errorf("netns %s: %w", n.Name, ErrClosed)
	}
	return n.nl, nil
}

// createNS creates the named network namespace and opens it. The namespace is
// made on a throwaway OS thread: unshare(CLONE_NEWNET) changes the calling
// thread for good, so that thread stays locked and the runtime ends it when
// its goroutine returns.
func createNS(name string) (*NS, error) {
	if err := os.MkdirAll(NetnsDir, 0o755); err != nil {
		return nil, fmt.Errorf("create netns %s: %w", name, err)
	}
	path := filepath.Join(NetnsDir, name)
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return nil, fmt.Errorf("create netns %s: %w", name, err)
	}
	f.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		if err := unix.Mount("/proc/thread-self/ns/net", path, "", unix.MS_BIND, ""); err != nil {
			errc <- fmt.Errorf("bind mount %s: %w", path, err)
			return
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("create netns %s: %w", name, err)
	}
	n, err := openNS(name)
	if err != nil {
		deleteNS(name)
		return nil, err
	}
	return n, nil
}

// openNS opens an existing named namespace.
func openNS(name string) (*NS, error) {
	fd, err := netns.GetFromName(name)
	if err != nil {
		return nil, fmt.Errorf("open netns %s: %w", name, err)
	}
	nl, err := netlink.NewHandleAt(fd)
	if err != nil {
		fd.Close()
		return nil, fmt.Errorf("netlink in netns %s: %w", name, err)
	}
	return &NS{Name: name, fd: fd, nl: nl}, nil
}

// close releases the handles; the namespace itself stays until deleteNS.
func (n *NS) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	n.closed = true
	n.nl.Close()
	n.fd.Close()
}

// deleteNS removes /run/netns/<name>. The kernel frees the namespace, and the
// interfaces in it, once no process, socket or handle holds it any more.
// A namespace that does not exist is not an error.
func deleteNS(name string) error {
	path := filepath.Join(NetnsDir, name)
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("delete netns %s: %w", name, err)
	}
	return nil
}

// Do runs fn on an OS thread switched into the namespace and returns fn's
// error. Sockets that fn creates belong to the namespace for their whole
// life, so listeners and connections made inside Do can be served and used
// from any goroutine afterwards. Goroutines that fn starts do NOT run in the
// namespace.
//
// fn runs in its own goroutine on a locked thread; the thread is switched
// back afterwards, and if that fails the thread is discarded, never reused.
func (n *NS) Do(fn func() error) error {
	target, err := n.dup()
	if err != nil {
		return err
	}
	defer target.Close()
	type result struct{ err error }
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{fmt.Errorf("get current netns: %w", err)}
			return
		}
		defer orig.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			done <- result{fmt.Errorf("enter netns %s: %w", n.Name, err)}
			return
		}
		var ferr error
		func() {
			defer func() {
				if p := recover(); p != nil {
					ferr = fmt.Errorf("panic in netns %s: %v", n.Name, p)
				}
			}()
			ferr = fn()
		}()
		if err := netns.Set(orig); err != nil {
			// Leave the thread locked: the runtime ends it with this goroutine.
			done <- result{errors.Join(ferr, fmt.Errorf("leave netns %s: %w", n.Name, err))}
			return
		}
		runtime.UnlockOSThread()
		done <- result{ferr}
	}()
	return (<-done).err
}

// Command returns an unstarted command that runs args inside the namespace's
// network namespace only: nsenter --net=/run/netns/<Name> -- args...
// (`ip netns exec` would also give a fresh mount namespace without
// /sys/fs/bpf, which is why it is not used.)
func (n *NS) Command(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + n.Path(), "--"}, args...)...)
}

// Run runs args inside the namespace (see Command) and returns the combined
// output. A failure's error includes the output.
func (n *NS) Run(ctx context.Context, args ...string) ([]byte, error) {
	out, err := n.Command(ctx, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s in %s: %w: %s", strings.Join(args, " "), n.Name, err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// Sysctl writes value to the sysctl key ("net.ipv4.ip_forward") inside the
// namespace.
func (n *NS) Sysctl(key, value string) error {
	path := "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
	return n.Do(func() error {
		if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
			return fmt.Errorf("sysctl %s=%s in %s: %w", key, value, n.Name, err)
		}
		return nil
	})
}

// ReadSysctl reads the sysctl key inside the namespace.
func (n *NS) ReadSysctl(key string) (string, error) {
	path := "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
	var v string
	err := n.Do(func() error {
		b, err := os.ReadFile(path)
		v = strings.TrimSpace(string(b))
		return err
	})
	if err != nil {
		return "", fmt.Errorf("read sysctl %s in %s: %w", key, n.Name, err)
	}
	return v, nil
}

// Listen is net.Listen inside the namespace.
func (n *NS) Listen(network, address string) (net.Listener, error) {
	var ln net.Listener
	err := n.Do(func() (err error) {
		ln, err = net.Listen(network, address)
		return err
	})
	return ln, err
}

// ListenPacket is net.ListenPacket inside the namespace.
func (n *NS) ListenPacket(network, address string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := n.Do(func() (err error) {
		pc, err = net.ListenPacket(network, address)
		return err
	})
	return pc, err
}

// DialContext dials address from inside the namespace. Use numeric
// addresses: there is no resolver configuration in a lab namespace.
func (n *NS) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	err := n.Do(func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	return c, err
}

// IfaceStats are an interface's counters as the kernel reports them.
type IfaceStats struct {
	RxPackets, TxPackets uint64
	RxBytes, TxBytes     uint64
	RxDropped, TxDropped uint64
}

// Sub returns s - o, counter by counter (for a before/after delta).
func (s IfaceStats) Sub(o IfaceStats) IfaceStats {
	return IfaceStats{
		RxPackets: s.RxPackets - o.RxPackets, TxPackets: s.TxPackets - o.TxPackets,
		RxBytes: s.RxBytes - o.RxBytes, TxBytes: s.TxBytes - o.TxBytes,
		RxDropped: s.RxDropped - o.RxDropped, TxDropped: s.TxDropped - o.TxDropped,
	}
}

// IfaceStats reads the counters of interface dev inside the namespace
// (through netlink: /sys/class/net would show the host's interfaces).
func (n *NS) IfaceStats(dev string) (IfaceStats, error) {
	h, err := n.netlink()
	if err != nil {
		return IfaceStats{}, err
	}
	l, err := h.LinkByName(dev)
	if err != nil {
		return IfaceStats{}, fmt.Errorf("link %s in %s: %w", dev, n.Name, err)
	}
	s := l.Attrs().Statistics
	if s == nil {
		return IfaceStats{}, fmt.Errorf("link %s in %s: no statistics", dev, n.Name)
	}
	return IfaceStats{
		RxPackets: s.RxPackets, TxPackets: s.TxPackets,
		RxBytes: s.RxBytes, TxBytes: s.TxBytes,
		RxDropped: s.RxDropped, TxDropped: s.TxDropped,
	}, nil
}
