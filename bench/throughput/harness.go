package throughput

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/kernelnet"
	"github.com/xlbproject/xlb/internal/maglev"
	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/state"
	"golang.org/x/sys/unix"
)

// Addresses inside the private namespace.
var (
	nodeMAC = net.HardwareAddr{0x02, 0x7a, 0, 0, 0, 0x11}
	genMAC  = net.HardwareAddr{0x02, 0x7a, 0, 0, 0, 0x01}
	nodeV4  = netip.MustParseAddr("10.0.0.11")
	gwV4    = netip.MustParseAddr("10.0.0.1") // the generator end, as the backends' gateway
	vip     = netip.MustParseAddr("10.200.0.1")
	peer    = netip.MustParseAddr("198.51.100.7") // Constant's source
)

const (
	vipPort     = 80
	backendNet  = "10.0.1.0/24"
	clientNet   = "172.16.0.0/12" // Established's clients (baseEst)
	backendBase = 0x0a000100      // 10.0.1.0: backend b is 10.0.1.b
	// First source addresses of the generated flows (host order).
	baseSYN = 0x0b000000 // 11.0.0.0/8: new flows (gen_seq >> 15 above it)
	baseEst = 0xac100000 // 172.16.0.0/12: established flows
)

// harness is the namespace's devices, the forwarder attached to the node
// end, and the generator and receiver programs.
type harness struct {
	o              Options
	sysfs          string
	genIf, nodeIf  string
	genIdx         int
	pinDir         string
	dp             *datapath.Datapath
	fwdLink        link.Link     // the forwarder's pinned link, for program swaps
	onLink         *ebpf.Program // the program fwdLink runs now
	rxLink         link.Link
	keepLink       link.Link // gen_tx attached to a spare veth (see keepInDispatcher)
	objs           tputObjects
	fwdPid, rxPid  int // NAPI threads (PlacementSplit)
	genTid         int // the generator's thread
	softirqPid     int // ksoftirqd of CPU (PlacementShared)
	xlb, reflector *ebpf.Program
	method         Method // the reals' forwarding method now (setMethod)
}

