// Package datapath loads the XDP forwarder, pins it, attaches it and writes
// the control plane's state into its maps. It is the only package that
// touches the forwarder's kernel objects.
//
// Everything lives under one pin directory per instance
// (/sys/fs/bpf/xlb/<node name> by default): the maps (pinned by name) and the
// XDP link. A daemon that stops leaves them in place, so the program keeps
// forwarding with the last committed state; the next daemon adopts them
// (Open with the same directory) and replaces the program through the link
// without a detach window. Cleanup removes everything.
//
// Needs Linux >= 6.6 with BTF (bpf_link for XDP, BPF_F_INNER_MAP, coarse
// clock helper) and CAP_BPF + CAP_NET_ADMIN.
package datapath

import (
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/xlbproject/xlb/internal/crashpoint"
	"github.com/xlbproject/xlb/internal/kernelnet"
	"golang.org/x/sys/unix"
)

// BPFFSRoot is where instances pin by default.
const BPFFSRoot = "/sys/fs/bpf/xlb"

// Mode is how the program is attached.
type Mode string

// Attach modes. ModeAuto tries native XDP first and falls back to generic
// when native fails or would not deliver (kernelnet.NativeTXProblem).
const (
	ModeAuto    Mode = "auto"
	ModeNative  Mode = "native"
	ModeGeneric Mode = "generic"
)

// Options configure Open. Zero values take the documented defaults.
type Options struct {
	Interface string // attach point (required)
	PinDir    string // required; BPFFSRoot/<name> by convention
	Mode      Mode   // default ModeAuto
	// ConntrackEntries is the per-CPU size of the connection table, rounded
	// up to a power of two of 8-way buckets (default 1 << 20).
	ConntrackEntries uint32
	// MaxServices is how many services (VIP keys) the maps hold: service
	// ids 1..MaxServices (default 4096).
	MaxServices uint32
	// MaxReals is how many (service, backend) pairs they hold: real ids
	// 1..MaxReals (default 65536, at most RealsLimit-1).
	MaxReals uint32
	// DiscardConntrack lets Open and Load replace a pinned connection table
	// that does not fit this build or ConntrackEntries with an empty one;
	// without it they refuse (see compat.go).
	DiscardConntrack bool
	// FragEntries bounds the fragment table (datagrams whose first
	// fragment's decision is kept; default 65536, least recently used
	// goes first).
	FragEntries uint32
	// TableBytes is the memory of the first commit's Maglev tables
	// (TableBytes of each service's table_size), counted by the memory
	// check of a cold start.
	TableBytes uint64
	Logger     *slog.Logger
	// available replaces availableMemory in tests.
	available func() (uint64, string, error)
}

// Sentinel errors.
var (
	ErrIncompatible = errors.New("pinned maps are incompatible with this build")
	ErrNotAttached  = errors.New("no xlb forwarder is attached")
)

// Datapath is a loaded, attached forwarder.
type Datapath struct {
	occupancy atomic.Pointer[Occupancy] // the last sweep's (conns.go)
	opts      Options
	log       *slog.Logger
	objs      xlbObjects
	link      link.Link
	ifindex   int
	ifmac     net.HardwareAddr
	mode      Mode
	cur       applied   // what the maps hold
	vidx      *vipIndex // the forwarder's VIP match, mirroring xlb_vips
	// faultHook, set by tests, may fail the n-th write of a commit.
	faultHook func(what string, n int) error
	// placeholder is the empty table retired slots point to.
	placeholder *liveTable
	scrubbed    bool // a commit of this process has run the scrub step (scrub.go)
	probeTurn   int
	probeCookie uint64 // node_info.probe_cookie: marks self-check probes
	adopted     bool   // the link was already pinned: a restart, not a first start
	oldCT       bool   // the pinned conntrack has 18-bit real ids (ctlayout.go)
	// recreated are the maps loaded new instead of their incompatible pins
	// (compat.go); their pins are replaced once the program runs.
	recreated []string
	holder    atomic.Pointer[FragHolder]
	operator  *ebpf.Map // the operator's runtime state (operator.go)
	record    *ebpf.Map // the controller's commit record (operator.go)
	tx        txState   // the transmit check (txcheck.go)

	defenceSet atomic.Pointer[defenceSettings] // the last commit's (defence.go)
}

