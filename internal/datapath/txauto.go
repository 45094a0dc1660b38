package datapath

import (
	"fmt"

	"github.com/xlbproject/xlb/internal/kernelnet"
)

// anyModeTXProblem says why no XDP mode can deliver on the interface
// (ifindex, name): a veth whose peer is down drops every frame sent on
// it, by a native XDP program or through the stack (generic). "" when
// nothing is known against it (not a veth, a peer that is up, or one that
// cannot be looked at).
func anyModeTXProblem(ifindex int, name string) string {
	p, isVeth, err := kernelnet.LookupVethPeer(ifindex)
	if err != nil || !isVeth || p.Up {
		return ""
	}
	fix := fmt.Sprintf("'ip link set %s up'", p.Name)
	if p.NetNsID >= 0 {
		fix += fmt.Sprintf(" in the peer's namespace (netns id %d)", p.NetNsID)
	}
	return fmt.Sprintf("the peer veth %s (ifindex %d) of %s is down: a veth drops every frame while its peer is down, "+
		"in native and in generic mode; bring the peer up (%s) and start xlbd again", p.Name, p.Index, name, fix)
}

// autoAttachError refuses xdp_mode auto on an interface where no mode
// delivers; nil otherwise (and for the other modes: native warns at
// attach, the self-check reports).
func (d *Datapath) autoAttachError() error {
	if d.opts.Mode != ModeAuto {
		return nil
	}
	if problem := anyModeTXProblem(d.ifindex, d.opts.Interface); problem != "" {
		return fmt.Errorf("%w: xdp_mode auto on %s: no XDP mode delivers: %s", ErrNoTransmit, d.opts.Interface, problem)
	}
	return nil
}
