package peersync

import (
	"net/netip"
	"time"

	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/state"
)

// outbox batches the records read from the forwarder into messages of
// one kind each, sent to every peer when full or flushed.
type outbox struct {
	flows []Flow
	nats  []NAT
	lblcs []LBLC
}

func (o *outbox) flow(s *Syncer, f Flow) {
	if o.flows = append(o.flows, f); len(o.flows) == FlowsPerMessage {
		s.sendFlows(o.flows, nil)
		o.flows = o.flows[:0]
	}
}

func (o *outbox) nat(s *Syncer, n NAT) {
	if o.nats = append(o.nats, n); len(o.nats) == NATsPerMessage {
		s.sendState(&Message{Type: MsgFlows, NATs: o.nats}, nil)
		o.nats = o.nats[:0]
	}
}

func (o *outbox) lblc(s *Syncer, l LBLC) {
	if o.lblcs = append(o.lblcs, l); len(o.lblcs) == LBLCsPerMessage {
		s.sendState(&Message{Type: MsgFlows, LBLCs: o.lblcs}, nil)
		o.lblcs = o.lblcs[:0]
	}
}

// flush sends what is batched.
func (o *outbox) flush(s *Syncer) {
	if len(o.flows) > 0 {
		s.sendFlows(o.flows, nil)
		o.flows = o.flows[:0]
	}
	if len(o.nats) > 0 {
		s.sendState(&Message{Type: MsgFlows, NATs: o.nats}, nil)
		o.nats = o.nats[:0]
	}
	if len(o.lblcs) > 0 {
		s.sendState(&Message{Type: MsgFlows, LBLCs: o.lblcs}, nil)
		o.lblcs = o.lblcs[:0]
	}
}

// sendState sends one message of NAT and lblc records, counted as sent
// records like flows.
func (s *Syncer) sendState(m *Message, p *peer) {
	if s.send(m, p) {
		n := uint64(len(m.NATs) + len(m.LBLCs))
		if p == nil {
			n *= uint64(len(s.peers))
		}
		s.st.sent.Add(n)
	}
}

// natOf is the NAT record of decision d, whose real is rf.
func natOf(d datapath.SyncDecision, rf ref) NAT {
	c := netip.AddrFrom16(d.Client)
	if rf.vip.Addr.Is4() {
		c = netip.AddrFrom4([4]byte(d.Client[:4]))
	}
	return NAT{VIP: rf.vip.Addr, Port: rf.vip.Port, Proto: rf.vip.Proto, Backend: rf.backend, Client: c,
		ClientPort: d.ClientPort(), VIPPort: d.VIPPort()}
}

// outLBLC reads service svc's lblc entry for its VIP (rf's) and batches
// it with its backends' addresses (unknown ones left out).
func (s *Syncer) outLBLC(o *outbox, t *tables, svc uint32, rf ref) {
	reals, used, mod, found, err := s.dp.LBLCTicks(svc, rf.vip.Addr)
	if err != nil {
		s.o.Log.Warn("sync: lblc entry not read", "service", rf.vip, "error", err)
		return
	}
	if !found {
		return // expired and evicted meanwhile
	}
	l := LBLC{VIP: rf.vip.Addr, Port: rf.vip.Port, Proto: rf.vip.Proto, Used: used, Modified: mod}
	for _, id := range reals {
		if b, ok := t.byRID[id]; ok && len(l.Backends) < lblcMax {
			l.Backends = append(l.Backends, b.backend)
		}
	}
	if len(l.Backends) > 0 {
		o.lblc(s, l)
	}
}