func newHarness(o Options, sysfs string) (_ *harness, err error) {
	var rnd [2]byte
	rand.Read(rnd[:])
	tag := hex.EncodeToString(rnd[:])
	h := &harness{o: o, sysfs: sysfs, genIf: "tg" + tag + "g", nodeIf: "tg" + tag + "n",
		pinDir: filepath.Join("/sys/fs/bpf", "xlb-tput-"+tag), genTid: unix.Gettid()}
	defer func() {
		if err != nil {
			h.close()
		}
	}()
	if err := h.setupLinks(); err != nil {
		return nil, err
	}
	if err := h.loadPrograms(); err != nil {
		return nil, err
	}
	if o.Mode == datapath.ModeGeneric {
		// Without native XDP a veth has NAPI (and so accepts the
		// generator's frames) only with GRO on. TSO off: the stack's
		// transmit (generic XDP_TX) then goes to the peer's NAPI ring,
		// where gen_count runs, and not to the peer's backlog.
		if err := ethtoolK(h.nodeIf, "gro", "on", "tso", "off"); err != nil {
			return nil, err
		}
	}
	h.dp, err = datapath.Open(datapath.Options{Interface: h.nodeIf, PinDir: h.pinDir, Mode: o.Mode,
		ConntrackEntries: o.ConntrackEntries, MaxServices: 16, MaxReals: 1024,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	if h.dp.Mode() != o.Mode {
		return nil, fmt.Errorf("forwarder attached %s, want %s", h.dp.Mode(), o.Mode)
	}
	if h.fwdLink, err = link.LoadPinnedLink(filepath.Join(h.pinDir, "link"), nil); err != nil {
		return nil, fmt.Errorf("open the forwarder's link: %w", err)
	}
	h.xlb, h.reflector, h.onLink = h.dp.Program(), h.objs.GenReflect, h.dp.Program()
	if err := h.setMethod(GRE); err != nil {
		return nil, err
	}
	if o.Placement == PlacementShared {
		if h.softirqPid, err = kernelThread(fmt.Sprintf("ksoftirqd/%d\n", o.CPU)); err != nil {
			return nil, err
		}
		return h, nil
	}
	// Threaded NAPI, pinned, at SCHED_FIFO 1: a NIC's NAPI poll runs in
	// softirq context, which no task preempts; so here, or the other
	// tasks of the machine would decide the figure.
	for _, t := range []struct {
		dev string
		cpu int
		pid *int
	}{{h.nodeIf, o.CPU, &h.fwdPid}, {h.genIf, o.GenCPU, &h.rxPid}} {
		if *t.pid, err = setThreaded(sysfs, t.dev); err != nil {
			return nil, err
		}
		if err := pinTask(*t.pid, t.cpu); err != nil {
			return nil, err
		}
		if err := setFIFO(*t.pid, 1); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// setupLinks creates the veth pair, the node's address, the route to the
// backends via the generator end, and a permanent neighbour for it. IPv6 is
// off so that no stack traffic (router solicitations, MLD) crosses the
// pair.
func (h *harness) setupLinks() error {
	for _, p := range []string{"ipv6/conf/all/disable_ipv6", "ipv6/conf/default/disable_ipv6"} {
		if err := os.WriteFile(filepath.Join("/proc/sys/net", p), []byte("1"), 0o644); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("sysctl %s: %w", p, err)
		}
	}
	nl, err := netlink.NewHandle()
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	defer nl.Close()
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: h.nodeIf, HardwareAddr: nodeMAC, MTU: 1500},
		PeerName: h.genIf, PeerHardwareAddr: genMAC}
	if err := nl.LinkAdd(v); err != nil {
		return fmt.Errorf("add veth (needs CONFIG_VETH): %w", err)
	}
	node, err := nl.LinkByName(h.nodeIf)
	if err != nil {
		return err
	}
	gen, err := nl.LinkByName(h.genIf)
	if err != nil {
		return err
	}
	h.genIdx = gen.Attrs().Index
	for _, l := range []netlink.Link{node, gen} {
		if err := nl.LinkSetUp(l); err != nil {
			return fmt.Errorf("set %s up: %w", l.Attrs().Name, err)
		}
	}
	addr, err := netlink.ParseAddr(nodeV4.String() + "/24")
	if err != nil {
		return err
	}
	if err := nl.AddrAdd(node, addr); err != nil {
		return fmt.Errorf("address %s: %w", addr, err)
	}
	if err := nl.NeighAdd(&netlink.Neigh{LinkIndex: node.Attrs().Index, Family: netlink.FAMILY_V4,
		State: netlink.NUD_PERMANENT, IP: gwV4.AsSlice(), HardwareAddr: genMAC}); err != nil {
		return fmt.Errorf("neighbour %s: %w", gwV4, err)
	}
	_, dst, err := net.ParseCIDR(backendNet)
	if err != nil {
		return err
	}
	if err := nl.RouteAdd(&netlink.Route{LinkIndex: node.Attrs().Index, Dst: dst, Gw: gwV4.AsSlice()}); err != nil {
		return fmt.Errorf("route %s: %w", backendNet, err)
	}
	// The clients, for NAT replies (the forwarder asks the FIB).
	_, clients, err := net.ParseCIDR(clientNet)
	if err != nil {
		return err
	}
	if err := nl.RouteAdd(&netlink.Route{LinkIndex: node.Attrs().Index, Dst: clients, Gw: gwV4.AsSlice()}); err != nil {
		return fmt.Errorf("route %s: %w", clientNet, err)
	}
	return nil
}

// le32 is how a BPF program on a little-endian CPU reads 4 wire bytes.
func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

// loadPrograms loads bpf/gen_tput.c with the receiver's expectations and
// attaches gen_count (native XDP) to the generator end.
func (h *harness) loadPrograms() error {
	spec, err := loadTput()
	if err != nil {
		return fmt.Errorf("load generator spec: %w", err)
	}
	_, bnet, _ := net.ParseCIDR(backendNet)
	var port [2]byte
	binary.BigEndian.PutUint16(port[:], vipPort)
	for name, v := range map[string]any{
		"rx_node": le32(nodeV4.AsSlice()), "rx_net": le32(bnet.IP.To4()), "rx_mask": le32(bnet.Mask),
		"rx_vip": le32(vip.AsSlice()), "rx_port": binary.LittleEndian.Uint16(port[:]),
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("set %s: %w", name, err)
		}
	}
	if err := spec.LoadAndAssign(&h.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return fmt.Errorf("load generator programs: %+v", ve)
		}
		return fmt.Errorf("load generator programs: %w", err)
	}
	h.rxLink, err = link.AttachXDP(link.XDPOptions{Program: h.objs.GenCount, Interface: h.genIdx,
		Flags: link.XDPDriverMode})
	if err != nil {
		return fmt.Errorf("attach gen_count to %s: %w", h.genIf, err)
	}
	return h.keepInDispatcher()
}

// keepInDispatcher attaches gen_tx (native XDP) to a spare veth pair that
// carries no traffic. A test run of an XDP program adds it to the kernel's
// XDP dispatcher and removes it afterwards, and each change rewrites the
// dispatcher's code and waits for an RCU grace period: 25-45 ms per
// BPF_PROG_TEST_RUN call on this machine, whatever the repeat count. A
// program attached somewhere stays in the dispatcher, so test runs of it
// change nothing.
func (h *harness) keepInDispatcher() error {
	nl, err := netlink.NewHandle()
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	defer nl.Close()
	spare := h.genIf[:len(h.genIf)-1] + "x"
	if err := nl.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: spare}, PeerName: spare[:len(spare)-1] + "y"}); err != nil {
		return fmt.Errorf("add spare veth: %w", err)
	}
	l, err := nl.LinkByName(spare)
	if err != nil {
		return err
	}
	h.keepLink, err = link.AttachXDP(link.XDPOptions{Program: h.objs.GenTx, Interface: l.Attrs().Index,
		Flags: link.XDPDriverMode})
	if err != nil {
		return fmt.Errorf("attach gen_tx to %s: %w", spare, err)
	}
	return nil
}

