package api

import (
	"context"
	"net/netip"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/xlbproject/xlb/api/xlb/v1"
	"github.com/xlbproject/xlb/internal/config"
)

// Limits of requests.
const (
	// MaxRateInterval bounds rate_interval: the call waits that long.
	MaxRateInterval = 10 * time.Second
	// DefaultConntrackLimit and MaxConntrackLimit bound ConntrackDump.
	DefaultConntrackLimit = 1000
	MaxConntrackLimit     = 100000
)

// service implements pb.XLBServer over a Backend.
type service struct {
	pb.UnimplementedXLBServer
	b   Backend
	now func() time.Time
}

func (s *service) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	st, err := s.b.Status(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return statusToPB(st), nil
}

// rateInterval validates a request's rate_interval: 0 when unset.
func rateInterval(d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, invalid("rate_interval: %v", err)
	}
	iv := d.AsDuration()
	if iv < 0 || iv > MaxRateInterval {
		return 0, invalid("rate_interval %v: must be between 0 and %v", iv, MaxRateInterval)
	}
	return iv, nil
}

// sampleOver is sample over a request's rate_interval, once it is valid.
func (s *service) sampleOver(ctx context.Context, d *durationpb.Duration, global bool) (*sampled, error) {
	iv, err := rateInterval(d)
	if err != nil {
		return nil, err
	}
	return s.sample(ctx, iv, global)
}

// sampled holds two readings of the counters; prev is nil without rates.
type sampled struct {
	prev, cur         []ServiceInfo
	prevGlob, curGlob []Counter
	at                time.Time
	interval          time.Duration // measured between the readings
}

// sample reads the services (and the global counters when global is set),
// twice iv apart when iv > 0.
func (s *service) sample(ctx context.Context, iv time.Duration, global bool) (*sampled, error) {
	read := func() ([]ServiceInfo, []Counter, time.Time, error) {
		at := s.now()
		svcs, err := s.b.Services(ctx)
		if err != nil {
			return nil, nil, at, err
		}
		var glob []Counter
		if global {
			if glob, err = s.b.GlobalCounters(ctx); err != nil {
				return nil, nil, at, err
			}
		}
		return svcs, glob, at, nil
	}
	var r sampled
	var err error
	var t0 time.Time
	if iv > 0 {
		if r.prev, r.prevGlob, t0, err = read(); err != nil {
			return nil, toStatus(err)
		}
		t := time.NewTimer(iv)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, toStatus(ctx.Err())
		case <-t.C:
		}
	}
	if r.cur, r.curGlob, r.at, err = read(); err != nil {
		return nil, toStatus(err)
	}
	if iv > 0 {
		r.interval = r.at.Sub(t0)
	}
	return &r, nil
}

func (r *sampled) pbSample() *pb.Sample {
	smp := &pb.Sample{At: ts(r.at)}
	if r.prev != nil {
		smp.Interval = dur(r.interval)
	}
	return smp
}

// rate is (b - a) per second over d; 0 when the counter went back (a real
// id reused) or d is not positive.
func rate(a, b uint64, d time.Duration) float64 {
	if b < a || d <= 0 {
		return 0
	}
	return float64(b-a) / d.Seconds()
}

func rates(a, b Counters, d time.Duration) *pb.Rates {
	return &pb.Rates{Packets: rate(a.Packets, b.Packets, d), Bytes: rate(a.Bytes, b.Bytes, d), NewFlows: rate(a.NewFlows, b.NewFlows, d)}
}

type svcKey struct {
	vip   netip.Addr
	port  uint16
	proto Proto
}

func keyOf(s *ServiceInfo) svcKey { return svcKey{s.VIP, s.Port, s.Proto} }

// previous indexes the first reading: services by VIP, backends by (VIP,
// address). A service or backend that is new in the second reading gets
// no rates (nil).
type previous struct {
	svc     map[svcKey]Counters
	backend map[svcKey]map[netip.Addr]Counters
}

func indexPrevious(svcs []ServiceInfo) previous {
	p := previous{svc: map[svcKey]Counters{}, backend: map[svcKey]map[netip.Addr]Counters{}}
	for i := range svcs {
		k := keyOf(&svcs[i])
		p.svc[k] = svcs[i].Counters
		m := map[netip.Addr]Counters{}
		for _, b := range svcs[i].Backends {
			m[b.Address] = b.Counters
		}
		p.backend[k] = m
	}
	return p
}

