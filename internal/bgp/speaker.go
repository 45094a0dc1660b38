// Package bgp is xlbd's embedded BGP speaker (GoBGP v4 as a library): it
// announces the node's VIPs as host routes to the configured routers, which
// spread traffic across nodes by ECMP (docs/BGP.md; Maglev paper 2.2).
//
// The speaker holds a desired state — the prefixes to announce and where the
// node stands in a drain — and one reconcile step turns it into GoBGP RIB
// changes; the caller never sees paths or sessions. Sessions use graceful
// restart (RFC 4724) so a daemon restart keeps the routes at the routers,
// and GracefulShutdown (RFC 8326) takes the node out of service gently.
//
// On the wire, per operation:
//
//	SetAnnounced   UPDATE per new prefix (origin IGP, next hop self or the
//	               configured one, IPv6 in MP_REACH_NLRI); withdrawals for
//	               prefixes no longer wanted.
//	GracefulShutdown  UPDATE of every prefix again with community 65535:0,
//	               then, after ShutdownWait, withdrawals of all of them.
//	Undrain        UPDATE of every prefix without the community.
//	Stop(false)    withdrawals of every prefix, then NOTIFICATION Cease /
//	               Peer De-configured (6/3) and close: the peer drops our
//	               routes at once.
//	Stop(true)     the TCP connection closes (FIN, or RST when the peer's
//	               KEEPALIVE is unread), no NOTIFICATION, no withdrawal: a
//	               peer that negotiated graceful restart keeps our routes,
//	               marked stale, for GracefulRestartTime; without graceful
//	               restart it drops them. A killed process looks the same.
//	Start with Restarting  OPEN with the R bit and per-family F bit; after
//	               the peer's End-of-RIB (or the deferral time): our whole
//	               table, then End-of-RIB; the peer then drops stale routes
//	               not announced again. Routes announced again never leave
//	               the peer's forwarding table.
package bgp

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	bgppkt "github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
)

// importPolicy is the name of the global import policy: accept the paths we
// originate, reject everything learned from peers, so routes from one router
// are never passed to another (an LB node must not become a transit) and
// the RIB stays small whatever the routers send.
const importPolicy = "xlb-local-only"

// Speaker is one embedded BGP speaker. Its methods are safe for concurrent
// use. A Speaker runs once: after Stop, make a new one.
type Speaker struct {
	cfg Config
	log *slog.Logger

	expectStopped atomic.Bool // see gobgpHandler

	mu      sync.Mutex
	srv     *server.BgpServer // nil until Start
	stopped bool

	desired   map[netip.Prefix]struct{} // what SetAnnounced asked for
	announced rib                       // what GoBGP's RIB holds
	resync    bool                      // a RIB update failed: announced is a superset, re-send all

	mode       drainMode
	drainSince time.Time     // when the current drain began
	drainEnd   chan struct{} // closed when the current drain ends (withdrawn, undrained, stopped)
}

// PeerStatus is the state of one session, for status output.
type PeerStatus struct {
	Addr netip.Addr
	ASN  uint32
	// State is the BGP FSM state: idle, connect, active, opensent,
	// openconfirm or established; "stopped" when the speaker is not running.
	State string
	// LocalAddr is the local address of the session (the next hop "self").
	LocalAddr netip.Addr
	// Uptime is the time since the session was established (0 when it is
	// not).
	Uptime time.Duration
	// Received counts prefixes the peer sent (they are all rejected by the
	// import policy); Advertised the prefixes we send it.
	Received, Advertised uint64
	// GracefulRestart is true when both sides advertised graceful restart,
	// so a Stop(true) keeps our routes at this peer.
	GracefulRestart bool
}