func (o *Options) defaults() error {
	if o.Interface == "" {
		return errors.New("datapath: interface is required")
	}
	if o.PinDir == "" {
		return errors.New("datapath: pin directory is required")
	}
	if o.Mode == "" {
		o.Mode = ModeAuto
	}
	if o.ConntrackEntries == 0 {
		o.ConntrackEntries = 1 << 20
	}
	if o.MaxServices == 0 {
		o.MaxServices = 4096
	}
	if o.MaxReals == 0 {
		o.MaxReals = 65536
	}
	if o.FragEntries == 0 {
		o.FragEntries = 65536
	}
	if o.MaxReals >= RealsLimit {
		return fmt.Errorf("datapath: at most %d reals", RealsLimit-1)
	}
	if o.MaxServices > MaxServicesLimit {
		return fmt.Errorf("datapath: at most %d services", MaxServicesLimit)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}

// CTGeometry returns log2(buckets per CPU) for n entries per CPU.
func CTGeometry(entries uint32) (shift uint32) {
	buckets := (entries + 7) / 8
	if buckets < 2 {
		buckets = 2
	}
	return uint32(bits.Len32(buckets - 1))
}

// EnsureBPFFS mounts bpffs on /sys/fs/bpf when nothing is mounted there.
func EnsureBPFFS() error {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/bpf", &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	if err := os.MkdirAll("/sys/fs/bpf", 0o755); err != nil {
		return err
	}
	if err := unix.Mount("bpf", "/sys/fs/bpf", "bpf", 0, ""); err != nil {
		return fmt.Errorf("mount bpffs on /sys/fs/bpf: %w", err)
	}
	return nil
}

// LoadSpec returns the forwarder's collection spec with the sizes and
// load-time settings of o applied.
func LoadSpec(o Options) (*ebpf.CollectionSpec, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	spec, err := loadForwarder()
	if err != nil {
		return nil, fmt.Errorf("load forwarder spec: %w", err)
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, err
	}
	shift := CTGeometry(o.ConntrackEntries)
	if err := spec.Variables["ct_shift"].Set(shift); err != nil {
		return nil, err
	}
	if err := spec.Variables["nr_cpus"].Set(uint32(ncpu)); err != nil {
		return nil, err
	}
	if err := spec.Variables["vip_buckets"].Set(vipBuckets(o.MaxServices)); err != nil {
		return nil, err
	}
	spec.Maps["xlb_ct"].MaxEntries = uint32(ncpu) << shift
	spec.Maps["xlb_sync_log"].MaxEntries = uint32(ncpu) * uint32(syncSlots)
	spec.Maps["xlb_sync_cpus"].MaxEntries = uint32(ncpu)
	sizeByCapacity(spec, o)
	for name, m := range spec.Maps {
		if len(name) > 4 && name[:4] == "xlb_" {
			m.Pinning = ebpf.PinByName
		}
	}
	unpinStages(spec) // stages.go
	return spec, nil
}

