package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/datapath"
)

// soakCounters are the counters the soak compares, summed over both
// nodes: xlb's per-service counters by protocol and its global counters,
// the backends' servers' datagrams through the VIP, and the client
// namespace's TCP segments sent (/proc/net/snmp Tcp OutSegs plus
// RetransSegs).
type soakCounters struct {
	Packets, NewFlows map[uint8]uint64 // by IP protocol
	Stats             map[string]uint64
	BackendUDP        int64
	ClientTCPSegs     uint64
}

func (r *soakRecorder) counters(t *testing.T) soakCounters {
	t.Helper()
	c := soakCounters{Packets: map[uint8]uint64{}, NewFlows: map[uint8]uint64{}, Stats: map[string]uint64{}}
	for i := range r.s.daemons {
		p, err := datapath.OpenPinned(r.s.pinDir(i))
		if err != nil {
			t.Fatal(err)
		}
		svcs, err := p.Services()
		if err != nil {
			p.Close()
			t.Fatal(err)
		}
		for _, s := range svcs {
			c.Packets[s.Key.Proto] += s.Counters.Packets
			c.NewFlows[s.Key.Proto] += s.Counters.NewFlows
		}
		st, err := p.Stats()
		p.Close()
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range st {
			c.Stats[k] += v
		}
	}
	for _, b := range r.s.Servers() {
		c.BackendUDP += b.UDPDatagrams()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := r.s.Client.Run(ctx, "cat", "/proc/net/snmp")
	if err != nil {
		t.Fatalf("client's /proc/net/snmp: %v", err)
	}
	// OutSegs counts new data and segments without data (SYN, FIN and
	// their retransmissions excepted); RetransSegs the retransmissions.
	segs, err := snmpField(string(out), "Tcp", "OutSegs")
	if err != nil {
		t.Fatal(err)
	}
	retrans, err := snmpField(string(out), "Tcp", "RetransSegs")
	if err != nil {
		t.Fatal(err)
	}
	c.ClientTCPSegs = segs + retrans
	return c
}

// snmpField reads field of group from /proc/net/snmp's text (a line of
// names, then a line of values, per group).
func snmpField(text, group, field string) (uint64, error) {
	lines := strings.Split(text, "\n")
	for i := 0; i+1 < len(lines); i++ {
		names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) == 0 || names[0] != group+":" || len(values) != len(names) {
			continue
		}
		for k, n := range names {
			if n == field {
				return strconv.ParseUint(values[k], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("no %s %s in /proc/net/snmp", group, field)
}

// checkSoakCounters compares what xlb counted with what the clients sent,
// from base to end (traffic stopped, its last packets delivered):
//   - UDP: every datagram a client wrote is one packet that xlb forwards,
//     and one that a backend's echo receives: all three are equal;
//   - TCP: every segment the client namespace sent (data, ACKs, FINs,
//     resets, retransmissions: OutSegs + RetransSegs) goes to a VIP: xlb
//     forwards exactly as many, none dropped;
//   - new flows: each connection the clients opened and each UDP flow
//     they started is one (its first packet misses on its node; a peer's
//     synced entry is not counted again), but for a short UDP flow whose
//     source port an earlier one used within the UDP timeout (as the
//     test clock runs, plus 2 s): it may find that flow's entry; beyond that, a flow is new again
//     only when its entry could no longer carry it: the flapped backend's
//     flows (a TCP session that broke on it, a UDP flow that moved off it),
//     and at most one churn connection or flow in flight per churn client
//     per flap (web4, web6, UDP). Any other new flow ("unexplained" in
//     the summary) is a lost entry, even when the scheduler sent it back
//     to its backend: none is allowed.
func checkSoakCounters(t *testing.T, base, end soakCounters, res soakTrafficResult, br soakBreaks, flaps int) map[string]any {
	t.Helper()
	const tcp, udp = 6, 17
	udpXLB, tcpXLB := end.Packets[udp]-base.Packets[udp], end.Packets[tcp]-base.Packets[tcp]
	backendUDP := end.BackendUDP - base.BackendUDP
	segs := end.ClientTCPSegs - base.ClientTCPSegs
	dials := len(res.TCP.Sessions)
	for _, s := range res.TCP.Sessions {
		dials += s.Reconnects
	}
	for _, h := range res.HTTP {
		dials += h.Requests
	}
	newTCP, newUDP := end.NewFlows[tcp]-base.NewFlows[tcp], end.NewFlows[udp]-base.NewFlows[udp]
	udpStarted := len(res.UDPFlows) + res.Churn.Flows
	udpMin := udpStarted - res.Churn.Repeats
	tcpExp, udpExp := dials+br.TCPApart+2*flaps, udpStarted+br.UDPApart+flaps
	tcpMax, udpMax := uint64(tcpExp), uint64(udpExp)
	over := func(n uint64, exp int) uint64 { return n - min(n, uint64(exp)) }
	drops := map[string]uint64{}
	for k, v := range end.Stats {
		if strings.HasPrefix(k, "drop_") && v > base.Stats[k] {
			drops[k] = v - base.Stats[k]
		}
	}
	out := map[string]any{"udp_sent": res.UDPSent, "udp_xlb": udpXLB, "udp_backends": backendUDP,
		"tcp_client_segments": segs, "tcp_xlb": tcpXLB, "tcp_dials": dials, "tcp_new_flows_xlb": newTCP, "tcp_new_flows_max": tcpMax,
		"udp_flows_started": udpStarted, "udp_churn_repeats": res.Churn.Repeats, "udp_new_flows_xlb": newUDP, "udp_new_flows_max": udpMax,
		"tcp_new_flows_unexplained": over(newTCP, tcpExp), "udp_new_flows_unexplained": over(newUDP, udpExp), "drops": drops}
	for _, k := range []string{"ct_miss", "ct_remote_hit", "ct_reselect"} {
		out[k] = end.Stats[k] - base.Stats[k]
	}
	if udpXLB != uint64(res.UDPSent) || backendUDP != int64(res.UDPSent) {
		t.Errorf("UDP: the clients sent %d datagrams, xlb forwarded %d, the backends received %d", res.UDPSent, udpXLB, backendUDP)
	}
	if tcpXLB != segs {
		t.Errorf("TCP: the client namespace sent %d segments, xlb forwarded %d (drops %v)", segs, tcpXLB, drops)
	}
	if newTCP < uint64(dials) || newTCP > tcpMax {
		t.Errorf("TCP: %d new flows counted for %d connections opened; want %d to %d", newTCP, dials, dials, tcpMax)
	}
	if newUDP < uint64(udpMin) || newUDP > udpMax {
		t.Errorf("UDP: %d new flows counted for %d flows started (%d from a source port of a flow still tracked); want %d to %d",
			newUDP, udpStarted, res.Churn.Repeats, udpMin, udpMax)
	}
	return out
}

// checkSoakBreaks: no session, flow or request to a live backend broke.
// The flapped backend's may: a TCP session that broke on it, a UDP flow
// that ever had it, HTTP errors and unanswered churn datagrams while its
// check failed (or the check after) are counted apart.
func checkSoakBreaks(t *testing.T, res soakTrafficResult, ev soakEvents) soakBreaks {
	t.Helper()
	var br soakBreaks
	live, apart := &br.Live, &br.Apart
	flapped := fmt.Sprintf("b%d", soakFlapped+1)
	for _, b := range res.TCP.Breaks {
		if b.Backend == flapped {
			br.TCPApart++
			continue
		}
		*live++
		t.Errorf("TCP session to a live backend broke: %v", b)
	}
	for i, f := range res.UDPFlows {
		for k := 1; k < len(f.Backends); k++ {
			// Off the flapped backend, or back onto it after having
			// left it (a flow of the flapped backend switching back).
			if f.Backends[k-1] == flapped || f.Backends[k] == flapped && slices.Contains(f.Backends[:k-1], flapped) {
				br.UDPApart++
				if f.Backends[k] == flapped {
					br.UDPBack++
				}
				continue
			}
			*live++
			t.Errorf("UDP flow %d moved from %s to %s at %s", i, f.Backends[k-1], f.Backends[k], f.Changes[k].Format("15:04:05.000"))
		}
	}
	for name, h := range res.HTTP {
		for _, at := range h.Errors {
			if ev.inFlap(at) {
				*apart++
				continue
			}
			*live++
			t.Errorf("%s: a request failed at %s, outside every flap (first errors: %v)", name, at.Format("15:04:05.000"), h.First)
		}
		for b, n := range h.Other {
			if b != flapped {
				*live += n
				t.Errorf("%s: %d answers of %s were not 200", name, n, b)
			}
		}
	}
	for _, at := range res.Churn.Unanswered {
		if ev.inFlap(at) {
			*apart++
			continue
		}
		*live++
		t.Errorf("UDP churn: a datagram got no echo at %s, outside every flap", at.Format("15:04:05.000"))
	}
	for _, s := range res.Churn.Split {
		if strings.Contains(s, flapped) {
			br.UDPApart++
			continue
		}
		*live++
		t.Errorf("UDP churn: a flow was answered by %s", s)
	}
	br.Apart += br.TCPApart + br.UDPApart
	t.Logf("breaks: %d to live backends, %d apart (the flapped backend %s: %d TCP sessions, %d UDP flow moves, %d of them back onto it)", br.Live, br.Apart, flapped, br.TCPApart, br.UDPApart, br.UDPBack)
	return br
}

// soakBreaks counts what broke: Live must be 0; Apart is on the flapped
// backend, of which TCPApart TCP sessions and UDPApart UDP flows that
// moved off it, or back onto it (UDPBack of them) when it came back.
type soakBreaks struct {
	Live, Apart, TCPApart, UDPApart, UDPBack int
}
