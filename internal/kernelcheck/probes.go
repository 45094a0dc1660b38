package kernelcheck

import (
	"errors"
	"fmt"
	"net"
	"runtime"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xlbproject/xlb/internal/progrun"
)

// inScratchNetns runs f on a thread moved into a new, empty network
// namespace, so a probe that attaches or adds something touches none of
// the host's interfaces. The thread is never unlocked: it ends with the
// goroutine and the namespace goes with it.
func inScratchNetns(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("probe in a new network namespace: %w", err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// trivialXDP loads a program that returns verdict.
func trivialXDP(verdict int32) (*ebpf.Program, error) {
	return ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.XDP,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, verdict), asm.Return()},
	})
}

// probeXDPLink attaches a bpf_link of a trivial program to the loopback
// device of a scratch namespace.
func probeXDPLink() error {
	return inScratchNetns(func() error {
		prog, err := trivialXDP(2) // XDP_PASS
		if err != nil {
			return err
		}
		defer prog.Close()
		lo, err := net.InterfaceByName("lo")
		if err != nil {
			return err
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: lo.Index, Flags: link.XDPGenericMode})
		if err != nil {
			if errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, unix.EINVAL) {
				return fmt.Errorf("%w (attach: %v)", ErrMissing, err)
			}
			return err
		}
		return l.Close()
	})
}

// probeLiveFrames test-runs a program that drops in live-frames mode;
// kernels without the mode refuse the flag (EINVAL).
func probeLiveFrames() error {
	prog, err := trivialXDP(1) // XDP_DROP
	if err != nil {
		return err
	}
	defer prog.Close()
	frame := make([]byte, 64)
	frame[12], frame[13] = 0x08, 0x00 // an Ethernet header with EtherType IPv4
	_, err = progrun.Run(progrun.XDP{Prog: prog, Data: frame, Repeat: 1, Flags: progrun.FlagLiveFrames, Retry: true})
	if errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("%w (test run: %v)", ErrMissing, err)
	}
	return err
}

// probeManagedNeighbour adds a managed neighbour entry on a veth of a
// scratch namespace and reads it back: kernels before 5.16 ignore the
// flag (the entry comes back without it).
func probeManagedNeighbour() error {
	return inScratchNetns(func() error {
		h, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "xlbprobe0"}, PeerName: "xlbprobe1"}
		if err := h.LinkAdd(veth); err != nil {
			return fmt.Errorf("create a veth: %w", err)
		}
		if err := h.LinkSetUp(veth); err != nil {
			return err
		}
		l, err := h.LinkByName("xlbprobe0")
		if err != nil {
			return err
		}
		ip := net.IPv4(192, 0, 2, 1)
		err = h.NeighSet(&netlink.Neigh{LinkIndex: l.Attrs().Index, Family: unix.AF_INET, IP: ip,
			Flags: netlink.NTF_EXT_LEARNED, FlagsExt: netlink.NTF_EXT_MANAGED})
		if err != nil {
			if errors.Is(err, unix.EINVAL) {
				return fmt.Errorf("%w (add: %v)", ErrMissing, err)
			}
			return err
		}
		return managedIn(h, l.Attrs().Index, ip)
	})
}

func managedIn(h *netlink.Handle, ifindex int, ip net.IP) error {
	ns, err := h.NeighList(ifindex, unix.AF_INET)
	if err != nil {
		return err
	}
	for _, n := range ns {
		if n.IP.Equal(ip) {
			if n.FlagsExt&netlink.NTF_EXT_MANAGED != 0 {
				return nil
			}
			return fmt.Errorf("%w (the entry was added without the managed flag)", ErrMissing)
		}
	}
	return fmt.Errorf("%w (the managed entry was not kept)", ErrMissing)
}

// probeBTF loads a BTF blob holding one integer type.
func probeBTF() error {
	b, err := btf.NewBuilder([]btf.Type{&btf.Int{Name: "probe", Size: 4}}, nil)
	if err != nil {
		return err
	}
	h, err := btf.NewHandle(b)
	if err != nil {
		return conclusive(err)
	}
	return h.Close()
}
