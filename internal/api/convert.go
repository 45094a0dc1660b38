package api

import (
	"net/netip"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/xlbproject/xlb/api/xlb/v1"
)

// Conversions from the Backend's Go types to the wire messages. Zero times
// and zero addresses become unset fields / empty strings.

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func dur(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

func addr(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

func statusToPB(s StatusInfo) *pb.StatusResponse {
	r := &pb.StatusResponse{
		Node: s.Node, Interface: s.Interface, XdpMode: s.XDPMode, ProgramId: s.ProgramID,
		PinDir: s.PinDir, Version: s.Version, StartedAt: ts(s.StartedAt),
		SelfCheck: &pb.SelfCheck{
			Ok: s.SelfCheck.OK, LastError: s.SelfCheck.LastError,
			CheckedAt: ts(s.SelfCheck.CheckedAt), LastFailureAt: ts(s.SelfCheck.LastFailureAt),
		},
		Drained: s.Drained,
		Config: &pb.ConfigInfo{
			Source: s.Config.Source, CommittedAt: ts(s.Config.CommittedAt), Generation: s.Config.Generation,
			Services: uint32(s.Config.Services), Backends: uint32(s.Config.Backends),
		},
		Conntrack: &pb.ConntrackOccupancy{Capacity: s.Conntrack.Capacity, InUse: s.Conntrack.InUse, Templates: s.Conntrack.Templates,
			Fill: s.Conntrack.Fill, Defence: s.Conntrack.Defence},
		Overrides:   uint32(s.Overrides),
		MetricsAddr: s.MetricsAddr, MetricsNote: s.MetricsNote,
		TxCheck: &pb.TXCheck{Ok: s.TX.OK, Detail: s.TX.Detail},
		Prober:  proberToPB(s.Prober),
		Cluster: clusterToPB(s.Cluster), // cluster.go
	}
	if e := s.External; e != nil {
		r.ExternalRoutes = &pb.ExternalRoutes{Where: e.Where}
		for _, p := range e.Prefixes {
			r.ExternalRoutes.Prefixes = append(r.ExternalRoutes.Prefixes, p.String())
		}
		if e.Err != nil {
			r.ExternalRoutes.Error = e.Err.Error()
		}
	}
	for _, b := range s.BGP {
		r.BgpSessions = append(r.BgpSessions, &pb.BGPSession{
			Peer: addr(b.Peer), Asn: b.ASN, State: b.State, Uptime: dur(b.Uptime),
			Advertised: b.Advertised, Received: b.Received, GracefulRestart: b.GracefulRestart,
		})
	}
	return r
}

func proberToPB(s ProberStatus) *pb.Prober {
	r := &pb.Prober{Enabled: s.Enabled, Ok: s.OK}
	for i := range s.Probes {
		r.Probes = append(r.Probes, probeToPB(&s.Probes[i]))
	}
	return r
}

func probeToPB(p *Probe) *pb.Probe {
	if p == nil {
		return nil
	}
	return &pb.Probe{Vip: p.VIP, Up: p.Up, Latency: dur(p.Latency), Error: p.Error, CheckedAt: ts(p.CheckedAt)}
}

func countersToPB(c Counters) *pb.Counters {
	return &pb.Counters{Packets: c.Packets, Bytes: c.Bytes, NewFlows: c.NewFlows}
}

func serviceToPB(s *ServiceInfo) *pb.Service {
	r := &pb.Service{
		Name: s.Name, Id: s.ID, Vip: addr(s.VIP), Port: uint32(s.Port), Protocol: pb.Protocol(s.Proto),
		Scheduler: s.Scheduler, TableSize: s.TableSize, Encap: s.Encap, ActivePool: s.ActivePool,
		Pools: s.Pools, Counters: countersToPB(s.Counters), Probe: probeToPB(s.Probe),
	}
	if p := s.Persistence; p != nil {
		r.Persistence = &pb.Persistence{Timeout: durationpb.New(p.Timeout), Netmask: uint32(p.Netmask),
			Netmask6: uint32(p.Netmask6), Group: p.Group}
	}
	for i := range s.Backends {
		r.Backends = append(r.Backends, backendToPB(s.Name, &s.Backends[i]))
	}
	return r
}

func backendToPB(service string, b *BackendInfo) *pb.Backend {
	if b.Service != "" {
		service = b.Service
	}
	state := pb.BackendState_BACKEND_STATE_ACTIVE
	if b.Drain {
		state = pb.BackendState_BACKEND_STATE_DRAIN
	}
	r := &pb.Backend{
		Address: addr(b.Address), Service: service, Pool: b.Pool, Weight: b.Weight, State: state,
		Health: &pb.Health{
			Check: b.Health.Check, Healthy: b.Health.Healthy, Known: b.Health.Known,
			Since: ts(b.Health.Since), LastError: b.Health.LastError, LastProbe: ts(b.Health.LastProbe),
		},
		InDataPlane: b.InDataPlane, TableEntries: b.TableEntries, RealId: b.RealID, Encap: b.Encap,
		Local: b.Local, Counters: countersToPB(b.Counters), TrackedFlows: b.TrackedFlows,
		ActiveConns: b.ActiveConns, InactConns: b.InactConns,
	}
	if o := b.Override; o != nil {
		r.Override = &pb.Override{Weight: o.Weight, Drain: o.Drain, Since: ts(o.Since)}
	}
	return r
}

func refsToPB(refs []BackendRef) []*pb.BackendRef {
	out := make([]*pb.BackendRef, len(refs))
	for i, r := range refs {
		out[i] = &pb.BackendRef{Service: r.Service, Address: addr(r.Address)}
	}
	return out
}

func diffToPB(d Diff) *pb.Diff {
	return &pb.Diff{
		ServicesAdded: d.ServicesAdded, ServicesRemoved: d.ServicesRemoved, ServicesChanged: d.ServicesChanged,
		BackendsAdded: refsToPB(d.BackendsAdded), BackendsRemoved: refsToPB(d.BackendsRemoved),
		BackendsChanged: refsToPB(d.BackendsChanged),
		NodeChanged:     d.NodeChanged, BgpChanged: d.BGPChanged, HealthChecksChanged: d.HealthChecksChanged,
	}
}

func conntrackEntryToPB(e *ConntrackEntry) *pb.ConntrackEntry {
	return &pb.ConntrackEntry{
		Cpu: e.CPU, Bucket: e.Bucket, Way: uint32(e.Way), Tag: e.Tag, RealId: e.RealID,
		Backend: addr(e.Backend), Service: e.Service, State: pb.ConntrackState(e.State),
		Age: dur(e.Age), Expired: e.Expired,
	}
}

func explanationToPB(e Explanation) *pb.ExplainResponse {
	headers := e.Headers
	if len(headers) == 0 && len(e.Frame) > 0 {
		headers = DescribeFrame(e.Frame)
	}
	return &pb.ExplainResponse{
		XdpAction: e.Action, Verdict: XDPActionName(e.Action), Service: e.Service,
		Backend: addr(e.Backend), RealId: e.RealID, Encap: e.Encap,
		Conntrack: pb.ConntrackResult(e.Conntrack), Headers: headers, Frame: e.Frame, Reason: e.Reason,
	}
}
