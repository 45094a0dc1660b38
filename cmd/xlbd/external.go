package main

import (
	"errors"
	"log/slog"

	"github.com/vishvananda/netlink"

	"github.com/xlbproject/xlb/internal/bgp"
	"github.com/xlbproject/xlb/internal/config"
)

// kernelRoutes is the announcer of bgp.mode external: VIP routes in a
// kernel table or on a dummy interface, for the host's routing daemon.
func kernelRoutes(b *config.BGP, log *slog.Logger) (*bgp.Kernel, error) {
	k, err := bgp.NewKernel(bgp.KernelOptions{Table: b.RouteTable, Dummy: b.DummyInterface, Log: log})
	if err != nil {
		return nil, err
	}
	log.Info("bgp.mode external: the VIPs this node should receive are kept as kernel routes for the host's routing daemon",
		"route_table", b.RouteTable, "dummy_interface", b.DummyInterface, "route_protocol", bgp.RouteProtocol)
	return k, nil
}

// cleanupKernelRoutes removes the VIP routes (xlbd --cleanup): with the
// forwarder gone the node must not attract the VIPs' traffic.
func cleanupKernelRoutes(b *config.BGP, log *slog.Logger) error {
	if b == nil || b.Mode != config.BGPExternal {
		return nil
	}
	k, err := bgp.NewKernel(bgp.KernelOptions{Table: b.RouteTable, Dummy: b.DummyInterface, NoCreate: true, Log: log})
	if errors.As(err, &netlink.LinkNotFoundError{}) {
		return nil // no interface, no address
	}
	if err != nil {
		return err
	}
	return k.RemoveAll()
}
