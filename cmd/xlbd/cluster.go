package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/xlbproject/xlb/internal/clusterconfig"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/controller"
)

// loadConfig reads the config from the file, or, for
// --config etcd://HOST:PORT[,HOST:PORT]/KEY, from etcd composed with the
// node file (src is then the etcd source, watched once xlbd runs).
func loadConfig(ctx context.Context, log *slog.Logger, path, nodeFile, cache string) (*config.Config, *clusterconfig.Source, error) {
	if !clusterconfig.IsURL(path) {
		cfg, err := config.Load(path)
		return cfg, nil, err
	}
	loc, err := clusterconfig.ParseURL(path)
	if err != nil {
		return nil, nil, fmt.Errorf("--config: %w", err)
	}
	if cache == "" {
		cache = filepath.Join("/var/lib/xlb", "cluster-"+strings.TrimSuffix(filepath.Base(nodeFile), filepath.Ext(nodeFile))+".yaml")
	}
	src, err := clusterconfig.Open(clusterconfig.Options{Location: loc, NodeFile: nodeFile, Cache: cache, Log: log})
	if err != nil {
		return nil, nil, err
	}
	cfg, err := src.Load(ctx)
	if err != nil {
		src.Close()
		return nil, nil, err
	}
	return cfg, src, nil
}

// runCluster records the first commit and watches the key (nothing
// without an etcd source).
func runCluster(ctx context.Context, src *clusterconfig.Source, cfg *config.Config, ctl *controller.Controller) {
	if src == nil {
		return
	}
	src.Committed(ctx, cfg, src.Status().Revision)
	go src.Run(ctx, ctl)
}
