// Package controller owns every change to the data plane: one reconcile
// loop turns a validated config into a planned state (Plan, pure) and
// commits it through the datapath, on start and on every reload.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/datapath"
)

// NeighbourInterval is how often backends' next hops are re-checked.
const NeighbourInterval = 10 * time.Second

// ErrRestartRequired is wrapped when a reload changes a setting that only a
// restart can apply.
var ErrRestartRequired = errors.New("setting cannot change without a restart")

// Controller commits configs to one datapath. Its methods are called from
// one goroutine (Run's); Commit before Run is fine.
type Controller struct {
	log    *slog.Logger
	dp     *datapath.Datapath
	limits Limits
	path   string
	cfg    *config.Config
	state  *datapath.State
}

// New returns a controller for dp that reloads its config from path.
func New(dp *datapath.Datapath, path string, lim Limits, log *slog.Logger) *Controller {
	return &Controller{log: log, dp: dp, limits: lim, path: path, state: dp.Snapshot()}
}

// Commit validates that cfg can be applied to the running node, plans it
// and applies it. On error the running state is unchanged, except for a
// failure inside the kernel (reported), where each service is still on a
// complete table, old or new.
func (c *Controller) Commit(cfg *config.Config) error {
	if c.cfg != nil {
		if err := immutable(c.cfg.Node, cfg.Node); err != nil {
			return err
		}
	}
	start := time.Now()
	st, ps, err := Plan(cfg.Desired(), c.state, c.limits)
	if err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	planned := time.Since(start)
	as, err := c.dp.Apply(st)
	if err != nil {
		c.state = c.dp.Snapshot()
		return fmt.Errorf("apply: %w", err)
	}
	c.cfg, c.state = cfg, st
	c.log.Info("config committed",
		"services", ps.Services, "reals", ps.Reals,
		"tables_replaced", as.TablesReplaced, "table_entries_changed", as.TableEntries,
		"reals_written", as.RealsWritten, "services_added", as.ServicesAdded, "services_removed", as.ServicesRemoved,
		"plan", planned.Round(time.Microsecond), "apply", as.Duration.Round(time.Microsecond))
	c.keepNeighbours()
	return nil
}

func immutable(old, new config.Node) error {
	switch {
	case old.Name != new.Name:
		return fmt.Errorf("node.name %q -> %q: %w", old.Name, new.Name, ErrRestartRequired)
	case old.Interface != new.Interface:
		return fmt.Errorf("node.interface %q -> %q: %w", old.Interface, new.Interface, ErrRestartRequired)
	case old.ConntrackEntries != new.ConntrackEntries:
		return fmt.Errorf("node.conntrack_entries %d -> %d: %w", old.ConntrackEntries, new.ConntrackEntries, ErrRestartRequired)
	case old.XDPMode != new.XDPMode:
		return fmt.Errorf("node.xdp_mode %s -> %s: %w", old.XDPMode, new.XDPMode, ErrRestartRequired)
	}
	return nil
}

// Reload reads the config file again and commits it. A file that does not
// parse or validate changes nothing.
func (c *Controller) Reload() error {
	cfg, err := config.Load(c.path)
	if err != nil {
		return err
	}
	return c.Commit(cfg)
}

// Run serves reload requests and keeps neighbours resolved until ctx ends.
func (c *Controller) Run(ctx context.Context, reload <-chan struct{}) {
	tick := time.NewTicker(NeighbourInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-reload:
			if err := c.Reload(); err != nil {
				c.log.Error("reload rejected; still running the previous config", "config", c.path, "error", err)
			}
		case <-tick.C:
			c.keepNeighbours()
		}
	}
}

// keepNeighbours keeps the next hop of every backend resolved, so the
// forwarder's FIB lookup has a MAC for the first packet of any flow.
func (c *Controller) keepNeighbours() {
	seen := map[netip.Addr]bool{}
	for _, r := range c.state.Reals {
		if seen[r.Addr] {
			continue
		}
		seen[r.Addr] = true
		nh, err := datapath.ResolveNextHop(r.Addr)
		if err == nil {
			err = datapath.KeepNeighbour(nh)
		}
		if err != nil {
			c.log.Warn("backend next hop not kept resolved; first packets may use the fallback gateway", "backend", r.Addr, "error", err)
		}
	}
}

// State returns the last committed state.
func (c *Controller) State() *datapath.State { return c.state }
