package metrics

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xlbproject/xlb/internal/api"
)

// collector reads a Source at each scrape. Label sets change with the config
// (services, backends, peers), so the values are not kept between scrapes:
// a service that left the config simply disappears.
type collector struct {
	src     Source
	timeout time.Duration
}

func newCollector(src Source, timeout time.Duration) *collector {
	return &collector{src: src, timeout: timeout}
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	svcLabels     = []string{"service", "vip", "port", "proto"}
	backendLabels = []string{"service", "backend"}

	dInfo = desc("xlb_info", "Always 1; the labels describe the node.", "node", "interface", "xdp_mode", "version")

	dSelfCheckOK   = desc("xlb_selfcheck_ok", "1 while the forwarder's last self-check passed (program attached, probe forwarded), else 0.")
	dSelfCheckTime = desc("xlb_selfcheck_last_timestamp_seconds", "When the forwarder's self-check last ran (Unix time).")
	dTXOK          = desc("xlb_tx_check_ok", "1 while the interface delivers what the forwarder transmits (transmit check of the self-check), else 0.")
	dProbeUp       = desc("xlb_probe_up", "1 while the blackbox prober's last probe of the VIP was answered, else 0.", "vip")
	dProbeLatency  = desc("xlb_probe_latency_seconds", "Round trip of the VIP's last answered blackbox probe (node -> forwarder -> backend -> node).", "vip")
	dDrained       = desc("xlb_node_drained", "1 while the node is drained (BGP graceful shutdown, VIPs withdrawn), else 0.")
	dGeneration    = desc("xlb_config_generation", "Successful config commits since xlbd started.")
	dCommitTime    = desc("xlb_config_last_commit_timestamp_seconds", "When the running config was committed (Unix time).")
	dCfgServices   = desc("xlb_config_services", "Services in the running config.")
	dCfgBackends   = desc("xlb_config_backends", "(service, backend) pairs in the running config.")
	dOverrides     = desc("xlb_runtime_overrides", "Runtime backend overrides (weight, drain) in effect on top of the config.")
	dCTCapacity    = desc("xlb_conntrack_capacity_entries", "Connection tracking capacity, entries over all CPUs.")
	dCTEntries     = desc("xlb_conntrack_entries", "Connection tracking entries in use, all CPUs.")
	dTemplates     = desc("xlb_persistence_templates", "Persistence templates in use.")
	dCTFill        = desc("xlb_conntrack_fill_ratio", "Fill of the fullest CPU's slice of the connection table (the last sweep's), 0..1: what the defence modes switch by.")
	dDefence       = desc("xlb_defence_active", "1 while the defence mode is on (secure_tcp, drop_entry, drop_packet: node.defence), else 0.", "mode")

	dBGPUp       = desc("xlb_bgp_session_up", "1 while the BGP session to the peer is established, else 0.", "peer")
	dBGPState    = desc("xlb_bgp_session_state", "1 for the BGP session's current FSM state, 0 for the others.", "peer", "state")
	dBGPUptime   = desc("xlb_bgp_session_uptime_seconds", "Time since the BGP session was established; 0 when down.", "peer")
	dBGPAdvertis = desc("xlb_bgp_advertised_prefixes", "Prefixes announced to the peer.", "peer")

	// Global counters, split by their name's prefix (enum xlb_stat order
	// and names come from the data plane; a new name lands in
	// xlb_datapath_events_total until it gets a prefix of its own).
	dPassed    = desc("xlb_passed_packets_total", "Packets passed to the kernel unchanged, by reason.", "reason")
	dDropped   = desc("xlb_dropped_packets_total", "Packets dropped by the forwarder, by reason.", "reason")
	dForwarded = desc("xlb_forwarded_packets_total", "Packets encapsulated and sent to a backend, by XDP action (tx, redirect).", "action")
	dCTLookups = desc("xlb_conntrack_lookups_total", "Connection table lookups, by result (hit, remote_hit, miss, reselect).", "result")
	dEvents    = desc("xlb_datapath_events_total", "Other data plane events, by name.", "event")
	dFragments = desc("xlb_fragments_total", "IP fragments to fragment-enabled VIPs, by outcome (redirect, from_peer, first, forward, held, hold_fail, release; xlbd's holder: hold_received, released, expired, hold_overflow, inject_errors).", "outcome")

	dSvcPackets  = desc("xlb_service_packets_total", "Packets to the VIP forwarded to a backend.", svcLabels...)
	dSvcBytes    = desc("xlb_service_bytes_total", "Bytes (of the IP datagrams as received, before encapsulation) to the VIP forwarded to a backend.", svcLabels...)
	dSvcNewFlows = desc("xlb_service_new_flows_total", "New flows (connection table misses given a backend) of the VIP.", svcLabels...)
	dSvcUp       = desc("xlb_service_up", "1 while the service has a pool with a usable backend (new flows are served), else 0.", "service")
	dSvcTable    = desc("xlb_service_table_size", "The service's Maglev table size M.", "service")

	dBePackets  = desc("xlb_backend_packets_total", "Packets forwarded to the backend for the service.", backendLabels...)
	dBeBytes    = desc("xlb_backend_bytes_total", "Bytes forwarded to the backend for the service.", backendLabels...)
	dBeNewFlows = desc("xlb_backend_new_flows_total", "New flows given to the backend for the service.", backendLabels...)
	dBeHealthy  = desc("xlb_backend_healthy", "1 while the backend's health check passes (or it has none), else 0.", backendLabels...)
	dBeWeight   = desc("xlb_backend_weight", "The backend's weight in effect (config or override).", backendLabels...)
	dBeDraining = desc("xlb_backend_draining", "1 while the backend drains (no new flows, tracked ones continue), else 0.", backendLabels...)
	dBeActive   = desc("xlb_backend_in_data_plane", "1 while the backend is a real of the service in the data plane (its tracked flows continue).", backendLabels...)
	dBeEntries  = desc("xlb_backend_table_entries", "Entries of the service's Maglev table pointing to the backend.", backendLabels...)
	dBeTracked  = desc("xlb_backend_tracked_flows", "Connection tracking entries pointing to the backend.", backendLabels...)
)

