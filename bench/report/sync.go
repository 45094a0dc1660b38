package report

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"time"

	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/peersync"
	"github.com/xlbproject/xlb/internal/state"
)

// syncPart measures connection sync: the forwarder's new-flow cost with
// its decision records on and off (side by side, rounds alternated), the
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
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := b.syncNewFlow(dp); err != nil {
		return err
	}
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

// syncNewFlow: SYNs of distinct tuples, each a new tracked flow, timed in
// the kernel (BPF_PROG_TEST_RUN, one run per frame), sync off and on in
// alternating rounds; with sync on a reader drains the ring as xlbd does.
func (b *runner) syncNewFlow(dp *datapath.Datapath) error {
	const perRound = 20000
	rounds := 6
	if b.o.Smoke {
		rounds = 2
	}
	rd, err := dp.SyncReader()
	if err != nil {
		return err
	}
	defer rd.Close()
	stop := make(chan struct{})
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		buf := make([]datapath.SyncDecision, 0, 4096)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := rd.Read(buf[:0], 10*time.Millisecond); err != nil {
				return
			}
		}
	}()
	defer func() { close(stop); <-drained }()
	rng := rand.New(rand.NewPCG(7, 9))
	var sum [2]time.Duration
	var n [2]int
	for r := range rounds * 2 {
		on := r%2 == 1
		if err := dp.SetSync(on, datapath.SyncRefreshShift); err != nil {
			return err
		}
		for range perRound {
			a := rng.Uint32()
			f := packet.Flow{Src: netip.AddrFrom4([4]byte{198, 18 + byte(a>>24&1), byte(a >> 16), byte(a >> 8)}), Dst: syncVIP,
				SrcPort: uint16(1024 + rng.UintN(60000)), DstPort: 80, Proto: packet.ProtoTCP, TCPFlags: packet.SYN}
			_, d, err := dp.Program().Benchmark(f.Frame(), 1, nil)
			if err != nil {
				return err
			}
			sum[r%2] += d
			n[r%2]++
		}
	}
	c, err := dp.SyncCounters()
	if err != nil {
		return err
	}
	if err := dp.SetSync(false, 0); err != nil {
		return err
	}
	off, on := float64(sum[0])/float64(n[0]), float64(sum[1])/float64(n[1])
	b.put("sync.new_flow_ns_sync_off", off, "ns", fmt.Sprintf("SYN of a new tuple, %d runs, kernel-timed", n[0]))
	b.put("sync.new_flow_ns_sync_on", on, "ns", fmt.Sprintf("the same with decision records on (%d lost)", c.Lost))
	b.put("sync.new_flow_overhead_pct", 100*(on-off)/off, "%", "on over off")
	return nil
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
