package report

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"time"

	"github.com/xlbproject/xlb/bench/harness"
	"github.com/xlbproject/xlb/bench/stats"
	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/peersync"
	"github.com/xlbproject/xlb/internal/state"
)

// syncPart measures connection sync: the forwarder's new-flow cost with
// its decision records on and off (side by side, syncNewFlow), the
// flows one core sends (encode, HMAC, UDP send on loopback) and applies
// (receive checks, HMAC, xlb_sync_apply), and the bytes per synced flow on
// the wire.
func (b *runner) syncPart() error {
	dir, err := privatePinDir("sync")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	dp, err := datapath.Load(datapath.Options{Interface: "lo", PinDir: dir, ConntrackEntries: 1 << 20,
		MaxServices: 16, MaxReals: 64, Logger: quietLogger()})
	if err != nil {
		return err
	}
	defer dp.Close()
	if _, err := dp.Apply(syncBenchState()); err != nil {
		return err
	}
	if err := b.syncNewFlow(); err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	key := bytes.Repeat([]byte{0x42}, 32)
	if err := b.syncSend(key); err != nil {
		return err
	}
	return b.syncApply(dp, key)
}

var (
	syncVIP = netip.MustParseAddr("10.200.0.1")
	syncBEs = []netip.Addr{netip.MustParseAddr("10.0.1.1"), netip.MustParseAddr("10.0.1.2"),
		netip.MustParseAddr("10.0.1.3"), netip.MustParseAddr("10.0.1.4")}
)

// syncBenchState: one TCP VIP, four backends, a small table.
func syncBenchState() *state.State {
	st := state.Empty()
	st.Node = state.Node{Addr4: netip.MustParseAddr("10.0.0.11"), GatewayMAC: net.HardwareAddr{2, 0, 0, 0, 0, 0xfe},
		Timeouts: state.Timeouts{TCPSyn: time.Minute, TCP: 15 * time.Minute, TCPFin: 2 * time.Minute, UDP: 5 * time.Minute}}
	tbl := make([]uint32, 251)
	for i, a := range syncBEs {
		st.Reals.Set(uint32(i+1), state.Real{Addr: a, SvcID: 1, Active: true})
	}
	for i := range tbl {
		tbl[i] = uint32(i%len(syncBEs) + 1)
	}
	st.Services[state.VIPKey{Addr: syncVIP, Port: 80, Proto: 6}] = &state.Service{SvcID: 1, Encap: state.EncapGRE, Table: tbl}
	return st
}

// syncNewFlow measures the forwarder's new-flow cost with its decision
// records off and on as the pkt part measures every per-packet figure
// (harness.MeasureSync: many distinct new flows per kernel-timed run, the
// wrapper's cost subtracted, median of the runs, off and on in alternating
// runs), with a reader taking the records on another CPU as xlbd does. A
// hit writes no record: its figure is reported beside as the check.
func (b *runner) syncNewFlow() error {
	o := b.pktOptions()
	o.Scenarios = []harness.Scenario{harness.NewFlow, harness.TCPHit4}
	b.printf("  BPF_PROG_TEST_RUN on CPU %d, %d runs of %d packets per figure, sync off and on side by side\n", o.CPU, o.Runs, o.Repeat)
	res, err := harness.MeasureSync(o)
	if err != nil {
		return err
	}
	fig := func(r harness.Results, s harness.Scenario) harness.Figure {
		f, _ := r.Figure(s)
		return f
	}
	off, on := fig(res[0], harness.NewFlow), fig(res[1], harness.NewFlow)
	b.put("sync.new_flow_ns_sync_off", off.Ns, "ns", fmt.Sprintf("a new flow (SYN) every packet, %d packets in %d runs (best %.0f)", off.Packets, len(off.Runs), off.Best))
	b.put("sync.new_flow_ns_sync_on", on.Ns, "ns", fmt.Sprintf("the same with decision records on, none lost (best %.0f)", on.Best))
	d := pairedDiff(off, on)
	b.put("sync.new_flow_record_ns", d, "ns", "on minus off, median of the rounds' differences (each round has one run of each)")
	b.put("sync.new_flow_overhead_pct", 100*d/off.Ns, "%", fmt.Sprintf("that over the figure off (medians alone: %+.1f%%)", 100*(on.Ns-off.Ns)/off.Ns))
	hoff, hon := fig(res[0], harness.TCPHit4), fig(res[1], harness.TCPHit4)
	b.put("sync.hit_ns_sync_off", hoff.Ns, "ns", "a packet of a tracked flow (no record)")
	b.put("sync.hit_ns_sync_on", hon.Ns, "ns", "the same with decision records on")
	return nil
}

