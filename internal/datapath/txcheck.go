package datapath

// The transmit check: does the attach interface deliver what the
// forwarder sends? BPF_PROG_TEST_RUN (the self-check's probe) never
// transmits, so a device that drops XDP_TX frames (a veth whose peer runs
// no XDP program, in native mode) would otherwise forward nothing while
// the self-check passes.

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"github.com/xlbproject/xlb/internal/kernelnet"
)

// ErrNoTransmit is wrapped by self-check failures of the transmit check.
var ErrNoTransmit = errors.New("the interface does not deliver what the forwarder transmits")

// txEvidence is how many frames the forwarder must have sent with XDP_TX
// between two checks for the counter check to judge the interface.
const txEvidence = 8

// TXStatus is the transmit check's last result.
type TXStatus struct {
	OK bool
	// Detail is the problem when !OK; when OK, what could not be
	// checked (e.g. a veth peer not visible), else "".
	Detail string
}

// txState is the transmit check's memory between checks.
type txState struct {
	fwd, dev, dropped uint64 // counters at the last check
	have              bool
	counterProblem    string // the counter check's verdict, kept until new evidence
	last              TXStatus
	// dryTX counts test runs (self-check probes, traces) that returned
	// XDP_TX: the forwarder counts them in forward_tx, nothing is sent.
	// A run and its note hold dryMu for reading, the check's read of
	// dryTX and forward_tx holds it for writing: the check never sees a
	// run in forward_tx and not in dryTX, or the other way round.
	dryTX atomic.Uint64
	dryMu sync.RWMutex
}

// TX returns the transmit check's last result.
func (d *Datapath) TX() TXStatus { return d.tx.last }

// CheckTX checks that the interface delivers what the forwarder sends:
// in native mode on a veth, that the peer is up and runs an XDP program;
// on any device, that its transmitted packets grow with the frames the
// forwarder sent with XDP_TX.
func (d *Datapath) CheckTX() TXStatus {
	st := TXStatus{OK: true}
	if d.mode == ModeNative {
		problem, err := kernelnet.NativeTXProblem(d.ifindex, d.opts.Interface)
		switch {
		case err != nil:
			st.Detail = err.Error() + "; only the transmit counters are checked"
		case problem != "":
			st = TXStatus{Detail: problem}
		}
	}
	if problem := d.txCounterProblem(); problem != "" && st.OK {
		st = TXStatus{Detail: problem}
	}
	d.tx.last = st
	return st
}

// txCounterProblem compares the frames the forwarder sent with XDP_TX
// since the last call with the packets the interface transmitted. Without
// enough new frames it repeats its last verdict.
func (d *Datapath) txCounterProblem() string {
	d.tx.dryMu.Lock()
	dry := d.tx.dryTX.Load()
	stats, err := readStats(d.objs.XlbStats)
	d.tx.dryMu.Unlock()
	if err != nil {
		return ""
	}
	l, err := netlink.LinkByIndex(d.ifindex)
	if err != nil || l.Attrs().Statistics == nil {
		return ""
	}
	ls := l.Attrs().Statistics
	fwd, dev, dropped := stats["forward_tx"], ls.TxPackets, ls.TxDropped
	if fwd < dry {
		return d.tx.counterProblem // the counters were reset under the runs
	}
	fwd -= dry
	prevFwd, prevDev, prevDropped, had := d.tx.fwd, d.tx.dev, d.tx.dropped, d.tx.have
	d.tx.fwd, d.tx.dev, d.tx.dropped, d.tx.have = fwd, dev, dropped, true
	if !had || fwd < prevFwd || dev < prevDev || dropped < prevDropped {
		return d.tx.counterProblem // counters restarted: no evidence yet
	}
	if sent := fwd - prevFwd; sent >= txEvidence {
		d.tx.counterProblem = judgeTX(d.opts.Interface, sent, dev-prevDev, dropped-prevDropped)
	}
	return d.tx.counterProblem
}

// judgeTX is the counter check's verdict: sent frames by XDP_TX, while the
// interface counted tx transmitted and dropped packets.
func judgeTX(iface string, sent, tx, dropped uint64) string {
	if tx*2 >= sent {
		return ""
	}
	return fmt.Sprintf("the forwarder sent %d frames with XDP_TX since the last check but %s transmitted %d packets (tx_dropped +%d)", sent, iface, tx, dropped)
}

// txError is the self-check's failure for a failed transmit check.
func (d *Datapath) txError() error {
	if st := d.CheckTX(); !st.OK {
		return fmt.Errorf("%w: %w: %s", ErrSelfCheck, ErrNoTransmit, st.Detail)
	}
	return nil
}

// dryRun is testRun for a run whose XDP_TX sends nothing: it is noted in
// dryTX together with its count in forward_tx (see txState.dryMu).
func (d *Datapath) dryRun(frame []byte) (uint32, []byte, error) {
	d.tx.dryMu.RLock()
	defer d.tx.dryMu.RUnlock()
	ret, out, err := d.testRun(frame)
	if err == nil && ret == XDPTX {
		d.tx.dryTX.Add(1)
	}
	return ret, out, err
}
