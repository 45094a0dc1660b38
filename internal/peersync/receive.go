package peersync

import (
	"context"
	"errors"
	"net/netip"
	"time"

	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/maglev"
	"github.com/xlbproject/xlb/internal/state"
)

// Why a message was refused (the rejected counter's reason label).
const (
	RejectUnknownSender = "unknown_sender"
	RejectOversized     = "oversized"
	RejectMalformed     = "malformed"
	RejectVersion       = "version"
	RejectAuth          = "auth"
	RejectReplay        = "replay"
)

// receive reads the socket until it is closed.
func (s *Syncer) receive() {
	buf := make([]byte, MaxMessage+1)
	for {
		n, from, err := s.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return // closed by Run
		}
		s.handle(from.Addr().Unmap(), buf[:n], time.Now())
	}
}

// handle checks one datagram from addr and acts on it; a refused one is
// counted by reason and changes nothing.
func (s *Syncer) handle(addr netip.Addr, b []byte, now time.Time) {
	p := s.peers[addr]
	if p == nil {
		s.st.reject(RejectUnknownSender)
		return
	}
	if len(b) > MaxMessage {
		s.st.reject(RejectOversized)
		return
	}
	m, err := Decode(s.o.Key, b)
	switch {
	case errors.Is(err, ErrVersion):
		s.st.reject(RejectVersion)
		return
	case errors.Is(err, ErrAuth):
		s.st.reject(RejectAuth)
		return
	case err != nil:
		s.st.reject(RejectMalformed)
		return
	}
	if !fresh(m.Time, now) || !p.accept(m.Seq) {
		s.st.reject(RejectReplay)
		return
	}
	s.st.messages.Add(1)
	switch m.Type {
	case MsgFlows:
		s.install(m.Flows)
		s.installState(m.NATs, m.LBLCs)
		s.st.lagNS.Store(now.UnixNano() - m.Time)
	case MsgBulkRequest:
		if p.bulking.CompareAndSwap(false, true) {
			go s.sendBulk(p)
		}
	case MsgBulkEnd:
		p.mu.Lock()
		p.bulkEnd = now
		p.mu.Unlock()
		select {
		case s.bulk <- addr:
		default:
		}
	case MsgHello:
		if m.Hello != nil {
			p.mu.Lock()
			p.hello, p.heard = *m.Hello, now
			p.mu.Unlock()
		}
	}
}

func (p *peer) accept(seq uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.win.accept(seq)
}

// install puts a peer's flows into the connection table; a flow whose
// service or backend this node does not have is counted and skipped.
func (s *Syncer) install(flows []Flow) {
	t := s.tab.Load()
	in := make([]datapath.SyncInstall, 0, len(flows))
	for _, f := range flows {
		rid, ok := t.byRef[ref{vip: state.VIPKey{Addr: f.VIP, Port: f.Port, Proto: f.Proto}, backend: f.Backend}]
		if !ok {
			s.st.unknown.Add(1)
			continue
		}
		in = append(in, datapath.SyncInstall{Hash: f.Hash, HashBits: f.HashBits, RealID: rid,
			State: f.State, Proto: f.Proto, Age: f.Age, Template: f.Template})
	}
	s.st.received.Add(uint64(len(flows)))
	if len(in) == 0 {
		return
	}
	if err := s.dp.InstallSync(in); err != nil {
		s.o.Log.Error("sync: install", "error", err)
	}
}

// sendBulk sends p a copy of this node's connection table: every live
// entry once (the youngest of the CPUs' slices), paced, then MsgBulkEnd.
func (s *Syncer) sendBulk(p *peer) {
	defer p.bulking.Store(false)
	t := s.tab.Load()
	shift := s.dp.CTShift()
	type slot struct{ bucket, tag uint32 }
	best := map[slot]datapath.CTEntry{}
	err := s.dp.ScanConntrack(func(e datapath.CTEntry) bool {
		k := slot{e.Bucket, e.Tag}
		if o, ok := best[k]; !ok || e.Age < o.Age {
			best[k] = e
		}
		return true
	})
	if err != nil {
		s.o.Log.Error("sync: bulk copy not sent", "peer", p.addr, "error", err)
		return
	}
	flows := make([]Flow, 0, FlowsPerMessage)
	msgs := 0
	for k, e := range best {
		rf, ok := t.byRID[e.RealID]
		if !ok {
			continue
		}
		age := e.Age / datapath.CTTick
		flows = append(flows, Flow{VIP: rf.vip.Addr, Port: rf.vip.Port, Proto: rf.vip.Proto, Backend: rf.backend,
			Hash: uint64(k.tag)<<(64-maglev.CTTagBits) | uint64(k.bucket), HashBits: uint8(shift), State: e.State, Age: uint16(min(age, 0xffff))})
		if len(flows) == FlowsPerMessage {
			s.sendFlows(flows, p)
			s.st.bulkSent.Add(uint64(len(flows)))
			flows = flows[:0]
			if msgs++; msgs%32 == 0 {
				time.Sleep(time.Millisecond) // the receiver's socket buffer
			}
		}
	}
	if len(flows) > 0 {
		s.sendFlows(flows, p)
		s.st.bulkSent.Add(uint64(len(flows)))
	}
	nats, lblcs := s.bulkState(p, t)
	s.send(&Message{Type: MsgBulkEnd}, p)
	s.o.Log.Info("sync: bulk copy sent", "peer", p.addr, "flows", len(best), "nat", nats, "lblc", lblcs)
}

// BulkSync asks every peer for a copy of its connection table and waits
// until all have sent theirs or timeout passes (a peer that is down cannot
// answer: the node then starts with what the others sent). It returns how
// many peers answered. xlbd calls it before announcing its VIPs.
func (s *Syncer) BulkSync(ctx context.Context, timeout time.Duration) int {
	if len(s.peers) == 0 {
		return 0
	}
	for len(s.bulk) > 0 {
		<-s.bulk
	}
	s.send(&Message{Type: MsgBulkRequest}, nil)
	done := map[netip.Addr]bool{}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for len(done) < len(s.peers) {
		select {
		case a := <-s.bulk:
			done[a] = true
		case <-deadline.C:
			return len(done)
		case <-ctx.Done():
			return len(done)
		}
	}
	return len(done)
}