// bgpStates are the values xlb_bgp_session_state always reports, so that
// "state=established == 0" alerts work.
var bgpStates = []string{"idle", "connect", "active", "opensent", "openconfirm", "established", "stopped"}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		dInfo, dSelfCheckOK, dSelfCheckTime, dTXOK, dProbeUp, dProbeLatency, dDrained, dGeneration, dCommitTime, dCfgServices, dCfgBackends,
		dOverrides, dCTCapacity, dCTEntries, dTemplates, dCTFill, dDefence, dBGPUp, dBGPState, dBGPUptime, dBGPAdvertis,
		dPassed, dDropped, dForwarded, dCTLookups, dEvents, dFragments,
		dSvcPackets, dSvcBytes, dSvcNewFlows, dSvcUp, dSvcTable,
		dBePackets, dBeBytes, dBeNewFlows, dBeHealthy, dBeWeight, dBeDraining, dBeActive, dBeEntries, dBeTracked,
	} {
		ch <- d
	}
	for _, d := range methodDescs { // methods.go
		ch <- d
	}
}

func gauge(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func counter(d *prometheus.Desc, v uint64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Collect reads the three Source methods concurrently; one that fails is
// reported as an invalid metric (the scrape logs it and serves the rest).
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { collectRead(ctx, ch, dSelfCheckOK, c.src.Status, collectStatus) })
	wg.Go(func() { collectRead(ctx, ch, dSvcPackets, c.src.Services, collectServices) })
	wg.Go(func() { collectRead(ctx, ch, dEvents, c.src.GlobalCounters, collectGlobal) })
	wg.Wait()
}

// collectRead reads with read and sends the metrics collect makes of it, or
// one invalid metric of desc when the read fails.
func collectRead[T any](ctx context.Context, ch chan<- prometheus.Metric, desc *prometheus.Desc,
	read func(context.Context) (T, error), collect func(chan<- prometheus.Metric, T)) {
	v, err := read(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(desc, err)
		return
	}
	collect(ch, v)
}