// New validates cfg and returns a speaker that is not yet running. log may be
// nil (slog.Default). IPv4-mapped IPv6 addresses in cfg are taken as IPv4.
func New(cfg Config, log *slog.Logger) (*Speaker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	cfg.RouterID = cfg.RouterID.Unmap()
	cfg.NextHop4 = cfg.NextHop4.Unmap()
	cfg.Peers = slices.Clone(cfg.Peers)
	for i := range cfg.Peers {
		cfg.Peers[i].Addr = cfg.Peers[i].Addr.Unmap()
	}
	return &Speaker{
		cfg:       cfg,
		log:       log,
		desired:   map[netip.Prefix]struct{}{},
		announced: rib{},
	}, nil
}

// Start starts GoBGP, installs the import policy, puts the prefixes already
// passed to SetAnnounced into the RIB and then adds the peers, so the first
// UPDATE each peer gets is complete (which Config.Restarting relies on).
// Sessions come up in the background: GoBGP dials each peer after 1.5–2 s and
// every 4–5 s while it is down, and accepts connections from configured peers
// on ListenPort. Sockets are made by GoBGP's own goroutines, in the network
// namespace of the process (a thread switched with setns is not inherited).
// It returns ErrStarted or ErrStopped when called twice or after Stop.
func (s *Speaker) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return ErrStopped
	}
	if s.srv != nil {
		return ErrStarted
	}
	lg := slog.New(gobgpHandler{s.log.Handler(), &s.expectStopped}).With("component", "gobgp")
	srv := server.NewBgpServer(server.LoggerOption(lg, nil))
	go srv.Serve()
	fail := func(err error) error {
		s.expectStopped.Store(false)
		srv.Stop()
		return err
	}
	port := s.cfg.ListenPort
	if port <= 0 {
		port = -1 // GoBGP: negative = do not listen (0 would mean 179)
	}
	err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn:        s.cfg.ASN,
		RouterId:   s.cfg.RouterID.String(),
		ListenPort: port,
	}})
	if err != nil {
		hint := ""
		if port > 0 {
			hint = fmt.Sprintf(" (is another BGP daemon listening on port %d? set listen_port: 0 to only dial out)", port)
		}
		return fail(fmt.Errorf("start bgp: %w%s", err, hint))
	}
	if err := installImportPolicy(ctx, srv); err != nil {
		return fail(err)
	}
	s.srv = srv
	if err := s.reconcileLocked(); err != nil {
		s.srv = nil
		return fail(err)
	}
	for _, p := range s.cfg.Peers {
		if err := srv.AddPeer(ctx, &api.AddPeerRequest{Peer: s.cfg.apiPeer(p)}); err != nil {
			s.srv = nil
			return fail(fmt.Errorf("add bgp peer %v: %w", p.Addr, err))
		}
	}
	s.log.Info("bgp speaker started", "asn", s.cfg.ASN, "router_id", s.cfg.RouterID,
		"listen_port", max(s.cfg.ListenPort, 0), "peers", len(s.cfg.Peers),
		"graceful_restart", s.cfg.GracefulRestartTime, "restarting", s.cfg.Restarting && s.cfg.GracefulRestartTime > 0,
		"announced", len(s.announced))
	return nil
}

// installImportPolicy makes the global import policy accept locally
// originated paths only (see importPolicy).
func installImportPolicy(ctx context.Context, srv *server.BgpServer) error {
	err := srv.AddPolicy(ctx, &api.AddPolicyRequest{Policy: &api.Policy{
		Name: importPolicy,
		Statements: []*api.Statement{{
			Name:       importPolicy + "-accept-local",
			Conditions: &api.Conditions{RouteType: api.Conditions_ROUTE_TYPE_LOCAL},
			Actions:    &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_ACCEPT},
		}},
	}})
	if err != nil {
		return fmt.Errorf("add bgp import policy: %w", err)
	}
	err = srv.SetPolicyAssignment(ctx, &api.SetPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
		Name:          "global",
		Direction:     api.PolicyDirection_POLICY_DIRECTION_IMPORT,
		Policies:      []*api.Policy{{Name: importPolicy}},
		DefaultAction: api.RouteAction_ROUTE_ACTION_REJECT,
	}})
	if err != nil {
		return fmt.Errorf("assign bgp import policy: %w", err)
	}
	return nil
}