// Open loads the forwarder (reusing maps pinned under o.PinDir, so tracked
// connections and committed state survive), and attaches it to
// o.Interface, or, when a link is already pinned there, atomically replaces
// the attached program. A pinned map that does not match this build is
// replaced by an empty one if it only holds counters or rate-limit state;
// otherwise Open returns IncompatibleMapError (wrapping ErrIncompatible)
// before changing anything (compat.go).
func Open(o Options) (*Datapath, error) {
	d, err := load(o)
	if err != nil {
		return nil, err
	}
	if err := d.pinStages(); err != nil { // before the entry that uses them runs
		d.Close()
		return nil, err
	}
	if err := d.enableAndAttach(); err != nil {
		d.dropNextStages() // the entry that uses them is not attached
		d.Close()
		return nil, err
	}
	crashpoint.At("datapath: after attach")
	d.CheckTX() // the status's first answer; primes the counter check
	err = d.pinRecreated()
	if perr := d.promoteStages(); err == nil {
		err = perr
	}
	if err != nil {
		d.Close()
		return nil, err
	}
	if err := d.pinLayout(); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// pinLayout pins the conntrack layout's marker, once the ways the old
// program wrote until it was replaced are widened too (ctlayout.go).
func (d *Datapath) pinLayout() error {
	if d.oldCT {
		if err := d.widenRealIDs(); err != nil {
			return err
		}
		d.oldCT = false
	}
	return pinLayout(d.opts.PinDir)
}

// enableAndAttach enables forwarding on the interface and attaches the
// program (Open).
func (d *Datapath) enableAndAttach() error {
	if changed, err := kernelnet.EnableForwarding(d.opts.Interface); err != nil {
		return err
	} else if changed {
		d.log.Info("enabled IPv4/IPv6 forwarding on the attach interface (bpf_fib_lookup needs it)", "interface", d.opts.Interface)
	}
	return d.attach()
}

// Load is Open without attaching: the program and the (pinned) maps are
// ready for Apply and for test runs. o.Interface still names the interface
// whose MAC is the fallback source address.
func Load(o Options) (*Datapath, error) {
	d, err := load(o)
	if err != nil {
		return nil, err
	}
	if err := d.pinRecreated(); err != nil {
		d.Close()
		return nil, err
	}
	if err := d.pinStages(); err != nil {
		d.Close()
		return nil, err
	}
	if err := d.promoteStages(); err != nil {
		d.Close()
		return nil, err
	}
	if err := d.pinLayout(); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

func load(o Options) (*Datapath, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("remove memlock rlimit: %w", err)
	}
	if err := checkMapCount(o.MaxServices); err != nil { // capacity.go
		return nil, err
	}
	if err := EnsureBPFFS(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.PinDir, 0o700); err != nil {
		return nil, fmt.Errorf("create pin directory: %w", err)
	}
	iface, err := net.InterfaceByName(o.Interface)
	if err != nil {
		return nil, fmt.Errorf("interface %q: %w", o.Interface, err)
	}
	spec, err := LoadSpec(o)
	if err != nil {
		return nil, err
	}
	recreate, err := checkPinned(spec, o.PinDir, o.DiscardConntrack, o.Logger)
	if err != nil {
		return nil, err
	}
	if err := checkLoadMemory(spec, o, recreate); err != nil { // capacity.go
		return nil, err
	}
	for _, name := range recreate {
		spec.Maps[name].Pinning = ebpf.PinNone // pinned by pinRecreated
	}
	d := &Datapath{opts: o, log: o.Logger, ifindex: iface.Index, ifmac: iface.HardwareAddr, recreated: recreate,
		oldCT: oldCTLayout(o.PinDir, recreate)}
	err = spec.LoadAndAssign(&d.objs, &ebpf.CollectionOptions{
		Maps: ebpf.MapOptions{PinPath: o.PinDir},
	})
	if err != nil {
		if errors.Is(err, ebpf.ErrMapIncompatible) {
			return nil, fmt.Errorf("%w (%v): run 'xlbd --cleanup' to start afresh (tracked connections are lost)", ErrIncompatible, err)
		}
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load forwarder: %+v", ve)
		}
		return nil, fmt.Errorf("load forwarder: %w", err)
	}
	removeRetiredPins(o.PinDir, d.log) // synclog.go
	if err := d.migrate(); err != nil {
		d.Close()
		return nil, err
	}
	if d.oldCT { // ctlayout.go
		if err := d.widenRealIDs(); err != nil {
			d.Close()
			return nil, err
		}
	}
	if err := d.loadApplied(); err != nil {
		d.Close()
		return nil, fmt.Errorf("read pinned state: %w", err)
	}
	if err := d.rebuildConns(); err != nil { // conns.go
		d.Close()
		return nil, fmt.Errorf("connection counts: %w", err)
	}
	if d.operator, err = openDoc(o.PinDir, operatorPin, operatorValue, d.log.Warn); err != nil {
		d.Close()
		return nil, err
	}
	if d.record, err = openDoc(o.PinDir, recordPin, recordValue, d.log.Warn); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

func (d *Datapath) linkPin() string { return filepath.Join(d.opts.PinDir, "link") }

func (d *Datapath) attach() error {
	if adopted, err := d.adoptLink(); adopted || err != nil {
		return err
	}
	if err := d.autoAttachError(); err != nil { // txauto.go
		return err
	}
	try := []Mode{d.opts.Mode}
	if d.opts.Mode == ModeAuto {
		try = []Mode{ModeNative, ModeGeneric}
	}
	var errs []error
	for _, m := range try {
		l, err := d.attachMode(m)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m, err))
			continue
		}
		if err := l.Pin(d.linkPin()); err != nil {
			l.Close()
			return fmt.Errorf("pin xdp link: %w", err)
		}
		d.link = l
		d.mode = m
		d.log.Info("attached forwarder", "interface", d.opts.Interface, "mode", m, "pin", d.opts.PinDir)
		return nil
	}
	return fmt.Errorf("attach xdp to %s: %w (another XDP program attached? check 'ip link show %s')",
		d.opts.Interface, errors.Join(errs...), d.opts.Interface)
}

// PinDir is the instance's pin directory.
func (d *Datapath) PinDir() string { return d.opts.PinDir }

// pinnedLink returns the XDP link pinned for this instance, nil when there
// is none or when it is stale: its interface was deleted (the kernel
// detached it: the link reports ifindex 0), and then its pin is removed,
// with a warning, so attach makes a new one; the pinned maps, conntrack
// included, are kept. A link still attached to another interface is an
// error.
func (d *Datapath) pinnedLink() (link.Link, error) {
	l, err := link.LoadPinnedLink(d.linkPin(), nil)
	if err != nil {
		return nil, nil // none pinned (or unreadable: attach pins anew)
	}
	info, err := l.Info()
	if err != nil || info.XDP() == nil {
		return l, nil
	}
	idx := int(info.XDP().Ifindex)
	if idx == d.ifindex {
		return l, nil
	}
	if idx != 0 { // live elsewhere (another interface or namespace): not ours to replace
		l.Close()
		return nil, fmt.Errorf("pinned link %s is attached to ifindex %d, not %s: run 'xlbd --cleanup' or use another node name",
			d.linkPin(), idx, d.opts.Interface)
	}
	d.log.Warn("the pinned XDP link's interface is gone: replacing the link; the pinned maps and tracked connections are kept",
		"pin", d.linkPin(), "old_ifindex", idx, "interface", d.opts.Interface)
	err = l.Unpin()
	l.Close()
	if err != nil {
		return nil, fmt.Errorf("remove the stale link pin %s: %w", d.linkPin(), err)
	}
	return nil, nil
}

