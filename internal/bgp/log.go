package bgp

import (
	"context"
	"log/slog"
	"sync/atomic"
)

// gobgpHandler passes GoBGP's records to xlbd's handler, except the one
// error GoBGP logs when BgpServer.Stop follows a graceful StopBgp ("failed to
// stop BGP server": the BGP part is already down, Stop only has the BFD and
// gRPC parts left to end). Stop(true) sets expectStopped just before that
// call, so a real failure anywhere else is still logged.
type gobgpHandler struct {
	slog.Handler
	expectStopped *atomic.Bool
}

const gobgpStopFailedMsg = "failed to stop BGP server"

func (h gobgpHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.expectStopped.Load() && r.Message == gobgpStopFailedMsg {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h gobgpHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return gobgpHandler{h.Handler.WithAttrs(attrs), h.expectStopped}
}

func (h gobgpHandler) WithGroup(name string) slog.Handler {
	return gobgpHandler{h.Handler.WithGroup(name), h.expectStopped}
}