// apiPeer is the GoBGP neighbour configuration of p.
func (c Config) apiPeer(p Peer) *api.Peer {
	gr := c.GracefulRestartTime > 0
	var afis []*api.AfiSafi
	v4, v6 := c.families(p)
	for _, f := range []struct {
		on  bool
		afi api.Family_Afi
	}{{v4, api.Family_AFI_IP}, {v6, api.Family_AFI_IP6}} {
		if !f.on {
			continue
		}
		afis = append(afis, &api.AfiSafi{
			Config: &api.AfiSafiConfig{
				Family:  &api.Family{Afi: f.afi, Safi: api.Family_SAFI_UNICAST},
				Enabled: true,
			},
			MpGracefulRestart: &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: gr}},
		})
	}
	ap := &api.Peer{
		Conf: &api.PeerConf{
			NeighborAddress: p.Addr.String(),
			PeerAsn:         p.ASN,
			AuthPassword:    p.Password,
		},
		Timers: &api.Timers{Config: &api.TimersConfig{
			ConnectRetry:      uint64(connectRetry / time.Second),
			HoldTime:          uint64(p.holdTime() / time.Second),
			KeepaliveInterval: uint64(p.keepalive() / time.Second),
		}},
		Transport: &api.Transport{RemotePort: uint32(p.Port)},
		AfiSafis:  afis,
	}
	if gr {
		ap.GracefulRestart = &api.GracefulRestart{
			Enabled:         true,
			RestartTime:     uint32(c.GracefulRestartTime / time.Second),
			DeferralTime:    uint32(c.restartDeferral() / time.Second),
			LocalRestarting: c.Restarting,
		}
	}
	return ap
}

// SetAnnounced makes exactly prefixes announced (host routes, /32 and /128;
// duplicates are fine): new ones are announced, missing ones withdrawn. While
// draining, new prefixes carry the GRACEFUL_SHUTDOWN community; once drained
// nothing is announced until Undrain, but the set is kept. Before Start it
// only records the set. The whole call is rejected, with an error wrapping
// ErrNotHostPrefix or ErrNoSession, when a prefix is not a host route or no
// peer session can carry its family; the previous set then stays.
func (s *Speaker) SetAnnounced(prefixes []netip.Prefix) error {
	set, err := s.cfg.normalize(prefixes)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return ErrStopped
	}
	s.desired = set
	return s.reconcileLocked()
}

// WithdrawAll withdraws every prefix (SetAnnounced(nil)): for a forwarder
// that failed its self-check. Call SetAnnounced to announce again.
func (s *Speaker) WithdrawAll() error {
	return s.SetAnnounced(nil)
}

// Announced returns the prefixes currently in the RIB, sorted, for status.
func (s *Speaker) Announced() []netip.Prefix {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]netip.Prefix, 0, len(s.announced))
	for p := range s.announced {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return out
}

// GracefulShutdown takes the node out of service (RFC 8326): it announces
// every prefix again with the GRACEFUL_SHUTDOWN community (65535:0), so
// routers that honour it prefer other nodes, waits ShutdownWait and then
// withdraws everything. The node stays drained (SetAnnounced records but does
// not announce) until Undrain.
//
// It is idempotent: on a drained node it returns nil at once; a call during
// another one's wait waits for the same end. When ctx ends first it returns
// ctx.Err() and leaves the node draining (announced with the community); a
// later call waits only what is left of ShutdownWait. It returns
// ErrDrainAborted when Undrain ends the wait, ErrStopped when Stop does.
func (s *Speaker) GracefulShutdown(ctx context.Context) error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return ErrStopped
	}
	switch s.mode {
	case drained:
		s.mu.Unlock()
		return nil
	case inService:
		s.mode = draining
		s.drainSince = time.Now()
		s.drainEnd = make(chan struct{})
		s.log.Info("bgp graceful shutdown: announcing with GRACEFUL_SHUTDOWN community",
			"prefixes", len(s.desired), "wait", s.cfg.ShutdownWait)
		if err := s.reconcileLocked(); err != nil {
			s.mu.Unlock()
			return err
		}
	}
	end := s.drainEnd
	wait := time.Until(s.drainSince.Add(s.cfg.ShutdownWait))
	s.mu.Unlock()

	timer := time.NewTimer(max(wait, 0))
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-end:
	case <-ctx.Done():
		return ctx.Err()
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.stopped:
		return ErrStopped
	case s.mode == drained:
		return nil
	case s.mode == inService || s.drainEnd != end:
		return ErrDrainAborted
	}
	return s.enterLocked(drained, "bgp graceful shutdown: withdrawing all prefixes", len(s.announced))
}

