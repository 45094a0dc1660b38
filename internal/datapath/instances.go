package datapath

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/xlbproject/xlb/internal/state"
)

// Instance is another xlb instance forwarding in this network namespace,
// found by its pins: the XDP link pinned in its directory runs on an
// interface of this namespace (the interface with the link's ifindex runs
// the link's program).
type Instance struct {
	Name      string // its pin directory's name: its node.name
	Dir       string
	Interface string
	VIPs      []state.VIPKey // its committed VIPs (xlb_vips)
}

// OtherInstances lists the instances pinned under root (BPFFSRoot) other
// than self (a pin directory) whose forwarder is attached in this network
// namespace, running xlbd or not: a stopped instance's forwarder keeps
// forwarding. Pin directories of other namespaces (another host's lab
// node), or whose link is gone or detached, are left out.
func OtherInstances(root, self string) ([]Instance, error) {
	ents, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list instances under %s: %w", root, err)
	}
	var out []Instance
	for _, e := range ents {
		dir := filepath.Join(root, e.Name())
		if !e.IsDir() || filepath.Clean(dir) == filepath.Clean(self) {
			continue
		}
		iface, ok := attachedHere(dir)
		if !ok {
			continue
		}
		vips, err := pinnedVIPs(dir)
		if err != nil {
			return nil, err
		}
		out = append(out, Instance{Name: e.Name(), Dir: dir, Interface: iface, VIPs: vips})
	}
	return out, nil
}

// attachedHere reports whether the XDP link pinned in dir runs on an
// interface of this network namespace, and names it.
func attachedHere(dir string) (string, bool) {
	l, err := link.LoadPinnedLink(filepath.Join(dir, "link"), nil)
	if err != nil {
		return "", false
	}
	defer l.Close()
	info, err := l.Info()
	if err != nil || info.XDP() == nil || info.XDP().Ifindex == 0 {
		return "", false
	}
	nl, err := netlink.LinkByIndex(int(info.XDP().Ifindex))
	if err != nil {
		return "", false
	}
	x := nl.Attrs().Xdp
	if x == nil || !x.Attached || ebpf.ProgramID(x.ProgId) != info.Program {
		return "", false
	}
	return nl.Attrs().Name, true
}

// pinnedVIPs reads the VIP catalog pinned in dir.
func pinnedVIPs(dir string) ([]state.VIPKey, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, "xlb_vips"), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("read the VIPs of the instance pinned in %s: %w", dir, err)
	}
	defer m.Close()
	var (
		k    xlbVipKey
		vi   xlbVipInfo
		keys []state.VIPKey
	)
	it := m.Iterate()
	for it.Next(&k, &vi) {
		keys = append(keys, keyFromVip(k))
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read the VIPs of the instance pinned in %s: %w", dir, err)
	}
	slices.SortFunc(keys, state.VIPKey.Compare)
	return keys, nil
}

// ErrVIPOverlap: a VIP of the config is another instance's.
var ErrVIPOverlap = errors.New("VIPs overlap with another xlb instance on this host")

// CheckOverlap fails, wrapping ErrVIPOverlap, when a key of want is
// forwarded by one of others: the same address and protocol, and the same
// port or either side's all-ports VIP (port 0). The message names each
// conflict, its instance and the way out.
func CheckOverlap(want []state.VIPKey, others []Instance) error {
	var conflicts []string
	for _, o := range others {
		for _, w := range want {
			for _, k := range o.VIPs {
				if w.Addr == k.Addr && w.Proto == k.Proto && (w.Port == k.Port || w.Port == 0 || k.Port == 0) {
					conflicts = append(conflicts, fmt.Sprintf("%s is instance %s's %s (on %s)", keyString(w), o.Name, keyString(k), o.Interface))
				}
			}
		}
	}
	if len(conflicts) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s; nothing was changed: give each instance its own VIPs (or stop the other one and remove its forwarder with 'xlbd --cleanup --config ITS_CONFIG')",
		ErrVIPOverlap, strings.Join(conflicts, "; "))
}

func keyString(k state.VIPKey) string {
	proto := map[uint8]string{6: "tcp", 17: "udp"}[k.Proto]
	if k.Port == 0 {
		return fmt.Sprintf("%s (all ports)/%s", k.Addr, proto)
	}
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(k.Addr, k.Port), proto)
}
