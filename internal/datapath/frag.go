package datapath

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"
)

// fragPoolKey is a comparable encoding of a FragPool, to skip unchanged
// writes.
func fragPoolKey(p FragPool) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, int64(p.Self))
	binary.Write(&b, binary.LittleEndian, int64(p.Timeout))
	for _, peer := range p.Peers {
		a := peer.Addr.As16()
		b.Write(a[:])
		binary.Write(&b, binary.LittleEndian, peer.NextHop)
	}
	return b.Bytes()
}

// applyFragPool writes the fragment pool: peers first, then the
// configuration that makes the program use them.
func (d *Datapath) applyFragPool(p FragPool) error {
	if len(p.Peers) > MaxFragPeers {
		return fmt.Errorf("fragment pool: %d nodes, at most %d", len(p.Peers), MaxFragPeers)
	}
	if len(p.Peers) > 0 && (p.Self < 0 || p.Self >= len(p.Peers)) {
		return fmt.Errorf("fragment pool: this node's index %d is outside the pool of %d", p.Self, len(p.Peers))
	}
	key := fragPoolKey(p)
	if d.cache.frag != nil && bytes.Equal(key, d.cache.frag) {
		return nil
	}
	for i, peer := range p.Peers {
		if !peer.Addr.IsValid() {
			return fmt.Errorf("fragment pool: node %d has no address", i)
		}
		ri := realInfo(Real{Addr: peer.Addr.Unmap(), NextHop: peer.NextHop})
		if err := d.objs.XlbFragPeers.Put(uint32(i), &ri); err != nil {
			return fmt.Errorf("write fragment pool node %d (%s): %w", i, peer.Addr, err)
		}
	}
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = DefaultFragTimeout
	}
	conf := xlbFragConf{Peers: uint32(len(p.Peers)), Self: uint32(max(p.Self, 0)), TimeoutNs: uint64(timeout)}
	if err := d.objs.XlbFragConf.Put(uint32(0), &conf); err != nil {
		return fmt.Errorf("write fragment pool settings: %w", err)
	}
	var zero xlbRealInfo
	for i := len(p.Peers); i < MaxFragPeers; i++ {
		if err := d.objs.XlbFragPeers.Put(uint32(i), &zero); err != nil {
			return fmt.Errorf("clear fragment pool node %d: %w", i, err)
		}
	}
	d.cache.frag = key
	return nil
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
