// Package decap loads, attaches and inspects xlb-decap (bpf/decap.c): the
// XDP program a backend runs when its kernel has no GRE/IPIP tunnel modules.
// It strips xlb's GRE, IPIP, 6in4, 4in6 and IP6IP6 encapsulation from
// packets addressed to this host and passes the inner datagram to the local
// stack, where the VIP is configured on loopback.
//
// An attachment is a BPF link pinned in bpffs, so it outlives the process
// that made it:
//
//	/sys/fs/bpf/xlb-decap/netns-<inode>/<ifname>/link      the XDP link
//	/sys/fs/bpf/xlb-decap/netns-<inode>/<ifname>/counters  per-CPU counters
//	/sys/fs/bpf/xlb-decap/netns-<inode>/<ifname>/local     this host's addresses
//
// bpffs is shared by every network namespace of the mount namespace while
// interface names are per network namespace (a lab runs many backends, each
// with its own eth0), so the path names the network namespace by its inode
// (stat -L -c %i /proc/self/ns/net).
//
// Which packets count as "addressed to this host" is decided by the local
// map, which Attach fills with the host's addresses and SyncLocalAddrs
// refreshes; see bpf/decap_maps.h for why bpf_fib_lookup cannot decide it.
//
// All functions act on the network namespace of the calling thread.
// Needs root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN for bpffs) and Linux
// 5.9 or later (XDP links).
package decap

import (
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// PinRoot is the bpffs directory holding a netns-<inode> directory per
// network namespace, and in it one directory per interface.
const PinRoot = "/sys/fs/bpf/xlb-decap"

// BPFFS is where Attach mounts bpffs when nothing is mounted there.
const BPFFS = "/sys/fs/bpf"

// Names of the pins inside an interface's directory.
const (
	pinLink     = "link"
	pinCounters = "counters"
	pinLocal    = "local"
)

var (
	// ErrNotAttached is returned by Detach and SyncLocalAddrs when no
	// xlb-decap link is pinned for the interface.
	ErrNotAttached = errors.New("xlb-decap is not attached")
	// ErrAttached is returned by Attach when a link that is still attached
	// is pinned for the interface.
	ErrAttached = errors.New("xlb-decap is already attached")
)

// Mode selects the XDP attach mode.
type Mode int

const (
	// ModeAuto tries native XDP and falls back to generic. In a State it
	// means the kernel did not report a single mode.
	ModeAuto Mode = iota
	// ModeNative runs in the driver (XDP_FLAGS_DRV_MODE).
	ModeNative
	// ModeGeneric runs on the skb path (XDP_FLAGS_SKB_MODE): works on any
	// interface, slower.
	ModeGeneric
)

// String returns "auto", "native" or "generic".
func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeNative:
		return "native"
	case ModeGeneric:
		return "generic"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// MarshalText makes a Mode read as its String in JSON.
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText is the inverse of MarshalText.
func (m *Mode) UnmarshalText(b []byte) error {
	v, err := ParseMode(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// ParseMode is the inverse of String.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "auto":
		return ModeAuto, nil
	case "native":
		return ModeNative, nil
	case "generic":
		return ModeGeneric, nil
	}
	return 0, fmt.Errorf("unknown xdp mode %q (want auto, native or generic)", s)
}

// pinDir returns the pin directory of ifname in the calling thread's
// network namespace, refusing names that are not a single path element.
func pinDir(ifname string) (string, error) {
	if ifname == "" || ifname == "." || ifname == ".." || strings.ContainsRune(ifname, '/') {
		return "", fmt.Errorf("invalid interface name %q", ifname)
	}
	// thread-self: callers may have switched this thread's namespace.
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return "", fmt.Errorf("identify network namespace: %w", err)
	}
	return filepath.Join(PinRoot, fmt.Sprintf("netns-%d", st.Ino), ifname), nil
}

// Attach loads xlb-decap, fills its local-address map with the addresses
// of this host, attaches it to ifname and pins the link, so that the
// program stays attached after the process exits. It mounts bpffs at
// /sys/fs/bpf if nothing is mounted there. ModeAuto tries native XDP first
// and falls back to generic, logging a warning; Status reports the mode in
// use. It returns an error wrapping ErrAttached if a link is pinned for
// ifname and still attached; the pins of one that is not (its interface was
// deleted) are replaced. It first prunes (Prune) the pins of every other
// interface and namespace that is gone.
func Attach(ifname string, mode Mode) error {
	return AttachGUE(ifname, mode, DefaultGUEPort)
}

