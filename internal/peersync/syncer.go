package peersync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/state"
)

// Options configure New.
type Options struct {
	Node   string         // this node's name, in its hellos
	Listen netip.AddrPort // UDP
	Peers  []netip.AddrPort
	Key    []byte
	Log    *slog.Logger
	// HelloInterval is how often the node tells its peers its config
	// version and fingerprint (default 1 s); a peer not heard from for
	// three intervals is down.
	HelloInterval time.Duration
	// RefreshShift: a live flow is sent again every 2^RefreshShift
	// conntrack ticks (default datapath.SyncRefreshShift, ~17 s).
	RefreshShift uint32
}

// Syncer sends this node's decisions to its peers and installs theirs.
type Syncer struct {
	o     Options
	dp    *datapath.Datapath
	conn  *net.UDPConn
	peers map[netip.Addr]*peer // by address: a sender is known by its source address
	tab   atomic.Pointer[tables]
	seq   atomic.Uint64
	st    stats
	fpMu  sync.Mutex
	cache map[*state.Service]uint64
	bulk  chan netip.Addr // peers that finished a bulk copy to us
}

type peer struct {
	addr    netip.AddrPort
	bulking atomic.Bool // a bulk copy to it is under way
	mu      sync.Mutex
	win     replayWindow
	hello   Hello
	heard   time.Time // last hello
	bulkEnd time.Time // last bulk copy it sent us, complete
}

// ref is a (VIP, backend) pair: how nodes name a real to each other.
type ref struct {
	vip     state.VIPKey
	backend netip.Addr
}

// tables translate between this node's real ids and refs, for the
// committed state.
type tables struct {
	byRID   map[uint32]ref
	byRef   map[ref]uint32
	version string
	fp      Fingerprints
}

// New opens the sync socket. Nothing is sent before Run.
func New(dp *datapath.Datapath, o Options) (*Syncer, error) {
	if len(o.Key) < 32 {
		return nil, errors.New("sync key shorter than 32 bytes")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.HelloInterval == 0 {
		o.HelloInterval = time.Second
	}
	if o.RefreshShift == 0 {
		o.RefreshShift = datapath.SyncRefreshShift
	}
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(o.Listen))
	if err != nil {
		return nil, fmt.Errorf("node.sync.listen %s: %w", o.Listen, err)
	}
	_ = conn.SetReadBuffer(8 << 20) // bulk copies come in bursts
	_ = conn.SetWriteBuffer(8 << 20)
	s := &Syncer{o: o, dp: dp, conn: conn, peers: map[netip.Addr]*peer{},
		cache: map[*state.Service]uint64{}, bulk: make(chan netip.Addr, len(o.Peers)+1)}
	for _, p := range o.Peers {
		s.peers[p.Addr().Unmap()] = &peer{addr: p}
	}
	s.seq.Store(uint64(time.Now().UnixNano()))
	s.tab.Store(&tables{})
	return s, nil
}

// SetState gives the syncer the committed state and the config version it
// came from (called after every commit).
func (s *Syncer) SetState(st *state.State, version string) {
	t := &tables{byRID: make(map[uint32]ref, st.Reals.Len()), byRef: make(map[ref]uint32, st.Reals.Len()), version: version}
	keys := make(map[uint32]state.VIPKey, len(st.Services))
	for k, svc := range st.Services {
		keys[svc.SvcID] = k
	}
	for id, r := range st.Reals.All() {
		k, ok := keys[r.SvcID]
		if !ok {
			continue
		}
		rf := ref{vip: k, backend: r.Addr}
		t.byRID[id], t.byRef[rf] = rf, id
	}
	s.fpMu.Lock()
	t.fp = fingerprint(st, s.cache)
	s.fpMu.Unlock()
	s.tab.Store(t)
}

// Run turns the forwarder's decision records on and serves until ctx
// ends; then it turns them off and closes the socket.
func (s *Syncer) Run(ctx context.Context) error {
	r, err := s.dp.SyncReader()
	if err != nil {
		return err
	}
	if err := s.dp.SetSync(true, s.o.RefreshShift); err != nil {
		r.Close()
		return err
	}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); s.readRing(ctx, r) }()
	go func() { defer wg.Done(); s.receive() }()
	go func() { defer wg.Done(); s.hellos(ctx) }()
	<-ctx.Done()
	if err := s.dp.SetSync(false, s.o.RefreshShift); err != nil {
		s.o.Log.Warn("sync: records left on", "error", err)
	}
	r.Close()
	s.conn.Close()
	wg.Wait()
	return nil
}

// readRing batches the forwarder's decisions to the peers: what its record
// buffer holds is sent at once (the reader looks every millisecond).
func (s *Syncer) readRing(ctx context.Context, r *datapath.SyncReader) {
	buf := make([]datapath.SyncDecision, 0, 4096)
	flows := make([]Flow, 0, FlowsPerMessage)
	for ctx.Err() == nil {
		var err error
		buf, err = r.Read(buf[:0], 5*time.Millisecond)
		if err != nil {
			if !errors.Is(err, datapath.ErrSyncClosed) {
				s.o.Log.Error("sync: decision records", "error", err)
			}
			return
		}
		t := s.tab.Load()
		for _, d := range buf {
			rf, ok := t.byRID[d.RealID]
			if !ok {
				s.st.untranslated.Add(1)
				continue
			}
			f := Flow{VIP: rf.vip.Addr, Port: rf.vip.Port, Proto: rf.vip.Proto, Backend: rf.backend,
				Hash: d.Hash, HashBits: 64, State: d.State}
			if d.Kind == datapath.SyncTemplate {
				f.Template, f.Age = true, d.Hold
			}
			flows = append(flows, f)
			if len(flows) == FlowsPerMessage {
				s.sendFlows(flows, nil)
				flows = flows[:0]
			}
		}
		if len(flows) > 0 {
			s.sendFlows(flows, nil)
			flows = flows[:0]
		}
	}
}

// sendFlows sends one message of flows to p, or to every peer (p nil).
func (s *Syncer) sendFlows(flows []Flow, p *peer) {
	if s.send(&Message{Type: MsgFlows, Flows: flows}, p) {
		n := uint64(len(flows))
		if p == nil {
			n *= uint64(len(s.peers))
		}
		s.st.sent.Add(n)
	}
}

// send numbers, stamps, authenticates and sends m to p, or to every peer.
func (s *Syncer) send(m *Message, p *peer) bool {
	m.Seq, m.Time = s.seq.Add(1), time.Now().UnixNano()
	b, err := Encode(s.o.Key, m)
	if err != nil {
		s.o.Log.Error("sync: message not sent", "error", err)
		return false
	}
	ok := true
	for _, q := range s.peers {
		if p != nil && q != p {
			continue
		}
		if _, err := s.conn.WriteToUDPAddrPort(b, q.addr); err != nil {
			s.st.sendErrors.Add(1)
			ok = false
		} else {
			s.st.bytesSent.Add(uint64(len(b)))
		}
	}
	return ok
}

// hellos tells the peers this node's status every HelloInterval.
func (s *Syncer) hellos(ctx context.Context) {
	tick := time.NewTicker(s.o.HelloInterval)
	defer tick.Stop()
	for {
		t := s.tab.Load()
		s.send(&Message{Type: MsgHello, Hello: &Hello{Node: s.o.Node, ConfigVersion: t.version,
			Fingerprint: t.fp.Overall, Services: uint32(len(t.fp.Services))}}, nil)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