// pairedDiff is the median over the rounds of on's figure minus off's:
// run i of each is paired with its own calibration run and both ran in
// round i, so drift that moves a whole round cancels.
func pairedDiff(off, on harness.Figure) float64 {
	n := min(len(off.Runs), len(on.Runs))
	d := make([]float64, n)
	for i := range d {
		d[i] = (on.Runs[i] - on.Calib[i]) - (off.Runs[i] - off.Calib[i])
	}
	return stats.Median(d)
}

// syncFlows builds n flow records.
func syncFlows(n int) []peersync.Flow {
	out := make([]peersync.Flow, n)
	for i := range out {
		out[i] = peersync.Flow{VIP: syncVIP, Port: 80, Proto: 6, Backend: syncBEs[i%len(syncBEs)],
			Hash: uint64(i) * 0x9E3779B97F4A7C15, HashBits: 64, State: 2}
	}
	return out
}

const syncBenchFlows = 1_000_000

// syncSend: encode, authenticate and send 1 M flows in full messages
// over loopback UDP, one goroutine.
func (b *runner) syncSend(key []byte) error {
	rx, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return err
	}
	defer rx.Close()
	tx, err := net.DialUDP("udp", nil, rx.LocalAddr().(*net.UDPAddr))
	if err != nil {
		return err
	}
	defer tx.Close()
	total := syncBenchFlows
	if b.o.Smoke {
		total /= 20
	}
	flows := syncFlows(peersync.FlowsPerMessage)
	var wire int
	start := time.Now()
	for sent := 0; sent < total; sent += len(flows) {
		m, err := peersync.Encode(key, &peersync.Message{Type: peersync.MsgFlows, Seq: uint64(sent + 1), Time: time.Now().UnixNano(), Flows: flows})
		if err != nil {
			return err
		}
		if _, err := tx.Write(m); err != nil && !errors.Is(err, net.ErrClosed) {
			continue // ENOBUFS / ECONNREFUSED under load: the datagram is lost, as on a busy link
		}
		wire = len(m)
	}
	el := time.Since(start)
	b.put("sync.send_flows_per_s", float64(total)/el.Seconds(), "flows/s", "encode + HMAC-SHA256 + sendto, 25 flows per datagram, one core")
	b.put("sync.bytes_per_flow", float64(wire+28)/float64(peersync.FlowsPerMessage), "B",
		fmt.Sprintf("a full %d-byte datagram + IPv4/UDP headers, per flow", wire))
	return nil
}

// syncApply: check, decode and install 1 M flows (25 per message, one
// xlb_sync_apply run per message, as the syncer does), one goroutine.
func (b *runner) syncApply(dp *datapath.Datapath, key []byte) error {
	total := syncBenchFlows
	if b.o.Smoke {
		total /= 20
	}
	msgs := make([][]byte, 0, total/peersync.FlowsPerMessage+1)
	for i := 0; i*peersync.FlowsPerMessage < total; i++ {
		m, err := peersync.Encode(key, &peersync.Message{Type: peersync.MsgFlows, Seq: uint64(i + 1), Time: time.Now().UnixNano(),
			Flows: syncFlows(peersync.FlowsPerMessage)})
		if err != nil {
			return err
		}
		msgs = append(msgs, m)
	}
	rid := map[netip.Addr]uint32{}
	for i, a := range syncBEs {
		rid[a] = uint32(i + 1)
	}
	in := make([]datapath.SyncInstall, 0, peersync.FlowsPerMessage)
	start := time.Now()
	for _, raw := range msgs {
		m, err := peersync.Decode(key, raw)
		if err != nil {
			return err
		}
		in = in[:0]
		for _, f := range m.Flows {
			in = append(in, datapath.SyncInstall{Hash: f.Hash, HashBits: f.HashBits, RealID: rid[f.Backend], State: f.State, Proto: f.Proto})
		}
		if err := dp.InstallSync(in); err != nil {
			return err
		}
	}
	el := time.Since(start)
	c, err := dp.SyncCounters()
	if err != nil {
		return err
	}
	b.put("sync.apply_flows_per_s", float64(len(msgs)*peersync.FlowsPerMessage)/el.Seconds(), "flows/s",
		fmt.Sprintf("HMAC check + decode + xlb_sync_apply (%d applied, %d kept)", c.Applied, c.Kept))
	return nil
}