// RestoreDrain marks the node drained before Start: a drain that outlived
// an xlbd restart. Nothing is announced (no graceful-shutdown wait: the
// routes were withdrawn before the restart) until Undrain. It returns
// ErrStarted after Start.
func (s *Speaker) RestoreDrain() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return ErrStarted
	}
	s.mode = drained
	s.log.Info("bgp: the node stays drained across the restart (xlbctl node undrain to announce)")
	return nil
}

// Undrain puts the node back in service: the desired prefixes are announced
// again without the community. A GracefulShutdown still waiting returns
// ErrDrainAborted. A no-op on a node in service.
func (s *Speaker) Undrain() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return ErrStopped
	}
	if s.mode == inService {
		return nil
	}
	return s.enterLocked(inService, "bgp undrain: announcing again", len(s.desired))
}

// enterLocked ends the drain under way, if any (its waiters wake), puts the
// node in mode m, logs msg with the count of prefixes it concerns and
// brings GoBGP's RIB to the new mode. s.mu is held.
func (s *Speaker) enterLocked(m drainMode, msg string, prefixes int) error {
	s.endDrainLocked()
	s.mode = m
	s.log.Info(msg, "prefixes", prefixes)
	return s.reconcileLocked()
}

// endDrainLocked wakes whoever waits for the drain under way, if any. s.mu
// is held.
func (s *Speaker) endDrainLocked() {
	if s.drainEnd != nil {
		close(s.drainEnd)
		s.drainEnd = nil
	}
}

// Draining reports whether the node is draining or drained (out of service
// by GracefulShutdown, until Undrain).
func (s *Speaker) Draining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mode != inService
}

// reconcileLocked applies the difference between the desired state and
// GoBGP's RIB. s.mu is held. A failed update leaves the state to be re-sent
// in full by the next call.
func (s *Speaker) reconcileLocked() error {
	if s.srv == nil || s.stopped {
		return nil
	}
	want := target(s.desired, s.mode)
	cur := s.announced
	if s.resync {
		cur = rib{}
		for p := range s.announced {
			if _, ok := want[p]; !ok {
				cur[p] = false // still withdrawn below
			}
		}
	}
	changes := diff(cur, want)
	if len(changes) == 0 {
		s.resync = false
		return nil
	}
	var adds, dels []*apiutil.Path
	var addNames, delNames []string
	for _, ch := range changes {
		p, err := s.cfg.path(ch)
		if err != nil {
			return s.failedLocked(want, err)
		}
		if ch.Withdraw {
			dels, delNames = append(dels, p), append(delNames, ch.Prefix.String())
		} else {
			adds, addNames = append(adds, p), append(addNames, ch.Prefix.String())
		}
	}
	if len(adds) > 0 {
		if _, err := s.srv.AddPath(apiutil.AddPathRequest{Paths: adds}); err != nil {
			return s.failedLocked(want, fmt.Errorf("announce %s: %w", strings.Join(addNames, " "), err))
		}
	}
	if len(dels) > 0 {
		if err := s.srv.DeletePath(apiutil.DeletePathRequest{Paths: dels}); err != nil {
			return s.failedLocked(want, fmt.Errorf("withdraw %s: %w", strings.Join(delNames, " "), err))
		}
	}
	if len(addNames) > 0 {
		s.log.Info("bgp announce", "prefixes", addNames, "graceful_shutdown", s.mode == draining)
	}
	if len(delNames) > 0 {
		s.log.Info("bgp withdraw", "prefixes", delNames)
	}
	s.announced, s.resync = want, false
	return nil
}

