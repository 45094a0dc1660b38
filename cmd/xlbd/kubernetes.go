package main

import (
	"context"
	"log/slog"
	"net/netip"
	"time"

	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/controller"
	"github.com/xlbproject/xlb/internal/kube"
)

// kubeSyncWait bounds how long xlbd waits at start for the cluster to be
// read, so that its first commit holds the Services' services (a restart
// keeps their flows). Past it xlbd starts with the file's services and
// adds the cluster's when the API server answers.
const kubeSyncWait = 30 * time.Second

// startKubernetes, with a kubernetes section, connects to the cluster,
// reads it (within kubeSyncWait) and presets its services for the first
// commit; the returned run, called once the first config is committed,
// follows the cluster. Without the section it does nothing.
func startKubernetes(ctx context.Context, log *slog.Logger, cfg *config.Config, ctl *controller.Controller) (run func(), err error) {
	if cfg.Kubernetes == nil {
		return func() {}, nil
	}
	src, err := kube.New(kube.Options{Config: cfg, Log: log})
	if err != nil {
		return nil, err
	}
	src.Start(ctx)
	wctx, cancel := context.WithTimeout(ctx, kubeSyncWait)
	defer cancel()
	if src.WaitSynced(wctx) {
		d := src.Build()
		ctl.PresetKubernetes(d.Services, d.Checks)
		log.Info("cluster read", "services", len(d.Services))
	} else {
		log.Warn("the API server did not answer in time: starting with the file's services; the cluster's come when it answers", "waited", kubeSyncWait)
	}
	return func() { go src.Run(ctx, kubeSink{ctl}) }, nil
}

// kubeSink is the controller as the Kubernetes source sees it.
type kubeSink struct{ ctl *controller.Controller }

func (k kubeSink) SetKubernetes(ctx context.Context, d kube.Desired) (map[netip.Addr]string, error) {
	return k.ctl.SetKubernetes(ctx, d.Services, d.Checks)
}

func (k kubeSink) FileVIPs(ctx context.Context) ([]netip.Addr, error) { return k.ctl.FileVIPs(ctx) }

func (k kubeSink) SetKubernetesStatus(ctx context.Context, status string) error {
	return k.ctl.SetKubernetesStatus(ctx, status)
}
