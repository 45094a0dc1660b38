package peersync

import (
	"fmt"
	"net/netip"
	"sort"
	"sync/atomic"
	"time"

	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/state"
)

type stats struct {
	sent, received, unknown, untranslated, messages atomic.Uint64
	bulkSent, bytesSent, sendErrors                 atomic.Uint64
	lagNS                                           atomic.Int64
	rejected                                        [6]atomic.Uint64 // by rejectReasons
}

// RejectReasons are the rejected counter's reasons, in order.
var RejectReasons = []string{RejectUnknownSender, RejectOversized, RejectMalformed, RejectVersion, RejectAuth, RejectReplay}

func (s *stats) reject(reason string) {
	for i, r := range RejectReasons {
		if r == reason {
			s.rejected[i].Add(1)
		}
	}
}

// Stats are the syncer's counters.
type Stats struct {
	Sent         uint64 // flow records sent (once per peer)
	Received     uint64 // flow records received in accepted messages
	Unknown      uint64 // received for a service or backend this node does not have
	Untranslated uint64 // decisions of reals no longer in the committed state (not sent)
	Messages     uint64 // accepted messages
	BulkSent     uint64 // flow records sent in bulk copies
	BytesSent    uint64 // datagram bytes sent (UDP payload)
	SendErrors   uint64
	Rejected     map[string]uint64 // messages refused, by reason
	Lag          time.Duration     // receive time - send time of the last flow message
}

// Stats returns the counters.
func (s *Syncer) Stats() Stats {
	st := Stats{Sent: s.st.sent.Load(), Received: s.st.received.Load(), Unknown: s.st.unknown.Load(),
		Untranslated: s.st.untranslated.Load(), Messages: s.st.messages.Load(), BulkSent: s.st.bulkSent.Load(),
		BytesSent: s.st.bytesSent.Load(), SendErrors: s.st.sendErrors.Load(),
		Lag: time.Duration(s.st.lagNS.Load()), Rejected: map[string]uint64{}}
	for i, r := range RejectReasons {
		st.Rejected[r] = s.st.rejected[i].Load()
	}
	return st
}

// PeerStatus is one peer as this node sees it.
type PeerStatus struct {
	Addr          netip.AddrPort
	Node          string // from its last hello; "" if never heard
	ConfigVersion string
	Fingerprint   uint64
	LastHello     time.Time
	// State: "up" (a hello within three intervals), "down" (heard
	// before, not lately) or "unknown" (never heard).
	State    string
	Mismatch bool // up, and its fingerprint differs from this node's
	BulkEnd  time.Time
}

// Self is this node's own part of the status.
type Self struct {
	Node          string
	ConfigVersion string
	Fingerprints  Fingerprints
}

// Self returns this node's version and fingerprints.
func (s *Syncer) Self() Self {
	t := s.tab.Load()
	return Self{Node: s.o.Node, ConfigVersion: t.version, Fingerprints: t.fp}
}

// Peers returns every configured peer's status, in address order.
func (s *Syncer) Peers() []PeerStatus {
	own := s.tab.Load().fp.Overall
	now := time.Now()
	out := make([]PeerStatus, 0, len(s.peers))
	for _, p := range s.peers {
		p.mu.Lock()
		ps := PeerStatus{Addr: p.addr, Node: p.hello.Node, ConfigVersion: p.hello.ConfigVersion,
			Fingerprint: p.hello.Fingerprint, LastHello: p.heard, BulkEnd: p.bulkEnd, State: "unknown"}
		p.mu.Unlock()
		switch {
		case ps.LastHello.IsZero():
		case now.Sub(ps.LastHello) <= 3*s.o.HelloInterval:
			ps.State = "up"
			ps.Mismatch = ps.Fingerprint != own
		default:
			ps.State = "down"
		}
		out = append(out, ps)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr.Compare(out[j].Addr) < 0 })
	return out
}

// ServiceFingerprint returns the fingerprint of one service's table.
func (f Fingerprints) ServiceFingerprint(k state.VIPKey) (uint64, bool) {
	h, ok := f.Services[k]
	return h, ok
}

// ClusterInfo is the syncer's part of the node's status.
func (s *Syncer) ClusterInfo() *api.ClusterInfo {
	self := s.Self()
	st := s.Stats()
	ci := &api.ClusterInfo{Version: self.ConfigVersion, Fingerprint: fmt.Sprintf("%016x", self.Fingerprints.Overall),
		Listen: s.o.Listen.String(), Sent: st.Sent, Received: st.Received, Lag: st.Lag}
	for _, n := range st.Rejected {
		ci.Rejected += n
	}
	if dc, err := s.dp.SyncCounters(); err == nil {
		ci.Applied = dc.Applied
	}
	keys := make([]state.VIPKey, 0, len(self.Fingerprints.Services))
	for k := range self.Fingerprints.Services {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Compare(keys[j]) < 0 })
	for _, k := range keys {
		ci.Services = append(ci.Services, api.ServiceFingerprint{VIP: k.String(), Fingerprint: fmt.Sprintf("%016x", self.Fingerprints.Services[k])})
	}
	for _, p := range s.Peers() {
		sp := api.SyncPeer{Addr: p.Addr.String(), Node: p.Node, Version: p.ConfigVersion, State: p.State,
			Mismatch: p.Mismatch, LastHello: p.LastHello}
		if !p.LastHello.IsZero() {
			sp.Fingerprint = fmt.Sprintf("%016x", p.Fingerprint)
		}
		ci.Peers = append(ci.Peers, sp)
	}
	return ci
}
