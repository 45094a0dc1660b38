package controller

import "github.com/xlbproject/xlb/internal/kernelnet"

// keepGateways keeps the neighbours of the node's default routes
// resolved, so NAT replies to clients go out from XDP (bpf/nat.h) rather
// than through the kernel.
func (c *Controller) keepGateways() {
	gws, err := kernelnet.DefaultGateways()
	if err != nil {
		c.log.Warn("default routes not read; NAT replies may go through the kernel", "error", err)
	}
	for _, nh := range gws {
		if err := kernelnet.KeepNeighbour(nh); err != nil {
			c.log.Warn("gateway not kept resolved; NAT replies may go through the kernel", "gateway", nh.Via, "error", err)
		}
	}
}