// stateFor is one TCP VIP with o.Backends backends (10.0.1.1 ...) on
// method m in a Maglev table of o.TableSize, next hops cached as xlbd
// does. DR sends to a backend's own MAC (drMAC: the harness's backends sit
// behind the generator end, so the cached next hop gets their MAC); NAT
// rewrites to the backend's natRealPort.
func (h *harness) stateFor(m Method) (*state.State, error) {
	st := &state.State{
		Node: state.Node{Addr4: nodeV4, Timeouts: state.Timeouts{
			TCPSyn: time.Minute, TCP: 15 * time.Minute, TCPFin: 2 * time.Minute, UDP: 5 * time.Minute},
			GUEPort: guePort, NAT: methodEncap[m] == state.EncapNAT},
		Services: map[state.VIPKey]*state.Service{},
	}
	var backends []maglev.Backend
	ids := map[string]uint32{}
	for b := 1; b <= h.o.Backends; b++ {
		a := netip.AddrFrom4([4]byte{10, 0, 1, byte(b)})
		nh, err := kernelnet.LookupNextHop(a)
		if err != nil {
			return nil, fmt.Errorf("next hop of %s: %w", a, err)
		}
		if nh.Ifindex == 0 {
			return nil, fmt.Errorf("next hop of %s unresolved", a)
		}
		backends = append(backends, maglev.Backend{Name: a.String(), Weight: 1})
		ids[a.String()] = uint32(b)
		r := state.Real{Addr: a, SvcID: 1, Active: true, NextHop: nh}
		switch m {
		case DR:
			r.NextHop.DMAC = drMAC(b)
		case NAT, NATReply:
			r.Port = natRealPort
		}
		st.Reals.Set(uint32(b), r)
	}
	tbl, err := maglev.Build(backends, h.o.TableSize)
	if err != nil {
		return nil, fmt.Errorf("maglev table: %w", err)
	}
	entries := make([]uint32, len(tbl.Entries))
	for j, e := range tbl.Entries {
		entries[j] = ids[tbl.Backends[e].Name]
	}
	key := state.VIPKey{Addr: vip, Port: vipPort, Proto: packet.ProtoTCP}
	st.Services[key] = &state.Service{SvcID: 1, Encap: methodEncap[m], Table: entries}
	return st, nil
}

func (h *harness) close() {
	if h.fwdLink != nil {
		h.fwdLink.Close()
	}
	if h.rxLink != nil {
		h.rxLink.Close()
	}
	if h.keepLink != nil {
		h.keepLink.Close()
	}
	if h.dp != nil {
		h.dp.Close()
	}
	datapath.Cleanup(h.pinDir)
	h.objs.Close()
}

// frame is the generated frame of traffic t (flow 0 for SYN and
// Established; the generator rewrites the source address and port).
func frame(t Traffic) []byte {
	f := packet.Flow{Src: peer, Dst: vip, SrcPort: 40000, DstPort: vipPort, Proto: packet.ProtoTCP,
		TCPFlags: packet.ACK, Payload: make([]byte, 10), SrcMAC: [6]byte(genMAC), DstMAC: [6]byte(nodeMAC)}
	if t == SYN {
		f.TCPFlags = packet.SYN
	}
	return f.Frame()
}

// setGenerator loads the generator's template and flow numbering for t.
func (h *harness) setGenerator(t Traffic, stamp bool) error {
	fr := frame(t)
	if h.method == NATReply {
		fr = replyFrame()
	}
	if len(fr) != genFrame {
		return fmt.Errorf("template of %d bytes, want %d", len(fr), genFrame)
	}
	how, base := tputGenModeGEN_CONSTANT, uint32(0)
	switch t {
	case SYN:
		how, base = tputGenModeGEN_NEW_FLOWS, baseSYN
	case Established:
		how, base = tputGenModeGEN_CYCLE_FLOWS, baseEst
	}
	st := uint32(0)
	if stamp {
		st = 1
	}
	for _, s := range []struct {
		v   *ebpf.Variable
		val any
	}{
		{h.objs.GenTmpl, [genFrame]byte(fr)}, {h.objs.GenHow, uint32(how)}, {h.objs.GenBase, base},
		{h.objs.GenFlows, uint32(h.o.Flows)}, {h.objs.GenStamp, st},
	} {
		if err := s.v.Set(s.val); err != nil {
			return fmt.Errorf("set %s: %w", s.v, err)
		}
	}
	return nil
}

// use makes the node end run p (the forwarder or gen_reflect).
func (h *harness) use(p *ebpf.Program) error {
	if h.onLink == p {
		return nil
	}
	if err := h.fwdLink.Update(p); err != nil {
		return fmt.Errorf("replace the node's program: %w", err)
	}
	h.onLink = p
	return nil
}

// genFrame is GEN_FRAME of gen_tput.h.
const genFrame = 64
