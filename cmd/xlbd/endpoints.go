package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"syscall"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/config"
	"github.com/xlbproject/xlb/internal/controller"
	xmetrics "github.com/xlbproject/xlb/internal/metrics"
	"github.com/xlbproject/xlb/internal/statuspage"
)

// flagValue returns the flag's value when it was given, else nil.
func flagValue(name, v string) *string {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	if !set {
		return nil
	}
	return &v
}

// endpoints resolves the instance's API socket and metrics address: the
// flag when given, else the config's node key, else the default (the
// socket from node.name, so instances of one host differ; the metrics
// port is the same for all: the default is skipped when taken).
func endpoints(n config.Node, sockFlag, metricsFlag *string) (socket, metrics string, metricsDefault bool) {
	switch {
	case sockFlag != nil:
		socket = *sockFlag
	case n.APISocket != "":
		socket = n.APISocket
	default:
		socket = api.SocketPath(n.Name)
	}
	switch {
	case metricsFlag != nil:
		metrics = *metricsFlag
	case n.MetricsAddr != "":
		metrics = n.MetricsAddr
	default:
		metrics, metricsDefault = xmetrics.DefaultAddr, true
	}
	if metrics == config.MetricsOff {
		metrics = ""
	}
	return socket, metrics, metricsDefault
}

// serveMetrics starts the metrics server when one is configured. The
// default address taken (another instance of this host has it) is no
// failure: xlbd runs without metrics and says so (log, xlbctl status).
func serveMetrics(ctx context.Context, log *slog.Logger, apiView *controller.API, so serveOpts) (*xmetrics.Metrics, error) {
	if so.metrics == "" {
		apiView.SetMetrics("", "disabled (node.metrics_addr: off, or --metrics-addr \"\")")
		return nil, nil
	}
	mo := xmetrics.Options{Addr: so.metrics, Log: log}
	var page *statuspage.Page
	if so.statusPage {
		page = statuspage.New(api.NewService(apiView), statuspage.Options{Log: log})
		mo.Page = page.Handler()
	}
	m := xmetrics.New(apiView, mo)
	err := m.Listen()
	if err != nil && so.metricsDefault && errors.Is(err, syscall.EADDRINUSE) {
		note := fmt.Sprintf("the default address %s is in use (another xlbd instance on this host?): set node.metrics_addr to serve this instance's metrics", so.metrics)
		log.Warn("metrics not served: "+note, "error", err)
		apiView.SetMetrics("", note)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	apiView.SetMetrics(so.metrics, "")
	go m.Serve(ctx)
	if page != nil {
		go page.Run(ctx)
		log.Info("status page served", "url", "http://"+so.metrics+"/")
	}
	return m, nil
}
