package datapath

// Blackbox probes (internal/prober): a probe is a real packet sent through
// the attached forwarder and the interface's real transmit path, unlike
// the self-check's test run, which never transmits.

import (
	"fmt"

	"github.com/xlbproject/xlb/internal/packet"
	"github.com/xlbproject/xlb/internal/progrun"
	"github.com/xlbproject/xlb/internal/tracer"
	"golang.org/x/sys/unix"
)

// SendProbe sends f, marked as a self-check probe of this node (no
// conntrack entry, counted as selfcheck_probe), through the forwarder as
// if it had arrived on the interface, and transmits what the forwarder
// sends the way the attach mode does: in native mode the test run runs in
// live-frames mode (XDP_TX and XDP_REDIRECT go through the driver's XDP
// transmit, as forwarded packets do); in generic mode the output frame is
// sent on the interface through the stack's transmit path, as generic XDP
// does with XDP_TX. It returns the forwarder's verdict. Safe for
// concurrent use.
func (d *Datapath) SendProbe(f packet.Flow) (uint32, error) {
	f.Payload = tracer.ProbeMarker(d.probeCookie)
	frame := f.Frame()
	// A live run reports no verdict: a test run first tells it (and
	// gives generic mode its output frame).
	run := d.testRun // generic mode transmits the run's output
	if d.mode != ModeGeneric {
		run = d.dryRun // the live run below sends, the test run does not
	}
	verdict, out, err := run(frame)
	if err != nil {
		return 0, fmt.Errorf("probe run: %w", err)
	}
	if verdict != XDPTX && verdict != XDPRedirect {
		return verdict, nil
	}
	if d.mode == ModeGeneric {
		return verdict, d.transmit(out)
	}
	_, err = progrun.Run(progrun.XDP{Prog: d.objs.XlbForward, Data: frame, Ifindex: d.ifindex,
		Repeat: 1, Flags: progrun.FlagLiveFrames, Retry: true})
	if err != nil {
		return verdict, fmt.Errorf("live probe run: %w", err)
	}
	return verdict, nil
}

// transmit sends an Ethernet frame out of the interface (AF_PACKET).
func (d *Datapath) transmit(frame []byte) error {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("packet socket: %w", err)
	}
	defer unix.Close(fd)
	sa := &unix.SockaddrLinklayer{Ifindex: d.ifindex, Halen: 6}
	copy(sa.Addr[:], frame[:6])
	if err := unix.Sendto(fd, frame, 0, sa); err != nil {
		return fmt.Errorf("send probe on %s: %w", d.opts.Interface, err)
	}
	return nil
}
