package decap

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
)

// SyncLocalAddrs replaces the local-address map of ifname's attachment with
// the current addresses of this host (Attach fills it once; run this after
// addresses change) and returns them. It returns an error wrapping
// ErrNotAttached if nothing is pinned for ifname.
func SyncLocalAddrs(ifname string) ([]netip.Addr, error) {
	addrs, err := syncPinned(ifname)
	if err != nil {
		return nil, fmt.Errorf("sync local addresses of %s: %w", ifname, err)
	}
	return addrs, nil
}

func syncPinned(ifname string) ([]netip.Addr, error) {
	dir, err := pinDir(ifname)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, pinLocal)
	m, err := ebpf.LoadPinnedMap(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		if !bpffsMounted() {
			return nil, errNoBPFFS()
		}
		return nil, fmt.Errorf("%w (nothing pinned at %s)", ErrNotAttached, path)
	}
	if err != nil {
		return nil, fmt.Errorf("open pinned local address map: %w", err)
	}
	defer m.Close()
	return syncLocal(m)
}

// hostAddrs returns the addresses of the current network namespace that
// can be a tunnel's outer destination: all but loopback, multicast and
// unspecified ones, sorted.
func hostAddrs() ([]netip.Addr, error) {
	list, err := listAddrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, a := range list {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if ip.IsLoopback() || ip.IsMulticast() || ip.IsUnspecified() {
			continue
		}
		out = append(out, ip)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out), nil
}

// dumpTries is how many times listAddrs lists the addresses while each
// listing is interrupted by changes.
const dumpTries = 10

// listAddrs lists the addresses of the current network namespace. A
// listing that changes meanwhile is interrupted and may be inconsistent,
// so it is done again (the changes that interrupt it also wake Follow).
func listAddrs() ([]netlink.Addr, error) {
	for i := 1; ; i++ {
		list, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
		if err == nil {
			return list, nil
		}
		if !errors.Is(err, netlink.ErrDumpInterrupted) || i == dumpTries {
			return nil, fmt.Errorf("list addresses: %w", err)
		}
	}
}

func addrKey(a netip.Addr) decapDecapAddr {
	return decapDecapAddr{Addr: a.As16()} // IPv4 becomes ::ffff:a.b.c.d
}

// syncLocal makes m hold exactly the host's addresses: new ones are added
// before stale ones go, so an address present throughout never misses.
func syncLocal(m *ebpf.Map) ([]netip.Addr, error) {
	want, err := hostAddrs()
	if err != nil {
		return nil, err
	}
	have, err := readLocal(m)
	if err != nil {
		return nil, err
	}
	one := uint32(1)
	for _, a := range want {
		k := addrKey(a)
		if err := m.Update(&k, &one, ebpf.UpdateAny); err != nil {
			return nil, fmt.Errorf("add local address %s: %w (the map holds at most %d)", a, err, m.MaxEntries())
		}
	}
	for _, a := range have {
		if _, found := slices.BinarySearchFunc(want, a, netip.Addr.Compare); found {
			continue
		}
		k := addrKey(a)
		if err := m.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, fmt.Errorf("remove local address %s: %w", a, err)
		}
	}
	return want, nil
}

// readLocal returns the addresses in a local-address map, sorted.
func readLocal(m *ebpf.Map) ([]netip.Addr, error) {
	var (
		k   decapDecapAddr
		v   uint32
		out []netip.Addr
	)
	it := m.Iterate()
	for it.Next(&k, &v) {
		out = append(out, netip.AddrFrom16(k.Addr).Unmap())
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read local addresses: %w", err)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}