// attachMode attaches the program in mode m. In native mode it checks
// that the interface delivers what XDP sends
// (kernelnet.NativeTXProblem): under xdp_mode auto a device that does
// not is an error (the caller falls back to generic); under native it is
// logged as an error and attached.
func (d *Datapath) attachMode(m Mode) (link.Link, error) {
	flags := link.XDPDriverMode
	if m == ModeGeneric {
		flags = link.XDPGenericMode
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: d.objs.XlbForward, Interface: d.ifindex, Flags: flags})
	if err != nil {
		if d.opts.Mode == ModeAuto && m == ModeNative {
			d.log.Warn("native XDP attach failed; falling back to generic", "interface", d.opts.Interface, "error", err)
		}
		return nil, err
	}
	if m != ModeNative {
		return l, nil
	}
	problem, perr := kernelnet.NativeTXProblem(d.ifindex, d.opts.Interface)
	switch {
	case perr != nil:
		d.log.Warn("cannot verify that native XDP delivers; the self-check watches the transmit counters", "interface", d.opts.Interface, "error", perr)
	case problem != "" && d.opts.Mode == ModeAuto:
		l.Close()
		d.log.Warn("native XDP would not deliver; falling back to generic", "interface", d.opts.Interface, "problem", problem)
		return nil, errors.New(problem)
	case problem != "":
		d.log.Error("xdp_mode native on an interface that does not deliver what XDP sends: every forwarded packet is lost, the self-check fails and the VIPs stay withdrawn", "interface", d.opts.Interface, "problem", problem)
	}
	return l, nil
}

// adoptLink takes over a pinned link (a restart): the program is
// replaced atomically, the attach mode read back from the interface.
func (d *Datapath) adoptLink() (bool, error) {
	l, err := d.pinnedLink()
	if err != nil || l == nil {
		return err != nil, err
	}
	if err := l.Update(d.objs.XlbForward); err != nil {
		l.Close()
		return true, fmt.Errorf("replace program on pinned link: %w", err)
	}
	d.link = l
	d.mode = attachedMode(d.ifindex, d.opts.Mode)
	d.adopted = true
	d.log.Info("adopted pinned forwarder; program replaced atomically", "interface", d.opts.Interface, "mode", d.mode, "pin", d.opts.PinDir)
	return true, nil
}

// attachedMode reads how the interface's XDP program is attached;
// requested when the kernel does not say.
func attachedMode(ifindex int, requested Mode) Mode {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil || l.Attrs().Xdp == nil {
		return requested
	}
	switch l.Attrs().Xdp.AttachMode {
	case nl.XDP_ATTACHED_DRV:
		return ModeNative
	case nl.XDP_ATTACHED_SKB:
		return ModeGeneric
	}
	return requested
}

// Mode reports how the program is attached (for an adopted link, the
// requested mode).
func (d *Datapath) Mode() Mode { return d.mode }

// Adopted reports whether Open found the forwarder already attached (a
// daemon restart: the data plane kept forwarding).
func (d *Datapath) Adopted() bool { return d.adopted }

// Program returns the loaded forwarder program (for test runs and probes).
func (d *Datapath) Program() *ebpf.Program { return d.objs.XlbForward }

// Close releases this process's handles. The pinned link and maps stay:
// the forwarder keeps running with the last applied state.
func (d *Datapath) Close() error {
	var errs []error
	if d.link != nil {
		errs = append(errs, d.link.Close())
	}
	d.vidx.close()
	if d.operator != nil {
		errs = append(errs, d.operator.Close())
	}
	if d.record != nil {
		errs = append(errs, d.record.Close())
	}
	errs = append(errs, d.objs.Close())
	if d.placeholder != nil {
		d.placeholder.close()
	}
	d.closeLive()
	return errors.Join(errs...)
}

// Cleanup detaches the forwarder pinned under pinDir and removes every pin.
func Cleanup(pinDir string) error {
	var errs []error
	if l, err := link.LoadPinnedLink(filepath.Join(pinDir, "link"), nil); err == nil {
		errs = append(errs, l.Unpin(), l.Close())
	} else if !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("open pinned link: %w", err))
	}
	errs = append(errs, os.RemoveAll(pinDir))
	return errors.Join(errs...)
}