// services converts the second reading, with rates when there are two.
func (r *sampled) services() []*pb.Service {
	var prev previous
	if r.prev != nil {
		prev = indexPrevious(r.prev)
	}
	out := make([]*pb.Service, 0, len(r.cur))
	for i := range r.cur {
		si := &r.cur[i]
		ps := serviceToPB(si)
		if r.prev != nil {
			k := keyOf(si)
			if c, ok := prev.svc[k]; ok {
				ps.Rates = rates(c, si.Counters, r.interval)
			}
			for j, b := range si.Backends {
				if c, ok := prev.backend[k][b.Address]; ok {
					ps.Backends[j].Rates = rates(c, b.Counters, r.interval)
				}
			}
		}
		out = append(out, ps)
	}
	return out
}

func (s *service) ListServices(ctx context.Context, req *pb.ListServicesRequest) (*pb.ListServicesResponse, error) {
	r, err := s.sampleOver(ctx, req.GetRateInterval(), false)
	if err != nil {
		return nil, err
	}
	all := r.services()
	if name := req.GetService(); name != "" {
		all = slices.DeleteFunc(all, func(p *pb.Service) bool { return p.Name != name })
		if len(all) == 0 {
			return nil, status.Errorf(codes.NotFound, "no service %q in the running config", name)
		}
	}
	return &pb.ListServicesResponse{Services: all, Sample: r.pbSample()}, nil
}

func (s *service) ListBackends(ctx context.Context, req *pb.ListBackendsRequest) (*pb.ListBackendsResponse, error) {
	iv, err := rateInterval(req.GetRateInterval())
	if err != nil {
		return nil, err
	}
	var want netip.Addr
	if a := req.GetAddress(); a != "" {
		if want, err = netip.ParseAddr(a); err != nil {
			return nil, invalid("address %q: not an IP address", a)
		}
	}
	r, err := s.sample(ctx, iv, false)
	if err != nil {
		return nil, err
	}
	var out []*pb.Backend
	found := false
	for _, ps := range r.services() {
		if req.GetService() != "" && ps.Name != req.GetService() {
			continue
		}
		found = true
		for _, b := range ps.Backends {
			if want.IsValid() && b.Address != want.String() {
				continue
			}
			out = append(out, b)
		}
	}
	if req.GetService() != "" && !found {
		return nil, status.Errorf(codes.NotFound, "no service %q in the running config", req.GetService())
	}
	slices.SortStableFunc(out, func(a, b *pb.Backend) int {
		if a.Service != b.Service {
			if a.Service < b.Service {
				return -1
			}
			return 1
		}
		x, _ := netip.ParseAddr(a.Address)
		y, _ := netip.ParseAddr(b.Address)
		return x.Compare(y)
	})
	return &pb.ListBackendsResponse{Backends: out, Sample: r.pbSample()}, nil
}

func (s *service) Counters(ctx context.Context, req *pb.CountersRequest) (*pb.CountersResponse, error) {
	r, err := s.sampleOver(ctx, req.GetRateInterval(), true)
	if err != nil {
		return nil, err
	}
	resp := &pb.CountersResponse{Sample: r.pbSample()}
	prevGlob := map[string]uint64{}
	for _, c := range r.prevGlob {
		prevGlob[c.Name] = c.Value
	}
	for _, c := range r.curGlob {
		nc := &pb.NamedCounter{Name: c.Name, Value: c.Value}
		if v, ok := prevGlob[c.Name]; ok {
			nc.Rate = rate(v, c.Value, r.interval)
		}
		resp.Global = append(resp.Global, nc)
	}
	for _, ps := range r.services() {
		resp.Services = append(resp.Services, &pb.ServiceCounters{
			Name: ps.Name, Vip: ps.Vip, Port: ps.Port, Protocol: ps.Protocol, Counters: ps.Counters, Rates: ps.Rates,
		})
		for _, b := range ps.Backends {
			resp.Backends = append(resp.Backends, &pb.BackendCounters{
				Service: ps.Name, Address: b.Address, Counters: b.Counters, Rates: b.Rates,
			})
		}
	}
	return resp, nil
}