func collectStatus(ch chan<- prometheus.Metric, st api.StatusInfo) {
	ch <- gauge(dInfo, 1, st.Node, st.Interface, st.XDPMode, st.Version)
	ch <- gauge(dSelfCheckOK, b2f(st.SelfCheck.OK))
	if !st.SelfCheck.CheckedAt.IsZero() {
		ch <- gauge(dSelfCheckTime, unix(st.SelfCheck.CheckedAt))
	}
	ch <- gauge(dTXOK, b2f(st.TX.OK))
	for _, p := range st.Prober.Probes {
		ch <- gauge(dProbeUp, b2f(p.Up), p.VIP)
		if p.Up {
			ch <- gauge(dProbeLatency, p.Latency.Seconds(), p.VIP)
		}
	}
	ch <- gauge(dDrained, b2f(st.Drained))
	ch <- gauge(dGeneration, float64(st.Config.Generation))
	if !st.Config.CommittedAt.IsZero() {
		ch <- gauge(dCommitTime, unix(st.Config.CommittedAt))
	}
	ch <- gauge(dCfgServices, float64(st.Config.Services))
	ch <- gauge(dCfgBackends, float64(st.Config.Backends))
	ch <- gauge(dOverrides, float64(st.Overrides))
	ch <- gauge(dCTCapacity, float64(st.Conntrack.Capacity))
	if st.Conntrack.InUse != nil {
		ch <- gauge(dCTEntries, float64(*st.Conntrack.InUse))
	}
	if st.Conntrack.Templates != nil {
		ch <- gauge(dTemplates, float64(*st.Conntrack.Templates))
	}
	if st.Conntrack.Fill != nil {
		ch <- gauge(dCTFill, *st.Conntrack.Fill)
	}
	for _, m := range slices.Sorted(maps.Keys(st.Conntrack.Defence)) {
		ch <- gauge(dDefence, b2f(st.Conntrack.Defence[m]), m)
	}
	for _, s := range st.BGP {
		peer := s.Peer.String()
		ch <- gauge(dBGPUp, b2f(s.State == "established"), peer)
		known := false
		for _, state := range bgpStates {
			known = known || state == s.State
			ch <- gauge(dBGPState, b2f(state == s.State), peer, state)
		}
		if !known && s.State != "" {
			ch <- gauge(dBGPState, 1, peer, s.State)
		}
		ch <- gauge(dBGPUptime, s.Uptime.Seconds(), peer)
		ch <- gauge(dBGPAdvertis, float64(s.Advertised), peer)
	}
}

func unix(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

func collectServices(ch chan<- prometheus.Metric, svcs []api.ServiceInfo) {
	for i := range svcs {
		s := &svcs[i]
		l := []string{s.Name, s.VIP.String(), portLabel(s.Port), s.Proto.String()}
		ch <- counter(dSvcPackets, s.Counters.Packets, l...)
		ch <- counter(dSvcBytes, s.Counters.Bytes, l...)
		ch <- counter(dSvcNewFlows, s.Counters.NewFlows, l...)
		ch <- gauge(dSvcUp, b2f(s.ActivePool != ""), s.Name)
		ch <- gauge(dSvcTable, float64(s.TableSize), s.Name)
		for j := range s.Backends {
			b := &s.Backends[j]
			bl := []string{s.Name, b.Address.String()}
			ch <- counter(dBePackets, b.Counters.Packets, bl...)
			ch <- counter(dBeBytes, b.Counters.Bytes, bl...)
			ch <- counter(dBeNewFlows, b.Counters.NewFlows, bl...)
			ch <- gauge(dBeHealthy, b2f(b.Health.Healthy || b.Health.Check == ""), bl...)
			ch <- gauge(dBeWeight, float64(b.Weight), bl...)
			ch <- gauge(dBeDraining, b2f(b.Drain), bl...)
			ch <- gauge(dBeActive, b2f(b.InDataPlane), bl...)
			ch <- gauge(dBeEntries, float64(b.TableEntries), bl...)
			if b.TrackedFlows != nil {
				ch <- gauge(dBeTracked, float64(*b.TrackedFlows), bl...)
			}
		}
	}
	collectMethods(ch, svcs) // methods.go
}

// globalPrefixes route a global counter to its metric by name prefix.
var globalPrefixes = []struct {
	prefix string
	desc   *prometheus.Desc
}{
	{"pass_", dPassed}, {"drop_", dDropped}, {"forward_", dForwarded}, {"ct_", dCTLookups},
	{"frag_", dFragments}, {"nat_", dNAT},
}

func collectGlobal(ch chan<- prometheus.Metric, glob []api.Counter) {
	for _, g := range glob {
		d, label := dEvents, g.Name
		for _, p := range globalPrefixes {
			if rest, ok := strings.CutPrefix(g.Name, p.prefix); ok {
				d, label = p.desc, rest
				break
			}
		}
		ch <- counter(d, g.Value, label)
	}
}