// installState puts a peer's NAT flows and lblc entries into this node's
// maps; a record whose service or backends this node does not have is
// counted (unknown) and skipped. This node's newer state is kept (the
// data plane's kept counter).
func (s *Syncer) installState(nats []NAT, lblcs []LBLC) {
	if len(nats)+len(lblcs) == 0 {
		return
	}
	t := s.tab.Load()
	var ni []datapath.SyncNATInstall
	var li []datapath.SyncLBLCInstall
	for _, n := range nats {
		rid, ok := t.byRef[ref{vip: state.VIPKey{Addr: n.VIP, Port: n.Port, Proto: n.Proto}, backend: n.Backend}]
		if !ok {
			s.st.unknown.Add(1)
			continue
		}
		ni = append(ni, datapath.SyncNATInstall{RealID: rid, Proto: n.Proto, Client: n.Client, ClientPort: n.ClientPort,
			VIP: n.VIP, VIPPort: n.VIPPort, Age: uint32(n.Age)})
	}
	for _, l := range lblcs {
		k := state.VIPKey{Addr: l.VIP, Port: l.Port, Proto: l.Proto}
		in := datapath.SyncLBLCInstall{SvcID: t.svc[k], Dst: l.VIP, Used: l.Used, Modified: l.Modified}
		for _, b := range l.Backends {
			if rid, ok := t.byRef[ref{vip: k, backend: b}]; ok {
				in.Reals = append(in.Reals, rid)
			}
		}
		if in.SvcID == 0 || len(in.Reals) == 0 {
			s.st.unknown.Add(1)
			continue
		}
		li = append(li, in)
	}
	s.st.received.Add(uint64(len(nats) + len(lblcs)))
	if len(ni)+len(li) == 0 {
		return
	}
	if err := s.dp.InstallSyncState(ni, li); err != nil {
		s.o.Log.Error("sync: install NAT and lblc state", "error", err)
	}
}

// bulkState sends p this node's NAT reply entries and lblc entries (a
// bulk copy's part after the connections), paced like them; it returns
// how many of each it sent.
func (s *Syncer) bulkState(p *peer, t *tables) (nats, lblcs int) {
	var m Message
	msgs := 0
	flush := func(force bool) {
		if len(m.NATs) < NATsPerMessage && len(m.LBLCs) < LBLCsPerMessage && !force {
			return
		}
		if len(m.NATs) > 0 {
			s.sendState(&Message{Type: MsgFlows, NATs: m.NATs}, p)
		}
		if len(m.LBLCs) > 0 {
			s.sendState(&Message{Type: MsgFlows, LBLCs: m.LBLCs}, p)
		}
		s.st.bulkSent.Add(uint64(len(m.NATs) + len(m.LBLCs)))
		if msgs++; msgs%16 == 0 {
			time.Sleep(time.Millisecond) // the receiver's socket buffer
		}
		m.NATs, m.LBLCs = m.NATs[:0], m.LBLCs[:0]
	}
	err := s.dp.NATEntries(func(e datapath.NATEntry) bool {
		if rf, ok := t.byRID[e.RealID]; ok && rf.backend == e.Backend {
			m.NATs = append(m.NATs, NAT{VIP: rf.vip.Addr, Port: rf.vip.Port, Proto: rf.vip.Proto, Backend: e.Backend,
				Client: e.Client, ClientPort: e.ClientPort, VIPPort: e.VIPPort, Age: e.Age})
			nats++
			flush(false)
		}
		return true
	})
	if err == nil {
		err = s.dp.LBLCAll(func(svc uint32, dst netip.Addr, reals []uint32, used, mod uint32) bool {
			k, ok := t.vipOf[svc]
			if !ok || k.Addr != dst {
				return true
			}
			l := LBLC{VIP: k.Addr, Port: k.Port, Proto: k.Proto, Used: used, Modified: mod}
			for _, id := range reals {
				if b, ok := t.byRID[id]; ok && len(l.Backends) < lblcMax {
					l.Backends = append(l.Backends, b.backend)
				}
			}
			if len(l.Backends) > 0 {
				m.LBLCs = append(m.LBLCs, l)
				lblcs++
				flush(false)
			}
			return true
		})
	}
	flush(true)
	if err != nil {
		s.o.Log.Error("sync: bulk copy of NAT and lblc entries incomplete", "peer", p.addr, "error", err)
	}
	return nats, lblcs
}
