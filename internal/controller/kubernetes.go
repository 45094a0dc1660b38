package controller

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/xlbproject/xlb/internal/config"
)

// Services from Kubernetes (package kube) are programmed beside the
// file's: the loop keeps the last set it was given and merges it into
// every commit, so a reload of the file keeps them and theirs keeps the
// file's. A VIP that a file service has is refused to Kubernetes.

// external is the last set of services from Kubernetes.
type external struct {
	services []config.DesiredService
	checks   map[string]config.HealthCheck
}

// SetKubernetes makes services (with the health checks they name) the
// services from Kubernetes and commits them with the file's. It returns
// the VIPs refused because a file service has them, with the reason; on
// error nothing changed.
func (c *Controller) SetKubernetes(ctx context.Context, services []config.DesiredService, checks map[string]config.HealthCheck) (map[netip.Addr]string, error) {
	var refused map[netip.Addr]string
	err := c.call(ctx, func() error {
		if c.base == nil {
			return fmt.Errorf("no config committed yet")
		}
		prev := c.ext
		c.ext = &external{services: services, checks: checks}
		merged, r := c.merged(c.base)
		if err := c.mon.Update(merged.HealthTargets()); err != nil {
			c.ext = prev
			return fmt.Errorf("health checks: %w", err)
		}
		if err := c.apply(c.withOverrides(merged), "", "kubernetes"); err != nil {
			c.ext = prev
			if m, _ := c.merged(c.base); m != nil {
				_ = c.mon.Update(m.HealthTargets())
			}
			return err
		}
		refused = r
		c.keepNeighbours()
		return nil
	})
	return refused, err
}

// merged returns d with the services from Kubernetes added (d is not
// changed), and the VIPs refused to them.
func (c *Controller) merged(d *config.Desired) (*config.Desired, map[netip.Addr]string) {
	if c.ext == nil || (len(c.ext.services) == 0 && len(c.ext.checks) == 0) {
		return d, nil
	}
	file := map[netip.Addr]string{}
	for _, s := range d.Services {
		file[s.VIP] = s.Name
	}
	out := *d
	out.Services = slices.Grow(slices.Clone(d.Services), len(c.ext.services))
	out.HealthChecks = maps.Clone(d.HealthChecks)
	if out.HealthChecks == nil {
		out.HealthChecks = map[string]config.HealthCheck{}
	}
	var refused map[netip.Addr]string
	for _, s := range c.ext.services {
		if name, taken := file[s.VIP]; taken {
			if refused == nil {
				refused = map[netip.Addr]string{}
			}
			refused[s.VIP] = fmt.Sprintf("is the VIP of the config file's service %s", name)
			continue
		}
		out.Services = append(out.Services, s)
	}
	for n, h := range c.ext.checks {
		out.HealthChecks[n] = h
	}
	return &out, refused
}

// FileVIPs are the addresses of the file's services.
func (c *Controller) FileVIPs(ctx context.Context) ([]netip.Addr, error) {
	var out []netip.Addr
	err := c.call(ctx, func() error {
		if c.base != nil {
			for _, s := range c.base.Services {
				out = append(out, s.VIP)
			}
		}
		return nil
	})
	return out, err
}

// SetKubernetesStatus sets what the status says of the Kubernetes
// source (after the config's source).
func (c *Controller) SetKubernetesStatus(ctx context.Context, status string) error {
	return c.call(ctx, func() error {
		c.info.kubernetes = status
		return nil
	})
}

// PresetKubernetes sets the services from Kubernetes that the first
// Commit merges (call it before Run, once the source has read the
// cluster: a restart then commits the Services with the file's, and
// their flows keep their backends).
func (c *Controller) PresetKubernetes(services []config.DesiredService, checks map[string]config.HealthCheck) {
	c.ext = &external{services: services, checks: checks}
}

// sourceText is the config's source, with the Kubernetes source's state.
func (c *Controller) sourceText() string {
	if c.info.kubernetes == "" {
		return c.info.source
	}
	return c.info.source + "; kubernetes: " + c.info.kubernetes
}