// DefaultGUEPort is the UDP port xlb-decap strips GUE from unless told
// otherwise: xlbd's default node.gue_port.
const DefaultGUEPort = 6080

// AttachGUE is Attach with the UDP port GUE arrives on (xlbd's
// node.gue_port); 0 strips no GUE (the kernel's fou may take it).
func AttachGUE(ifname string, mode Mode, guePort uint16) error {
	if err := attach(ifname, mode, guePort); err != nil {
		return fmt.Errorf("attach xlb-decap to %s: %w", ifname, err)
	}
	return nil
}

// loadObjects loads the program with its GUE port set.
func loadObjects(objs *decapObjects, guePort uint16) error {
	spec, err := loadDecap()
	if err != nil {
		return err
	}
	if err := spec.Variables["decap_gue_port"].Set(bits.ReverseBytes16(guePort)); err != nil {
		return fmt.Errorf("set GUE port: %w", err)
	}
	return spec.LoadAndAssign(objs, nil)
}

func attach(ifname string, mode Mode, guePort uint16) error {
	dir, err := pinDir(ifname)
	if err != nil {
		return err
	}
	iface, err := netlink.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("find interface: %w (see 'ip link')", err)
	}
	if err := ensureBPFFS(); err != nil {
		return err
	}
	pruneStale()
	if err := checkNotAttached(dir, ifname); err != nil {
		return err
	}

	var objs decapObjects
	if err := loadObjects(&objs, guePort); err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("load program: %w (needs root: CAP_BPF, CAP_NET_ADMIN)", err)
		}
		return fmt.Errorf("load program: %w", err)
	}
	defer objs.Close()

	if _, err := syncLocal(objs.DecapLocal); err != nil {
		return err
	}

	l, used, err := attachXDP(objs.XlbDecap, iface.Attrs().Index, mode)
	if err != nil {
		return err
	}
	defer l.Close()

	if err := pinAll(dir, l, &objs); err != nil {
		return err
	}
	slog.Info("xlb-decap attached", "interface", ifname, "mode", used, "pin", dir)
	return nil
}

// checkNotAttached returns an error wrapping ErrAttached if a live link is
// pinned in dir. A pinned link that is no longer attached (its interface
// was deleted, perhaps recreated since) is stale: its pins are removed.
func checkNotAttached(dir, ifname string) error {
	l, err := link.LoadPinnedLink(filepath.Join(dir, pinLink), nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open pinned link: %w", err)
	}
	info, err := l.Info()
	l.Close()
	if err != nil {
		return fmt.Errorf("link info: %w", err)
	}
	if xdp := info.XDP(); xdp == nil || xdp.Ifindex != 0 {
		return fmt.Errorf("%w (run 'xlb-decap detach %s' first)", ErrAttached, ifname)
	}
	slog.Info("removing stale pins of a detached link", "pin", dir)
	return removePins(dir)
}

// attachXDP attaches prog in the requested mode; ModeAuto falls back from
// native to generic. Returns the link and the mode in use.
func attachXDP(prog *ebpf.Program, ifindex int, mode Mode) (link.Link, Mode, error) {
	flags := map[Mode]link.XDPAttachFlags{
		ModeNative:  link.XDPDriverMode,
		ModeGeneric: link.XDPGenericMode,
	}
	try := func(m Mode) (link.Link, error) {
		return link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: flags[m]})
	}

	switch mode {
	case ModeNative, ModeGeneric:
		l, err := try(mode)
		if err != nil {
			return nil, 0, fmt.Errorf("attach %s xdp: %w%s", mode, err, attachHint(mode))
		}
		return l, mode, nil
	case ModeAuto:
		l, err := try(ModeNative)
		if err == nil {
			return l, ModeNative, nil
		}
		if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.EBUSY) {
			// Another program holds the hook: generic would not help.
			return nil, 0, fmt.Errorf("attach native xdp: %w%s", err, attachHint(ModeGeneric))
		}
		slog.Warn("native xdp unavailable, falling back to generic (slower)", "error", err)
		l, gerr := try(ModeGeneric)
		if gerr != nil {
			return nil, 0, fmt.Errorf("attach xdp: native: %v; generic: %w%s", err, gerr, attachHint(ModeGeneric))
		}
		return l, ModeGeneric, nil
	}
	return nil, 0, fmt.Errorf("unknown xdp mode %d", int(mode))
}

