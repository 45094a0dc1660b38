package lab

import (
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
)

// SetPortXDP removes (on false) or attaches again (on true) the XDP_PASS
// program of h's switch port. Without it, frames that h sends with native
// XDP_TX are dropped by the port (see loadPassProgram); the stack's own
// packets still pass.
func (l *Lab) SetPortXDP(h *Host, on bool) error {
	_, port, err := l.switchPort(h)
	if err != nil {
		return err
	}
	if !on {
		return l.Switch.Do(func() error { return netlink.LinkSetXdpFdWithFlags(port, -1, nl.XDP_FLAGS_DRV_MODE) })
	}
	prog, err := loadPassProgram()
	if err != nil {
		return err
	}
	defer prog.Close()
	return l.Switch.Do(func() error { return netlink.LinkSetXdpFdWithFlags(port, prog.FD(), nl.XDP_FLAGS_DRV_MODE) })
}

// switchPort returns the switch namespace's netlink handle and h's port.
func (l *Lab) switchPort(h *Host) (*netlink.Handle, netlink.Link, error) {
	sw, err := l.Switch.netlink()
	if err != nil {
		return nil, nil, err
	}
	port, err := sw.LinkByName(h.Short)
	if err != nil {
		return nil, nil, fmt.Errorf("switch port %s in %s: %w", h.Short, l.Switch.Name, err)
	}
	return sw, port, nil
}
