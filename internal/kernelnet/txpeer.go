package kernelnet

// The veth transmit check: a frame a native XDP program sends on a veth
// (XDP_TX, XDP_REDIRECT) is only received when the peer veth is up and
// runs an XDP program itself; otherwise the kernel drops it (counted in
// the veth's tx_dropped). Generic XDP transmits through the stack and
// does not need the peer.

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// ErrPeerNotVisible is wrapped when a veth's peer cannot be looked at
// (in a network namespace this one has no id for, or the query failed).
var ErrPeerNotVisible = errors.New("veth peer not visible")

// VethPeer is what the transmit check needs to know of a veth's peer.
type VethPeer struct {
	Name    string
	Index   int
	NetNsID int // -1: same namespace
	Up      bool
	XDP     bool // an XDP program is attached
}

// LookupVethPeer returns the peer of the interface ifindex; isVeth is false
// (and nothing else set) when the interface is not a veth. An error
// wrapping ErrPeerNotVisible means the interface is a veth whose peer
// could not be looked at.
func LookupVethPeer(ifindex int) (p VethPeer, isVeth bool, err error) {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return p, false, fmt.Errorf("interface %d: %w", ifindex, err)
	}
	if l.Type() != "veth" {
		return p, false, nil
	}
	a := l.Attrs()
	p.Index, p.NetNsID = a.ParentIndex, a.NetNsID
	if p.Index == 0 {
		if p.Index, err = netlink.VethPeerIndex(&netlink.Veth{LinkAttrs: *a}); err != nil {
			return p, true, fmt.Errorf("%w: peer of %s: %v", ErrPeerNotVisible, a.Name, err)
		}
	}
	peer, err := linkInNetNs(p.Index, p.NetNsID)
	if err != nil {
		return p, true, fmt.Errorf("%w: peer ifindex %d of %s (netns id %d): %v", ErrPeerNotVisible, p.Index, a.Name, p.NetNsID, err)
	}
	pa := peer.Attrs()
	p.Name = pa.Name
	p.Up = pa.Flags&unix.IFF_UP != 0 && pa.OperState != netlink.OperDown
	p.XDP = pa.Xdp != nil && pa.Xdp.Attached
	return p, true, nil
}

// linkInNetNs reads the link ifindex of the namespace with id nsid (as
// this namespace numbers it; -1: this one) with RTM_GETLINK and
// IFLA_TARGET_NETNSID, without entering the namespace.
func linkInNetNs(ifindex, nsid int) (netlink.Link, error) {
	if nsid < 0 {
		return netlink.LinkByIndex(ifindex)
	}
	req := nl.NewNetlinkRequest(unix.RTM_GETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(ifindex)
	req.AddData(msg)
	req.AddData(nl.NewRtAttr(unix.IFLA_TARGET_NETNSID, nl.Uint32Attr(uint32(nsid))))
	req.AddData(nl.NewRtAttr(unix.IFLA_EXT_MASK, nl.Uint32Attr(nl.RTEXT_FILTER_VF)))
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWLINK)
	if err != nil {
		return nil, err
	}
	if len(msgs) == 0 {
		return nil, errors.New("no answer")
	}
	return netlink.LinkDeserialize(nil, msgs[0])
}

// NativeTXProblem says why a native XDP program on the interface
// (ifindex, name) cannot transmit what it sends, or "" if nothing is
// known against it (not a veth, or a peer that is up and runs XDP). An
// error wrapping ErrPeerNotVisible means the peer could not be checked.
func NativeTXProblem(ifindex int, name string) (string, error) {
	p, isVeth, err := LookupVethPeer(ifindex)
	if err != nil || !isVeth {
		return "", err
	}
	where := fmt.Sprintf("ifindex %d", p.Index)
	if p.NetNsID >= 0 {
		where += fmt.Sprintf(" in netns id %d", p.NetNsID)
	}
	switch {
	case !p.Up:
		return fmt.Sprintf("the peer veth %s (%s) of %s is down: frames the forwarder sends with XDP_TX/XDP_REDIRECT in native mode are dropped; set the peer up or use xdp_mode: generic", p.Name, where, name), nil
	case !p.XDP:
		return fmt.Sprintf("the peer veth %s (%s) of %s has no XDP program: frames the forwarder sends with XDP_TX/XDP_REDIRECT in native mode are dropped; attach an XDP program to the peer veth %s or use xdp_mode: generic", p.Name, where, name, p.Name), nil
	}
	return "", nil
}