func attachHint(mode Mode) string {
	h := " (another XDP program may be attached: see 'ip link show'"
	if mode == ModeNative {
		h += "; or the driver lacks native XDP: try --mode generic"
	}
	return h + ")"
}

// pinAll pins the maps and then the link under dir; on failure it removes
// what it pinned, and the caller's Close then detaches the link.
func pinAll(dir string, l link.Link, objs *decapObjects) (err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create pin directory: %w", err)
	}
	// Map pins without a link pin are left from an attach that died
	// half-way; they belong to nothing.
	for _, name := range []string{pinCounters, pinLocal} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove stale pin: %w", err)
		}
	}
	defer func() {
		if err != nil {
			_ = removePins(dir)
		}
	}()
	if err := objs.DecapCounters.Pin(filepath.Join(dir, pinCounters)); err != nil {
		return fmt.Errorf("pin counters: %w", err)
	}
	if err := objs.DecapLocal.Pin(filepath.Join(dir, pinLocal)); err != nil {
		return fmt.Errorf("pin local address map: %w", err)
	}
	if err := l.Pin(filepath.Join(dir, pinLink)); err != nil {
		return fmt.Errorf("pin link: %w", err)
	}
	return nil
}

// Detach detaches the pinned xlb-decap link of ifname and removes its pins.
// It returns an error wrapping ErrNotAttached if nothing is pinned for
// ifname. It works after the interface is gone, to clean up the pins
// (after the network namespace is gone, only Prune can).
func Detach(ifname string) error {
	if err := detach(ifname); err != nil {
		return fmt.Errorf("detach xlb-decap from %s: %w", ifname, err)
	}
	return nil
}

func detach(ifname string) error {
	dir, err := pinDir(ifname)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, pinLink)
	l, err := link.LoadPinnedLink(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		if !bpffsMounted() {
			return errNoBPFFS()
		}
		return fmt.Errorf("%w (nothing pinned at %s)", ErrNotAttached, path)
	}
	if err != nil {
		return fmt.Errorf("open pinned link: %w", err)
	}
	defer l.Close()

	// Detach ends the attachment even while another process (a concurrent
	// status) holds the link open; unpin + close alone would wait for it.
	if err := l.Detach(); err != nil && !errors.Is(err, link.ErrNotSupported) {
		return fmt.Errorf("detach link: %w", err)
	}
	return removePins(dir)
}

// removePins removes the pins in dir, dir itself, and its netns-<inode>
// parent once empty. Removing the link pin drops the kernel's reference.
func removePins(dir string) error {
	for _, name := range []string{pinLink, pinCounters, pinLocal} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove pin: %w", err)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove pin directory: %w", err)
	}
	_ = os.Remove(filepath.Dir(dir)) // fails while other interfaces are pinned
	return nil
}

// pruneStale runs Prune for Attach: stale pins of other interfaces and
// namespaces go on every attach; a failure only warns (the attach of this
// interface does not depend on it).
func pruneStale() {
	removed, err := Prune()
	for _, d := range removed {
		slog.Info("removed the pins of a link whose interface or namespace is gone", "pin", d)
	}
	if err != nil {
		slog.Warn("stale pins not all removed (xlb-decap prune retries)", "error", err)
	}
}

// Prune removes the pins of every xlb-decap link that is no longer
// attached, in any network namespace: those of deleted interfaces, and of
// deleted namespaces, whose pin paths can no longer be named. It returns
// the directories it removed.
func Prune() ([]string, error) {
	dirs, err := filepath.Glob(filepath.Join(PinRoot, "netns-*", "*"))
	if err != nil {
		return nil, fmt.Errorf("prune: %w", err)
	}
	var removed []string
	for _, dir := range dirs {
		l, err := link.LoadPinnedLink(filepath.Join(dir, pinLink), nil)
		if errors.Is(err, os.ErrNotExist) {
			continue // not ours, or an attach in progress
		}
		if err != nil {
			return removed, fmt.Errorf("prune: open pinned link: %w", err)
		}
		info, err := l.Info()
		l.Close()
		if err != nil {
			return removed, fmt.Errorf("prune: link info: %w", err)
		}
		if xdp := info.XDP(); xdp == nil || xdp.Ifindex != 0 {
			continue
		}
		if err := removePins(dir); err != nil {
			return removed, fmt.Errorf("prune: %w", err)
		}
		removed = append(removed, dir)
	}
	return removed, nil
}