// failedLocked records that the RIB may hold anything in announced or want
// and returns err: the next reconcile re-announces want and withdraws the
// rest.
func (s *Speaker) failedLocked(want rib, err error) error {
	for p, g := range want {
		s.announced[p] = g
	}
	s.resync = true
	return err
}

// Stop stops the speaker; it is idempotent. Pending GracefulShutdown calls
// return ErrStopped.
//
// graceful=true closes the TCP sessions without a NOTIFICATION and without
// withdrawing anything, which RFC 4724 makes the start of a graceful
// restart: peers that negotiated graceful restart keep our routes as stale
// for GracefulRestartTime, during which a new speaker (Config.Restarting)
// must come back; peers without it drop them.
//
// graceful=false first withdraws every prefix and waits (at most
// stopFlushTimeout) until each established session has sent an UPDATE since,
// then sends each peer a Cease NOTIFICATION (Peer De-configured) and closes:
// peers drop our routes at once. The withdrawal is what makes that
// reliable: GoBGP closes the socket right after writing the NOTIFICATION,
// and when the peer's KEEPALIVE is still unread the kernel answers with a
// RST that can make the peer lose the NOTIFICATION and start a graceful
// restart instead (seen with BIRD in about 1 stop in 5).
func (s *Speaker) Stop(graceful bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	if !graceful && s.srv != nil && len(s.announced) > 0 {
		s.withdrawAllLocked()
	}
	s.stopped = true
	s.endDrainLocked()
	if s.srv == nil {
		return
	}
	if graceful {
		s.awaitRestartedLocked()
		if err := s.srv.StopBgp(context.Background(), &api.StopBgpRequest{AllowGracefulRestart: true}); err != nil {
			s.log.Warn("bgp graceful stop", "err", err)
		}
		s.expectStopped.Store(true)
	}
	s.srv.Stop()
	s.log.Info("bgp speaker stopped", "graceful", graceful, "announced", len(s.announced))
}

// awaitRestartedLocked waits, at most restartSettleTimeout past the
// restart deferral, until no session is half-restarted: opened (OPEN sent)
// but without our table sent yet. A peer keeps our stale routes across a
// close only once the new session has carried our UPDATEs and End-of-RIB;
// closed in between, BIRD drops them at once (a second restart a second
// after the first broke every connection through the node in the lab).
// Sessions that are idle or still dialling are not waited for: the peer
// has seen nothing of them.
func (s *Speaker) awaitRestartedLocked() {
	deadline := time.Now().Add(s.cfg.restartDeferral() + restartSettleTimeout)
	waited := false
	for {
		pending := s.halfRestarted()
		if len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			s.log.Warn("bgp graceful stop: sessions still without our table; the peers may drop our routes", "peers", pending)
			return
		}
		if !waited {
			s.log.Info("bgp graceful stop: waiting for the new sessions to carry our table, so the peers keep our routes", "peers", pending)
			waited = true
		}
		time.Sleep(20 * time.Millisecond)
	}
	if waited {
		s.log.Info("bgp graceful stop: sessions settled")
	}
}

// halfRestarted lists the peers whose session is opening, or established
// without an UPDATE sent yet.
func (s *Speaker) halfRestarted() []string {
	var out []string
	_ = s.srv.ListPeer(context.Background(), &api.ListPeerRequest{}, func(p *api.Peer) {
		st := p.GetState()
		switch st.GetSessionState() {
		case api.PeerState_SESSION_STATE_OPENSENT, api.PeerState_SESSION_STATE_OPENCONFIRM:
		case api.PeerState_SESSION_STATE_ESTABLISHED:
			if st.GetMessages().GetSent().GetUpdate() > 0 {
				return
			}
		default:
			return
		}
		out = append(out, p.GetConf().GetNeighborAddress())
	})
	return out
}

