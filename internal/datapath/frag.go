package datapath

import (
	"fmt"
	"slices"
	"time"

	"github.com/xlbproject/xlb/internal/state"
)

// MaxFragPeers is the size of xlb_frag_peers.
const MaxFragPeers = 64

// DefaultFragTimeout is the fragment pool's Timeout when zero: a
// datagram's fragments come within it, and an IP id reused after it starts
// afresh.
const DefaultFragTimeout = 5 * time.Second

// fragABI is a fragment pool as the maps hold it.
type fragABI struct {
	peers []xlbRealInfo
	conf  xlbFragConf
}

func (f *fragABI) equal(o *fragABI) bool {
	return f.conf == o.conf && slices.Equal(f.peers, o.peers)
}

// fragPoolABI checks p and converts it.
func fragPoolABI(p state.FragPool) (fragABI, error) {
	var f fragABI
	if len(p.Peers) > MaxFragPeers {
		return f, fmt.Errorf("fragment pool: %d nodes, at most %d", len(p.Peers), MaxFragPeers)
	}
	if len(p.Peers) > 0 && (p.Self < 0 || p.Self >= len(p.Peers)) {
		return f, fmt.Errorf("fragment pool: this node's index %d is outside the pool of %d", p.Self, len(p.Peers))
	}
	for i, peer := range p.Peers {
		if !peer.Addr.IsValid() {
			return f, fmt.Errorf("fragment pool: node %d has no address", i)
		}
		f.peers = append(f.peers, realInfo(state.Real{Addr: peer.Addr.Unmap(), NextHop: peer.NextHop}))
	}
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = DefaultFragTimeout
	}
	f.conf = xlbFragConf{Peers: uint32(len(p.Peers)), Self: uint32(max(p.Self, 0)), TimeoutNs: uint64(timeout)}
	return f, nil
}

// writeFragPool writes a fragment pool: peers first, then the
// configuration that makes the program use them, then the unused peers.
func (d *Datapath) writeFragPool(f *fragABI) error {
	for i := range f.peers {
		if err := d.objs.XlbFragPeers.Put(uint32(i), &f.peers[i]); err != nil {
			return fmt.Errorf("write fragment pool node %d: %w", i, err)
		}
	}
	if err := d.objs.XlbFragConf.Put(uint32(0), &f.conf); err != nil {
		return fmt.Errorf("write fragment pool settings: %w", err)
	}
	var zero xlbRealInfo
	for i := len(f.peers); i < MaxFragPeers; i++ {
		if err := d.objs.XlbFragPeers.Put(uint32(i), &zero); err != nil {
			return fmt.Errorf("clear fragment pool node %d: %w", i, err)
		}
	}
	return nil
}

// readFragPool reads the fragment pool the maps hold.
func (d *Datapath) readFragPool() (fragABI, state.FragPool, error) {
	var f fragABI
	var p state.FragPool
	if err := d.objs.XlbFragConf.Lookup(uint32(0), &f.conf); err != nil {
		return f, p, fmt.Errorf("read fragment pool settings: %w", err)
	}
	for i := range min(f.conf.Peers, MaxFragPeers) {
		var ri xlbRealInfo
		if err := d.objs.XlbFragPeers.Lookup(i, &ri); err != nil {
			return f, p, fmt.Errorf("read fragment pool node %d: %w", i, err)
		}
		f.peers = append(f.peers, ri)
		r := realFromInfo(ri)
		p.Peers = append(p.Peers, state.FragPeer{Addr: r.Addr, NextHop: r.NextHop})
	}
	p.Self = int(f.conf.Self)
	if t := time.Duration(f.conf.TimeoutNs); t != DefaultFragTimeout {
		p.Timeout = t
	}
	return f, p, nil
}

// FragEntries counts the fragment table's entries (waiting, decided).
func (d *Datapath) FragEntries() (waiting, decided int, err error) {
	var (
		k xlbFragKey
		v xlbFragEntry
	)
	it := d.objs.XlbFrags.Iterate()
	for it.Next(&k, &v) {
		switch v.State {
		case uint8(xlbXlbFragStateXLB_FRAG_WAITING):
			waiting++
		case uint8(xlbXlbFragStateXLB_FRAG_DECIDED):
			decided++
		}
	}
	return waiting, decided, it.Err()
}

var _ = time.Second
