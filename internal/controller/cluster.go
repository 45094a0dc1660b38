package controller

import (
	"context"

	"github.com/xlbproject/xlb/internal/config"
)

// CommitFrom commits cfg on the controller's loop (a config from the
// cluster's store) and records source as where the running config came
// from. On error nothing changes.
func (c *Controller) CommitFrom(ctx context.Context, cfg *config.Config, source string) error {
	return c.call(ctx, func() error {
		if err := c.Commit(cfg); err != nil {
			return err
		}
		c.info.source = source
		return nil
	})
}

// SetSource changes what the status says the running config came from
// (e.g. that the config store is unreachable).
func (c *Controller) SetSource(ctx context.Context, source string) error {
	return c.call(ctx, func() error {
		c.info.source = source
		return nil
	})
}
