package bgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// RouteProtocol is the rtm_protocol of the routes Kernel keeps (ip route
// shows "proto 250"): the routes it adds, and the only ones it removes or
// counts as its own.
const RouteProtocol = 250

// KernelOptions configure NewKernel: a routing table or a dummy interface.
type KernelOptions struct {
	// Table is the kernel routing table of the VIP routes (blackhole host
	// routes: the table is for the routing daemon to export, not for
	// forwarding; the forwarder takes the VIPs' packets before routing).
	Table uint32
	// Dummy is a dummy interface that holds the VIPs as /32 and /128
	// addresses instead; it is created when missing. Every host address
	// of a global scope on it is Kernel's to add and remove.
	Dummy string
	// NoCreate: a missing dummy interface is not created (nothing to do).
	NoCreate bool
	Log      *slog.Logger
}

// Kernel is the announcer of bgp.mode external: the host's routing daemon
// (BIRD, FRR) announces whatever Kernel keeps in the kernel, one host route
// per VIP the node should receive. It takes the same decisions as the
// Speaker (SetAnnounced from the controller, drain and undrain), with no
// graceful shutdown wait: a drain withdraws at once, and the daemon's own
// settings decide how gently. The kernel is the state: a new xlbd finds
// the routes of the previous one and keeps those still wanted, so a
// restart withdraws nothing. Its methods are safe for concurrent use.
type Kernel struct {
	o       KernelOptions
	log     *slog.Logger
	mu      sync.Mutex
	desired map[netip.Prefix]struct{}
	mode    drainMode
	link    netlink.Link // the dummy interface; nil with a table
}

// NewKernel checks that the table can be read, or creates the dummy
// interface (up) when missing, in the current network namespace.
func NewKernel(o KernelOptions) (*Kernel, error) {
	if (o.Table == 0) == (o.Dummy == "") {
		return nil, errors.New("kernel routes: give a table or a dummy interface, not both")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	k := &Kernel{o: o, log: o.Log, desired: map[netip.Prefix]struct{}{}}
	if o.Dummy != "" {
		l, err := ensureDummy(o.Dummy, !o.NoCreate)
		if err != nil {
			return nil, err
		}
		k.link = l
	}
	if _, err := k.current(); err != nil {
		return nil, err
	}
	return k, nil
}

// ensureDummy returns the dummy interface name, created and up.
func ensureDummy(name string, create bool) (netlink.Link, error) {
	l, err := netlink.LinkByName(name)
	if errors.As(err, &netlink.LinkNotFoundError{}) && create {
		if err := netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name}}); errors.Is(err, unix.EOPNOTSUPP) {
			return nil, fmt.Errorf("bgp.dummy_interface %s: create: %w (this kernel has no dummy interface driver, CONFIG_DUMMY: use bgp.route_table)", name, err)
		} else if err != nil {
			return nil, fmt.Errorf("bgp.dummy_interface %s: create: %w", name, err)
		}
		l, err = netlink.LinkByName(name)
	}
	if err != nil {
		return nil, fmt.Errorf("bgp.dummy_interface %s: %w", name, err)
	}
	if l.Type() != "dummy" {
		return nil, fmt.Errorf("bgp.dummy_interface %s is a %s interface, not a dummy: xlbd adds and removes every host address on it; name a dummy interface (it is created when missing)", name, l.Type())
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return nil, fmt.Errorf("bgp.dummy_interface %s: set up: %w", name, err)
	}
	return l, nil
}

// SetAnnounced makes exactly these prefixes present (none while drained).
func (k *Kernel) SetAnnounced(prefixes []netip.Prefix) error {
	set := make(map[netip.Prefix]struct{}, len(prefixes))
	for _, p := range prefixes {
		a := p.Addr().Unmap().WithZone("")
		if !p.IsValid() || !p.IsSingleIP() || a.IsUnspecified() {
			return fmt.Errorf("announce %v: %w", p, ErrNotHostPrefix)
		}
		set[netip.PrefixFrom(a, a.BitLen())] = struct{}{}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.desired = set
	return k.reconcileLocked()
}

// GracefulShutdown withdraws every route until Undrain.
func (k *Kernel) GracefulShutdown(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.mode = drained
	k.log.Info("node drain: VIP routes removed from the kernel", "where", k.Where())
	return k.reconcileLocked()
}

// Undrain puts the wanted routes back.
func (k *Kernel) Undrain() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.mode = inService
	return k.reconcileLocked()
}

