package decap

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
)

// State is what Status reports about one interface.
type State struct {
	Interface string `json:"interface"`
	// PinDir is where the attachment's pins are (or would be).
	PinDir string `json:"pin_dir"`
	// Pinned: a link is pinned for the interface.
	Pinned bool `json:"pinned"`
	// Attached: the pinned link is still attached (it is not after its
	// interface was deleted; Detach then cleans up).
	Attached bool `json:"attached"`
	// Mode is ModeNative or ModeGeneric while attached; ModeAuto when the
	// kernel reports no single mode (another XDP program in the other mode).
	Mode      Mode           `json:"mode"`
	ProgramID ebpf.ProgramID `json:"program_id,omitempty"`
	// Counters are indexed by the C enum decap_counter, summed over CPUs.
	Counters []Counter `json:"counters,omitempty"`
	// LocalAddrs are the outer destinations the program decapsulates for.
	LocalAddrs []netip.Addr `json:"local_addrs,omitempty"`
}

// Counter is one per-CPU counter summed over the CPUs.
type Counter struct {
	// Name is the C enumerator without DECAP_, in lower case: "rx_gre_4in4".
	Name    string `json:"name"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// Status reports the attachment of ifname and its counters. Nothing pinned
// is not an error: the State then has Pinned false and nothing else. No
// bpffs at /sys/fs/bpf is one: there is no telling then.
func Status(ifname string) (State, error) {
	st, err := status(ifname)
	if err != nil {
		return st, fmt.Errorf("xlb-decap status of %s: %w", ifname, err)
	}
	return st, nil
}

func status(ifname string) (State, error) {
	st := State{Interface: ifname}
	dir, err := pinDir(ifname)
	if err != nil {
		return st, err
	}
	st.PinDir = dir
	// Links cannot be opened read-only (the kernel wants O_RDWR).
	l, err := link.LoadPinnedLink(filepath.Join(dir, pinLink), nil)
	if errors.Is(err, os.ErrNotExist) {
		if !bpffsMounted() {
			return st, errNoBPFFS()
		}
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("open pinned link: %w", err)
	}
	defer l.Close()
	st.Pinned = true

	info, err := l.Info()
	if err != nil {
		return st, fmt.Errorf("link info: %w", err)
	}
	st.ProgramID = info.Program
	if xdp := info.XDP(); xdp != nil && xdp.Ifindex != 0 {
		st.Attached = true
		if st.Mode, err = attachMode(int(xdp.Ifindex), info.Program); err != nil {
			return st, err
		}
	}

	if st.Counters, err = readPinned(dir, pinCounters, "counters", readCounters); err != nil {
		return st, err
	}
	if st.LocalAddrs, err = readPinned(dir, pinLocal, "local address map", readLocal); err != nil {
		return st, err
	}
	return st, nil
}

// readPinned opens the map pinned as name in dir read-only and reads it with
// read; what names the map in the error when it cannot be opened.
func readPinned[T any](dir, name, what string, read func(*ebpf.Map) (T, error)) (T, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		var zero T
		return zero, fmt.Errorf("open pinned %s: %w", what, err)
	}
	defer m.Close()
	return read(m)
}

// attachMode asks the kernel (rtnetlink IFLA_XDP) in which mode prog runs
// on the interface.
func attachMode(ifindex int, prog ebpf.ProgramID) (Mode, error) {
	iface, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return ModeAuto, fmt.Errorf("find interface %d: %w", ifindex, err)
	}
	xdp := iface.Attrs().Xdp
	if xdp == nil || ebpf.ProgramID(xdp.ProgId) != prog {
		return ModeAuto, nil
	}
	return modeOf(xdp.AttachMode), nil
}

func modeOf(attached uint32) Mode {
	switch attached {
	case nl.XDP_ATTACHED_DRV:
		return ModeNative
	case nl.XDP_ATTACHED_SKB:
		return ModeGeneric
	}
	return ModeAuto
}

// readCounters sums the per-CPU counters; names come from the BTF of the
// embedded object (enum decap_counter), so there is no list to keep in step.
func readCounters(m *ebpf.Map) ([]Counter, error) {
	names, err := counterNames()
	if err != nil {
		return nil, err
	}
	out := make([]Counter, m.MaxEntries())
	var perCPU []decapDecapStat
	for i := range out {
		if err := m.Lookup(uint32(i), &perCPU); err != nil {
			return nil, fmt.Errorf("read counter %d: %w", i, err)
		}
		out[i].Name = fmt.Sprintf("counter_%d", i)
		if i < len(names) {
			out[i].Name = names[i]
		}
		for _, s := range perCPU {
			out[i].Packets += s.Packets
			out[i].Bytes += s.Bytes
		}
	}
	return out, nil
}

// counterNames returns the names of enum decap_counter by value, without
// the DECAP_ prefix and in lower case, up to DECAP_COUNTER_MAX.
func counterNames() ([]string, error) {
	spec, err := loadDecap()
	if err != nil {
		return nil, err
	}
	var enum *btf.Enum
	if err := spec.Types.TypeByName("decap_counter", &enum); err != nil {
		return nil, fmt.Errorf("counter names: %w", err)
	}
	names := make([]string, 0, len(enum.Values))
	for _, v := range enum.Values {
		if v.Name == "DECAP_COUNTER_MAX" {
			continue
		}
		if v.Value != uint64(len(names)) {
			return nil, fmt.Errorf("counter names: %s = %d is out of sequence", v.Name, v.Value)
		}
		names = append(names, strings.ToLower(strings.TrimPrefix(v.Name, "DECAP_")))
	}
	return names, nil
}