// Timing of the withdrawal before a non-graceful Stop.
const (
	restartSettleTimeout = 3 * time.Second        // past the deferral, for a session to carry our table
	stopFlushTimeout     = time.Second            // for the withdrawals to leave
	stopFlushGrace       = 100 * time.Millisecond // for the peers to read them
)

// withdrawAllLocked withdraws every announced prefix and waits until every
// established session has sent an UPDATE since (the withdrawals), at most
// stopFlushTimeout, plus stopFlushGrace for the peers to read them.
func (s *Speaker) withdrawAllLocked() {
	before := s.sentUpdates()
	s.desired = map[netip.Prefix]struct{}{}
	if err := s.reconcileLocked(); err != nil {
		s.log.Warn("bgp stop: withdraw before closing the sessions", "err", err)
		return
	}
	deadline := time.Now().Add(stopFlushTimeout)
	for time.Now().Before(deadline) {
		after, flushed := s.sentUpdates(), true
		for addr, n := range before {
			if m, ok := after[addr]; ok && m <= n {
				flushed = false
			}
		}
		if flushed {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(stopFlushGrace)
}

// sentUpdates returns, per established session, how many UPDATEs it has
// sent.
func (s *Speaker) sentUpdates() map[string]uint64 {
	out := map[string]uint64{}
	_ = s.srv.ListPeer(context.Background(), &api.ListPeerRequest{}, func(p *api.Peer) {
		if p.GetState().GetSessionState() == api.PeerState_SESSION_STATE_ESTABLISHED {
			out[p.GetConf().GetNeighborAddress()] = p.GetState().GetMessages().GetSent().GetUpdate()
		}
	})
	return out
}

// Status returns the state of every configured peer, in configuration
// order.
func (s *Speaker) Status() []PeerStatus {
	out := make([]PeerStatus, len(s.cfg.Peers))
	index := make(map[netip.Addr]int, len(s.cfg.Peers))
	for i, p := range s.cfg.Peers {
		out[i] = PeerStatus{Addr: p.Addr, ASN: p.ASN, State: "stopped"}
		index[p.Addr] = i
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv == nil || s.stopped {
		return out
	}
	err := s.srv.ListPeer(context.Background(), &api.ListPeerRequest{EnableAdvertised: true}, func(p *api.Peer) {
		addr, err := netip.ParseAddr(p.GetConf().GetNeighborAddress())
		if err != nil {
			return
		}
		i, ok := index[addr.Unmap()]
		if !ok {
			return
		}
		st := &out[i]
		st.State = sessionState(p.GetState().GetSessionState())
		st.LocalAddr, _ = netip.ParseAddr(p.GetTransport().GetLocalAddress())
		if st.State == "established" {
			if up := p.GetTimers().GetState().GetUptime(); up != nil {
				st.Uptime = time.Since(up.AsTime()).Truncate(time.Second)
			}
			st.GracefulRestart = s.cfg.GracefulRestartTime > 0 && hasGracefulRestart(p.GetState().GetRemoteCap())
		}
		for _, af := range p.GetAfiSafis() {
			st.Received += af.GetState().GetReceived()
			st.Advertised += af.GetState().GetAdvertised()
		}
	})
	if err != nil {
		s.log.Warn("bgp status", "err", err)
	}
	return out
}

// sessionState is the lower-case FSM state name ("established").
func sessionState(st api.PeerState_SessionState) string {
	if st == api.PeerState_SESSION_STATE_UNSPECIFIED {
		return "idle"
	}
	return strings.ToLower(strings.TrimPrefix(st.String(), "SESSION_STATE_"))
}

// hasGracefulRestart reports whether caps hold the graceful restart
// capability.
func hasGracefulRestart(caps []*api.Capability) bool {
	list, err := apiutil.UnmarshalCapabilities(caps)
	if err != nil {
		return false
	}
	for _, c := range list {
		if c.Code() == bgppkt.BGP_CAP_GRACEFUL_RESTART {
			return true
		}
	}
	return false
}