// RestoreDrain keeps a drain that outlived a restart.
func (k *Kernel) RestoreDrain() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.mode = drained
	return nil
}

// Present returns the prefixes in the kernel now (Kernel's own), sorted.
func (k *Kernel) Present() ([]netip.Prefix, error) {
	cur, err := k.current()
	if err != nil {
		return nil, err
	}
	out := make([]netip.Prefix, 0, len(cur))
	for p := range cur {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return out, nil
}

// RemoveAll removes every route (xlbd --cleanup: no forwarder, no VIP).
func (k *Kernel) RemoveAll() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.desired = map[netip.Prefix]struct{}{}
	return k.reconcileLocked()
}

// Where says where the routes are kept: "table N" or "dummy interface
// NAME".
func (k *Kernel) Where() string {
	if k.link != nil {
		return "dummy interface " + k.o.Dummy
	}
	return fmt.Sprintf("table %d", k.o.Table)
}

// reconcileLocked turns what the kernel holds into what is wanted, with
// the speaker's decision (target) and diff.
func (k *Kernel) reconcileLocked() error {
	cur, err := k.current()
	if err != nil {
		return err
	}
	var errs []error
	for _, ch := range diff(cur, target(k.desired, k.mode)) {
		if err := k.apply(ch); err != nil {
			errs = append(errs, err)
			continue
		}
		verb := "VIP route added"
		if ch.Withdraw {
			verb = "VIP route removed"
		}
		k.log.Info(verb, "prefix", ch.Prefix, "where", k.Where())
	}
	return errors.Join(errs...)
}

// current reads Kernel's routes (or addresses) from the kernel, as a rib
// without the GRACEFUL_SHUTDOWN marks (target sets none outside a drain).
func (k *Kernel) current() (rib, error) {
	cur := rib{}
	if k.link != nil {
		addrs, err := netlink.AddrList(k.link, netlink.FAMILY_ALL)
		if err != nil {
			return nil, fmt.Errorf("addresses of %s: %w", k.o.Dummy, err)
		}
		for _, a := range addrs {
			if p, ok := hostPrefix(a.IPNet); ok && a.Scope == unix.RT_SCOPE_UNIVERSE {
				cur[p] = false
			}
		}
		return cur, nil
	}
	filter := &netlink.Route{Table: int(k.o.Table), Protocol: RouteProtocol}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := netlink.RouteListFiltered(fam, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			return nil, fmt.Errorf("routes of table %d: %w", k.o.Table, err)
		}
		for _, r := range routes {
			if p, ok := hostPrefix(r.Dst); ok {
				cur[p] = false
			}
		}
	}
	return cur, nil
}

func (k *Kernel) apply(ch change) error {
	ipn := &net.IPNet{IP: ch.Prefix.Addr().AsSlice(), Mask: net.CIDRMask(ch.Prefix.Bits(), ch.Prefix.Addr().BitLen())}
	if k.link != nil {
		a := &netlink.Addr{IPNet: ipn, Scope: unix.RT_SCOPE_UNIVERSE}
		if ch.Prefix.Addr().Is6() {
			a.Flags = unix.IFA_F_NODAD // usable (and seen by the daemon) at once
		}
		if ch.Withdraw {
			return wrapNL("remove", ch.Prefix, k.o.Dummy, netlink.AddrDel(k.link, a))
		}
		return wrapNL("add", ch.Prefix, k.o.Dummy, netlink.AddrReplace(k.link, a))
	}
	r := &netlink.Route{Dst: ipn, Table: int(k.o.Table), Protocol: RouteProtocol, Type: unix.RTN_BLACKHOLE}
	if ch.Withdraw {
		return wrapNL("remove", ch.Prefix, fmt.Sprintf("table %d", k.o.Table), netlink.RouteDel(r))
	}
	return wrapNL("add", ch.Prefix, fmt.Sprintf("table %d", k.o.Table), netlink.RouteReplace(r))
}

func wrapNL(verb string, p netip.Prefix, where string, err error) error {
	if err == nil || (verb == "remove" && errors.Is(err, unix.ESRCH)) || (verb == "remove" && errors.Is(err, unix.EADDRNOTAVAIL)) {
		return nil
	}
	return fmt.Errorf("%s VIP route %v in %s: %w", verb, p, where, err)
}

// hostPrefix returns n as a /32 or /128 prefix; false for anything else.
func hostPrefix(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	ones, _ := n.Mask.Size()
	if ones != a.BitLen() || a.IsLinkLocalUnicast() {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, ones), true
}
