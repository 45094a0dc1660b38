package ctl

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/xlbproject/xlb/api/xlb/v1"
	"github.com/xlbproject/xlb/internal/api"
)

var jsonOpts = api.JSONOptions

// printJSON prints m indented. protojson's own spacing is deliberately
// unstable, so it is normalised through encoding/json.
func (c *CLI) printJSON(m proto.Message) error {
	b, err := jsonOpts.Marshal(m)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = c.Out.Write(out.Bytes())
	return err
}

// printJSONLine prints m on one line (stats --watch: one object per sample).
func (c *CLI) printJSONLine(m proto.Message) error {
	b, err := jsonOpts.Marshal(m)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = c.Out.Write(out.Bytes())
	return err
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func readAll(r io.Reader) ([]byte, error) { return io.ReadAll(r) }

func (c *CLI) table() *tabwriter.Writer { return tabwriter.NewWriter(c.Out, 0, 8, 2, ' ', 0) }

// when formats a timestamp with its age: "2023-11-14 22:13:20 UTC (5s ago)";
// "-" when unset.
func (c *CLI) when(t *timestamppb.Timestamp) string {
	if t == nil {
		return "-"
	}
	tt := t.AsTime().In(time.Local)
	return tt.Format("2006-01-02 15:04:05 MST") + " (" + c.ago(t) + ")"
}

// ago is the age of t, rounded to the second: "5s ago", "-" when unset.
func (c *CLI) ago(t *timestamppb.Timestamp) string {
	if t == nil {
		return "-"
	}
	d := c.Now().Sub(t.AsTime())
	if d < 0 {
		return "in the future"
	}
	return d.Round(time.Second).String() + " ago"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func protoName(p pb.Protocol) string {
	switch p {
	case pb.Protocol_PROTOCOL_TCP:
		return "TCP"
	case pb.Protocol_PROTOCOL_UDP:
		return "UDP"
	}
	return strconv.Itoa(int(p))
}

// vipPort formats a VIP: "10.0.0.100:80", "[2001:db8::100]:53", ":*" for
// all ports.
func vipPort(vip string, port uint32) string {
	if a, err := netip.ParseAddr(vip); err == nil && a.Is6() {
		vip = "[" + vip + "]"
	}
	if port == 0 {
		return vip + ":*"
	}
	return vip + ":" + strconv.Itoa(int(port))
}

func (c *CLI) printStatus(st *pb.StatusResponse) error {
	w := c.table()
	fmt.Fprintf(w, "node\t%s\n", st.Node)
	fmt.Fprintf(w, "forwarder\t%s, %s XDP, program %d, pinned at %s\n", st.Interface, st.XdpMode, st.ProgramId, st.PinDir)
	fmt.Fprintf(w, "xlbd\t%s, started %s\n", orDash(st.Version), c.when(st.StartedAt))
	sc := st.GetSelfCheck()
	if sc.GetOk() {
		fmt.Fprintf(w, "self-check\tok (checked %s)\n", c.ago(sc.CheckedAt))
	} else {
		fmt.Fprintf(w, "self-check\tFAILING: %s (checked %s): VIPs are withdrawn\n", sc.GetLastError(), c.ago(sc.GetCheckedAt()))
	}
	if sc.GetOk() && sc.GetLastFailureAt() != nil {
		fmt.Fprintf(w, "\tlast failure %s: %s\n", c.ago(sc.LastFailureAt), sc.LastError)
	}
	c.printDelivery(w, st)
	if st.Drained {
		fmt.Fprintf(w, "node drain\tDRAINED: VIPs withdrawn ('xlbctl node undrain' to announce again)\n")
	} else {
		fmt.Fprintf(w, "node drain\tno\n")
	}
	cfg := st.GetConfig()
	fmt.Fprintf(w, "config\t%s, generation %d, committed %s\n", orDash(cfg.GetSource()), cfg.GetGeneration(), c.when(cfg.GetCommittedAt()))
	fmt.Fprintf(w, "\t%d services, %d backends\n", cfg.GetServices(), cfg.GetBackends())
	if st.Overrides > 0 {
		fmt.Fprintf(w, "overrides\t%d runtime backend overrides ('xlbctl backends' marks them with *)\n", st.Overrides)
	} else {
		fmt.Fprintf(w, "overrides\tnone\n")
	}
	switch {
	case st.MetricsAddr != "":
		fmt.Fprintf(w, "metrics\thttp://%s/metrics\n", st.MetricsAddr)
	case st.MetricsNote != "":
		fmt.Fprintf(w, "metrics\tnone: %s\n", st.MetricsNote)
	}
	ct := st.GetConntrack()
	if ct.InUse != nil && ct.Capacity > 0 {
		fmt.Fprintf(w, "conntrack\t%d of %d entries in use (%.1f%%)\n", ct.GetInUse(), ct.Capacity, 100*float64(ct.GetInUse())/float64(ct.Capacity))
	} else {
		fmt.Fprintf(w, "conntrack\t%d entries\n", ct.GetCapacity())
	}
	if on := defenceOn(ct.GetDefence()); ct.Fill != nil {
		fmt.Fprintf(w, "defence\t%s (fullest CPU's slice %.1f%% full)\n", on, 100*ct.GetFill())
	}
	if e := st.GetExternalRoutes(); e != nil {
		fmt.Fprintf(w, "bgp\texternal: %s\n", externalRoutes(e))
	} else if len(st.BgpSessions) == 0 {
		fmt.Fprintf(w, "bgp\tnot configured\n")
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(st.BgpSessions) == 0 {
		return c.printCluster(st.GetCluster()) // clusterstatus.go
	}
	fmt.Fprintln(c.Out, "bgp")
	w = c.table()
	fmt.Fprintln(w, "  Peer\tASN\tState\tUptime\tAdvertised\tReceived\tGracefulRestart")
	for _, s := range st.BgpSessions {
		up := "-"
		if s.State == "established" {
			up = s.Uptime.AsDuration().Round(time.Second).String()
		}
		fmt.Fprintf(w, "  %s\t%d\t%s\t%s\t%d\t%d\t%s\n", s.Peer, s.Asn, s.State, up, s.Advertised, s.Received, yesNo(s.GracefulRestart))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return c.printCluster(st.GetCluster())
}

// printDelivery prints the transmit check and the prober's probes.
func (c *CLI) printDelivery(w io.Writer, st *pb.StatusResponse) {
	if tx := st.GetTxCheck(); tx == nil {
		fmt.Fprintf(w, "tx check\t-\n")
	} else if !tx.Ok {
		fmt.Fprintf(w, "tx check\tFAILING: %s\n", tx.Detail)
	} else {
		fmt.Fprintf(w, "tx check\tok%s\n", parenthesized(tx.Detail))
	}
	pr := st.GetProber()
	switch {
	case !pr.GetEnabled():
		fmt.Fprintf(w, "prober\toff (xlbd --probe-interval)\n")
	case pr.Ok:
		fmt.Fprintf(w, "prober\tok\n")
	default:
		fmt.Fprintf(w, "prober\tFAILING: no VIP answers its probes: VIPs are withdrawn\n")
	}
	for _, p := range pr.GetProbes() {
		if p.Up {
			fmt.Fprintf(w, "\t%s up, %s (checked %s)\n", p.Vip, p.Latency.AsDuration().Round(time.Microsecond), c.ago(p.CheckedAt))
		} else {
			fmt.Fprintf(w, "\t%s DOWN: %s (checked %s)\n", p.Vip, p.Error, c.ago(p.CheckedAt))
		}
	}
}

// probeCol is the prober's verdict on a VIP in one cell: "up" and the
// probe's round trip, "DOWN", or "-" (prober off, or not probed yet).
func probeCol(p *pb.Probe) string {
	switch {
	case p == nil:
		return "-"
	case p.Up:
		return "up " + p.Latency.AsDuration().Round(time.Microsecond).String()
	default:
		return "DOWN"
	}
}

func parenthesized(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// health is a backend's health in one word: up, down, ? (no probe yet),
// - (not checked).
func health(h *pb.Health) string {
	switch {
	case h.GetCheck() == "":
		return "-"
	case !h.GetKnown():
		return "?"
	case h.GetHealthy():
		return "up"
	}
	return "down"
}

// state is a backend's state, with a * when an override set it.
func state(b *pb.Backend) string {
	s := "active"
	if b.State == pb.BackendState_BACKEND_STATE_DRAIN {
		s = "drain"
	}
	if o := b.GetOverride(); o != nil && o.Drain != nil {
		s += "*"
	}
	if !b.InDataPlane {
		s += " (absent)"
	}
	return s
}

func weight(b *pb.Backend) string {
	s := strconv.Itoa(int(b.Weight))
	if o := b.GetOverride(); o != nil && o.Weight != nil {
		s += "*"
	}
	return s
}

func share(entries, size uint32) string {
	if size == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(entries)/float64(size))
}

func counters(c *pb.Counters) string {
	return fmt.Sprintf("%d\t%d\t%d", c.GetPackets(), c.GetBytes(), c.GetNewFlows())
}

func rates(r *pb.Rates) string {
	if r == nil {
		return "-\t-\t-"
	}
	return fmt.Sprintf("%.0f\t%.0f\t%.0f", r.Packets, r.Bytes, r.NewFlows)
}

const overrideNote = "* runtime override ('xlbctl reset ADDR' returns to the config)"

// flushTable writes out a table of backends, then the note on overrides
// when one of them has one.
func (c *CLI) flushTable(w *tabwriter.Writer, overridden bool) error {
	if err := w.Flush(); err != nil {
		return err
	}
	if overridden {
		fmt.Fprintln(c.Out, overrideNote)
	}
	return nil
}

// rateHeads are the heads of the rate columns of a table when withRates,
// else nothing.
func rateHeads(withRates bool) string {
	if !withRates {
		return ""
	}
	return "\tPkt/s\tByte/s\tFlow/s"
}

// rateCols are a row's rate columns when withRates, else nothing.
func rateCols(withRates bool, r *pb.Rates) string {
	if !withRates {
		return ""
	}
	return "\t" + rates(r)
}

func (c *CLI) printServices(r *pb.ListServicesResponse, withRates bool) error {
	w := c.table()
	rh := rateHeads(withRates)
	fmt.Fprintf(w, "Prot\tLocalAddress:Port\tService\tMethod\tSched\tPersist\tM\tActivePool\tBackends\tProbe\tPackets\tBytes\tNewFlows%s\tActiveConn\tInActConn\n", rh)
	fmt.Fprintf(w, "  ->\tRemoteAddress\tPool\tForward\tWeight\t\tState\tHealth\tShare\t\tPackets\tBytes\tNewFlows%s\tActiveConn\tInActConn\n", rh)
	overridden := false
	for _, s := range r.Services {
		active := s.ActivePool
		if active == "" {
			active = "NONE"
		}
		var act, inact int64
		for _, b := range s.Backends {
			act, inact = act+b.ActiveConns, inact+b.InactConns
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s%s\t%d\t%d", protoName(s.Protocol), vipPort(s.Vip, s.Port), s.Name, s.Encap,
			s.Scheduler, persistCol(s), s.TableSize, active, len(s.Backends), probeCol(s.Probe), counters(s.Counters), rateCols(withRates, s.Rates), act, inact)
		fmt.Fprintln(w, line)
		for _, b := range s.Backends {
			overridden = overridden || b.Override != nil
			line := fmt.Sprintf("  ->\t%s\t%s\t%s\t%s\t\t%s\t%s\t%s\t\t%s%s\t%d\t%d", b.Address, b.Pool, forward(b), weight(b), state(b), health(b.Health),
				share(b.TableEntries, s.TableSize), counters(b.Counters), rateCols(withRates, b.Rates), b.ActiveConns, b.InactConns)
			fmt.Fprintln(w, line)
		}
	}
	return c.flushTable(w, overridden)
}

// persistCol is a service's Persist column: "-" without persistence,
// else the template timeout, the client prefix when it is shorter than
// the whole address of the VIP's family, and the group the service
// shares templates with: "300s /24 group=mail".
func persistCol(s *pb.Service) string {
	p := s.GetPersistence()
	if p == nil {
		return "-"
	}
	col := strconv.FormatInt(int64(p.GetTimeout().AsDuration().Seconds()), 10) + "s"
	if a, err := netip.ParseAddr(s.Vip); err == nil {
		switch {
		case a.Is4() && p.Netmask != 0 && p.Netmask < 32:
			col += fmt.Sprintf(" /%d", p.Netmask)
		case a.Is6() && p.Netmask6 != 0 && p.Netmask6 < 128:
			col += fmt.Sprintf(" /%d", p.Netmask6)
		}
	}
	if p.Group != "" {
		col += " group=" + p.Group
	}
	return col
}

func (c *CLI) printBackends(r *pb.ListBackendsResponse, withRates bool) error {
	w := c.table()
	rh := rateHeads(withRates)
	fmt.Fprintf(w, "Service\tBackend\tPool\tForward\tWeight\tState\tHealth\tCheck\tSince\tEntries\tPackets\tBytes\tNewFlows\tTracked%s\tLastError\n", rh)
	overridden := false
	for _, b := range r.Backends {
		overridden = overridden || b.Override != nil
		tracked := "-"
		if b.TrackedFlows != nil {
			tracked = strconv.FormatUint(b.GetTrackedFlows(), 10)
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s%s", b.Service, b.Address, b.Pool, forward(b), weight(b), state(b),
			health(b.Health), orDash(b.Health.GetCheck()), c.ago(b.Health.GetSince()), b.TableEntries, counters(b.Counters), tracked,
			rateCols(withRates, b.Rates))
		fmt.Fprintf(w, "%s\t%s\n", line, orDash(b.Health.GetLastError()))
	}
	return c.flushTable(w, overridden)
}

func (c *CLI) printStats(r *pb.CountersResponse, withRates bool) error {
	at := "-"
	if r.GetSample().GetAt() != nil {
		at = r.Sample.At.AsTime().In(time.Local).Format("2006-01-02 15:04:05 MST")
	}
	if withRates {
		fmt.Fprintf(c.Out, "counters at %s, rates over %v\n\n", at, r.GetSample().GetInterval().AsDuration().Round(time.Millisecond))
	} else {
		fmt.Fprintf(c.Out, "counters at %s ('xlbctl stats --watch' for rates)\n\n", at)
	}
	w := c.table()
	if withRates {
		fmt.Fprintln(w, "Counter\tTotal\tRate/s")
	} else {
		fmt.Fprintln(w, "Counter\tTotal")
	}
	for _, g := range r.Global {
		if withRates {
			fmt.Fprintf(w, "%s\t%d\t%.1f\n", g.Name, g.Value, g.Rate)
		} else {
			fmt.Fprintf(w, "%s\t%d\n", g.Name, g.Value)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(c.Out)
	w = c.table()
	rh := rateHeads(withRates)
	fmt.Fprintf(w, "Prot\tLocalAddress:Port\tService\tPackets\tBytes\tNewFlows%s\n", rh)
	fmt.Fprintf(w, "  ->\tRemoteAddress\t\tPackets\tBytes\tNewFlows%s\n", rh)
	bySvc := map[string][]*pb.BackendCounters{}
	for _, b := range r.Backends {
		bySvc[b.Service] = append(bySvc[b.Service], b)
	}
	for _, s := range r.Services {
		line := fmt.Sprintf("%s\t%s\t%s\t%s%s", protoName(s.Protocol), vipPort(s.Vip, s.Port), s.Name, counters(s.Counters),
			rateCols(withRates, s.Rates))
		fmt.Fprintln(w, line)
		for _, b := range bySvc[s.Name] {
			line := fmt.Sprintf("  ->\t%s\t\t%s%s", b.Address, counters(b.Counters), rateCols(withRates, b.Rates))
			fmt.Fprintln(w, line)
		}
	}
	return w.Flush()
}

func (c *CLI) printApply(r *pb.ApplyConfigResponse) error {
	d := r.GetDiff()
	var lines []string
	for _, s := range d.ServicesAdded {
		lines = append(lines, "+ service "+s)
	}
	for _, s := range d.ServicesRemoved {
		lines = append(lines, "- service "+s)
	}
	for _, s := range d.ServicesChanged {
		lines = append(lines, "~ service "+s)
	}
	for _, b := range d.BackendsAdded {
		lines = append(lines, "+ backend "+b.Service+"/"+b.Address)
	}
	for _, b := range d.BackendsRemoved {
		lines = append(lines, "- backend "+b.Service+"/"+b.Address)
	}
	for _, b := range d.BackendsChanged {
		lines = append(lines, "~ backend "+b.Service+"/"+b.Address)
	}
	for _, h := range d.HealthChecksChanged {
		lines = append(lines, "~ health check "+h)
	}
	if d.NodeChanged {
		lines = append(lines, "~ node settings")
	}
	if d.BgpChanged {
		lines = append(lines, "~ bgp")
	}
	if len(lines) == 0 {
		fmt.Fprintln(c.Out, "no change")
	} else {
		fmt.Fprintf(c.Out, "services +%d -%d ~%d, backends +%d -%d ~%d\n",
			len(d.ServicesAdded), len(d.ServicesRemoved), len(d.ServicesChanged),
			len(d.BackendsAdded), len(d.BackendsRemoved), len(d.BackendsChanged))
		for _, l := range lines {
			fmt.Fprintln(c.Out, "  "+l)
		}
	}
	if r.Committed {
		fmt.Fprintf(c.Out, "committed: generation %d\n", r.Generation)
	} else {
		fmt.Fprintln(c.Out, "dry run: nothing committed")
	}
	return nil
}

func (c *CLI) printConntrack(r *pb.ConntrackDumpResponse) error {
	if r.Templates {
		return c.printTemplates(r)
	}
	w := c.table()
	fmt.Fprintln(w, "CPU\tBucket\tWay\tTag\tReal\tBackend\tService\tState\tIdle")
	for _, e := range r.Entries {
		st := strings.ToLower(strings.TrimPrefix(e.State.String(), "CONNTRACK_STATE_"))
		if e.Expired {
			st += " (expired)"
		}
		fmt.Fprintf(w, "%d\t%d\t%d\t0x%07x\t%d\t%s\t%s\t%s\t%s\n", e.Cpu, e.Bucket, e.Way, e.Tag, e.RealId,
			orDash(e.Backend), orDash(e.Service), st, e.Age.AsDuration().Round(100*time.Millisecond))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	use := ""
	if r.Capacity > 0 {
		use = fmt.Sprintf(" (%.1f%%)", 100*float64(r.InUse)/float64(r.Capacity))
	}
	fmt.Fprintf(c.Out, "%d of %d matching entries shown; %d in use of %d%s.\n", len(r.Entries), r.Matched, r.InUse, r.Capacity, use)
	if r.Truncated {
		fmt.Fprintln(c.Out, "More match: raise --limit or narrow with --service, --backend, --state.")
	}
	fmt.Fprintln(c.Out, "The table is keyed by the flow hash (bucket, 27-bit tag): the 5-tuple is not stored.")
	return nil
}

func (c *CLI) printExplain(r *pb.ExplainResponse, hexDump bool) error {
	w := c.table()
	fmt.Fprintf(w, "verdict\t%s\n", r.Verdict)
	if r.Service != "" {
		fmt.Fprintf(w, "service\t%s\n", r.Service)
	}
	if r.Backend != "" {
		fmt.Fprintf(w, "backend\t%s (real %d, %s)\n", r.Backend, r.RealId, r.Encap)
	}
	fmt.Fprintf(w, "conntrack\t%s\n", strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(r.Conntrack.String(), "CONNTRACK_RESULT_")), "_", "-"))
	if r.Reason != "" {
		fmt.Fprintf(w, "reason\t%s\n", r.Reason)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(r.Headers) > 0 {
		fmt.Fprintln(c.Out, "output")
		for _, h := range r.Headers {
			fmt.Fprintln(c.Out, "  "+h)
		}
	}
	if hexDump && len(r.Frame) > 0 {
		fmt.Fprint(c.Out, hex.Dump(r.Frame))
	}
	fmt.Fprintln(c.Out, "(read only: run through the live program as a self-check probe; no conntrack entry written, no service or backend counter moved)")
	return nil
}

// externalRoutes describes the routes of bgp.mode external.
func externalRoutes(e *pb.ExternalRoutes) string {
	if e.Error != "" {
		return fmt.Sprintf("routes in %s unreadable: %s", e.Where, e.Error)
	}
	if len(e.Prefixes) == 0 {
		return fmt.Sprintf("no VIP route in %s (the routing daemon announces nothing)", e.Where)
	}
	return fmt.Sprintf("%d VIP routes in %s for the routing daemon: %s", len(e.Prefixes), e.Where, strings.Join(e.Prefixes, " "))
}

// printTemplates prints persistence templates (conntrack --templates).
func (c *CLI) printTemplates(r *pb.ConntrackDumpResponse) error {
	w := c.table()
	fmt.Fprintln(w, "Slot\tTag\tReal\tBackend\tService\tExpires in")
	for _, e := range r.Entries {
		left := e.Age.AsDuration().Round(100 * time.Millisecond).String()
		fmt.Fprintf(w, "%d\t0x%08x\t%d\t%s\t%s\t%s\n", e.Bucket, e.Tag, e.RealId, orDash(e.Backend), orDash(e.Service), left)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(c.Out, "%d of %d matching templates shown; %d in use of %d slots.\n", len(r.Entries), r.Matched, r.InUse, r.Capacity)
	return nil
}

// defenceOn lists the defence modes on, in the order they escalate, or
// says none is.
func defenceOn(modes map[string]bool) string {
	var on []string
	for _, m := range []string{"secure_tcp", "drop_entry", "drop_packet"} {
		if modes[m] {
			on = append(on, m)
		}
	}
	if len(on) == 0 {
		return "off"
	}
	return strings.Join(on, ", ") + " on"
}
