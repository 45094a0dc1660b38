package main

import (
	"errors"
	"log/slog"

	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/tracer"
)

// relayTraces sends each packet tracer record of the forwarder
// (docs/ARCHITECTURE.md, Packet tracer) to the receiver its marker named, as
// one UDP datagram of JSON
// from this node; XDP cannot send a second packet itself. The forwarder
// limits the records' rate (node.trace_rate). Returns when r is closed.
func relayTraces(log *slog.Logger, r *datapath.TraceReader, node string) {
	for {
		e, err := r.Read()
		if errors.Is(err, datapath.ErrTraceClosed) {
			return
		}
		if err != nil {
			log.Warn("packet tracer", "error", err)
			continue
		}
		if !tracer.Allowed(e.Receiver.Addr()) {
			log.Debug("packet tracer: receiver refused", "receiver", e.Receiver)
			continue
		}
		rec := tracer.Record{
			Version: tracer.RecordVersion, ID: e.ID, Node: node, CPU: e.CPU, Time: e.Time,
			Proto: tracer.ProtoName(e.Proto), Src: e.Src.String(), VIP: e.VIP.String(),
			Conntrack: "miss", Verdict: tracer.VerdictName(e.Verdict), Reason: e.Reason,
		}
		if e.Backend.IsValid() {
			rec.Backend = e.Backend.String()
		}
		if e.ConntrackHit {
			rec.Conntrack = "hit"
		}
		if err := tracer.Send(rec, e.Receiver); err != nil {
			log.Debug("packet tracer", "error", err)
		}
	}
}