func (s *service) ApplyConfig(ctx context.Context, req *pb.ApplyConfigRequest) (*pb.ApplyConfigResponse, error) {
	if len(req.GetYaml()) == 0 {
		return nil, invalid("yaml is empty: send the whole config file")
	}
	if len(req.GetYaml()) > config.MaxFileSize {
		return nil, invalid("config is %d bytes, more than %d", len(req.GetYaml()), config.MaxFileSize)
	}
	res, err := s.b.ApplyConfig(ctx, req.GetYaml(), ApplyOptions{
		Source: req.GetSource(), DryRun: req.GetDryRun(), ResetOverrides: req.GetResetOverrides(),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.ApplyConfigResponse{Diff: diffToPB(res.Diff), Committed: res.Committed, Generation: res.Generation}, nil
}

func (s *service) SetBackend(ctx context.Context, req *pb.SetBackendRequest) (*pb.SetBackendResponse, error) {
	a, err := netip.ParseAddr(req.GetAddress())
	if err != nil {
		return nil, invalid("address %q: not an IP address", req.GetAddress())
	}
	u := BackendUpdate{Address: a.Unmap(), Service: req.GetService()}
	switch act := req.GetAction().(type) {
	case *pb.SetBackendRequest_Weight:
		if act.Weight > config.MaxWeight {
			return nil, invalid("weight %d: at most %d", act.Weight, config.MaxWeight)
		}
		w := act.Weight
		u.Weight = &w
	case *pb.SetBackendRequest_Drain:
		d := act.Drain
		u.Drain = &d
	case *pb.SetBackendRequest_Reset_:
		if !act.Reset_ {
			return nil, invalid("reset must be true when set")
		}
		u.Reset = true
	default:
		return nil, invalid("no action: set one of weight, drain, reset")
	}
	refs, err := s.b.SetBackend(ctx, u)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.SetBackendResponse{Backends: refsToPB(refs)}, nil
}

func (s *service) ConntrackDump(ctx context.Context, req *pb.ConntrackDumpRequest) (*pb.ConntrackDumpResponse, error) {
	f := ConntrackFilter{Service: req.GetService(), IncludeExpired: req.GetIncludeExpired(), Limit: int(req.GetLimit()),
		Templates: req.GetTemplates()}
	if b := req.GetBackend(); b != "" {
		a, err := netip.ParseAddr(b)
		if err != nil {
			return nil, invalid("backend %q: not an IP address", b)
		}
		f.Backend = a.Unmap()
	}
	switch st := req.GetState(); st {
	case pb.ConntrackState_CONNTRACK_STATE_UNSPECIFIED, pb.ConntrackState_CONNTRACK_STATE_SYN,
		pb.ConntrackState_CONNTRACK_STATE_ESTABLISHED, pb.ConntrackState_CONNTRACK_STATE_CLOSING:
		f.State = CTState(st)
	default:
		return nil, invalid("state %d: unknown", st)
	}
	if f.Limit == 0 {
		f.Limit = DefaultConntrackLimit
	}
	if f.Limit > MaxConntrackLimit {
		return nil, invalid("limit %d: at most %d", f.Limit, MaxConntrackLimit)
	}
	d, err := s.b.ConntrackDump(ctx, f)
	if err != nil {
		return nil, toStatus(err)
	}
	entries := d.Entries
	if len(entries) > f.Limit {
		entries = entries[:f.Limit]
	}
	resp := &pb.ConntrackDumpResponse{
		InUse: d.InUse, Matched: max(d.Matched, uint64(len(entries))), Capacity: d.Capacity, Templates: f.Templates,
	}
	resp.Truncated = resp.Matched > uint64(len(entries))
	for i := range entries {
		resp.Entries = append(resp.Entries, conntrackEntryToPB(&entries[i]))
	}
	return resp, nil
}

func (s *service) Explain(ctx context.Context, req *pb.ExplainRequest) (*pb.ExplainResponse, error) {
	src, err := netip.ParseAddrPort(req.GetSrc())
	if err != nil {
		return nil, invalid("src %q: want address:port ([v6]:port): %v", req.GetSrc(), err)
	}
	dst, err := netip.ParseAddrPort(req.GetDst())
	if err != nil {
		return nil, invalid("dst %q: want address:port ([v6]:port): %v", req.GetDst(), err)
	}
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	if src.Addr().Is4() != dst.Addr().Is4() {
		return nil, invalid("src %s and dst %s: not the same address family", src, dst)
	}
	p := Proto(req.GetProtocol())
	if p != ProtoTCP && p != ProtoUDP {
		return nil, invalid("protocol %v: tcp or udp", req.GetProtocol())
	}
	if req.GetTcpFlags() > 0xff {
		return nil, invalid("tcp_flags 0x%x: one byte", req.GetTcpFlags())
	}
	pkt := ExplainPacket{Src: src, Dst: dst, Proto: p}
	if p == ProtoTCP {
		pkt.TCPFlags = uint8(req.GetTcpFlags())
	}
	e, err := s.b.Explain(ctx, pkt)
	if err != nil {
		return nil, toStatus(err)
	}
	return explanationToPB(e), nil
}

func (s *service) NodeDrain(ctx context.Context, _ *pb.NodeDrainRequest) (*pb.NodeDrainResponse, error) {
	changed, err := s.b.NodeDrain(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.NodeDrainResponse{Changed: changed}, nil
}

func (s *service) NodeUndrain(ctx context.Context, _ *pb.NodeUndrainRequest) (*pb.NodeUndrainResponse, error) {
	changed, err := s.b.NodeUndrain(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.NodeUndrainResponse{Changed: changed}, nil
}
