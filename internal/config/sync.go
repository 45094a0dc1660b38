package config

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

// MinSyncKeyBytes is the shortest key node.sync.key_file may hold.
const MinSyncKeyBytes = 32

// Sync is node.sync: connection sync with the other nodes of the cluster
// (docs/ARCHITECTURE.md, Connection sync).
type Sync struct {
	// Listen is where this node receives its peers' messages (UDP).
	Listen netip.AddrPort
	// Peers are the other nodes' Listen addresses; messages from any other
	// address are dropped.
	Peers []netip.AddrPort
	// KeyFile holds the shared key, as hex (openssl rand -hex 32), the
	// same file on every node; Key is its content, decoded.
	KeyFile string
	Key     []byte
}

// sync decodes node.sync: {listen, peers, key_file}.
func (d *decoder) sync(n *ynode, path string) *Sync {
	f := d.fields(n, path, "listen", "peers", "key_file")
	if f == nil {
		return nil
	}
	s := &Sync{}
	if v := f.get("listen"); v != nil {
		s.Listen, _ = d.addrPort(v, join(path, "listen"))
	} else {
		d.c.at(pos(n), join(path, "listen"), ErrRequired, "required: the ADDR:PORT this node receives sync messages on")
	}
	if v := f.get("peers"); v != nil {
		pp := join(path, "peers")
		for i, item := range d.seq(v, pp) {
			if a, ok := d.addrPort(item, index(pp, i)); ok {
				s.Peers = append(s.Peers, a)
			}
		}
	}
	if v := f.get("key_file"); v != nil {
		kp := join(path, "key_file")
		if s.KeyFile, _ = d.str(v, kp); s.KeyFile != "" {
			key, err := readSyncKey(s.KeyFile)
			if err != nil {
				d.c.at(pos(v), kp, ErrInvalid, "%v", err)
			}
			s.Key = key
		}
	} else {
		d.c.at(pos(n), join(path, "key_file"), ErrRequired,
			"required: a file with at least %d random bytes as hex, the same on every node (openssl rand -hex 32 > FILE)", MinSyncKeyBytes)
	}
	return s
}

// addrPort decodes an ADDR:PORT ([v6]:PORT) with a non-zero port.
func (d *decoder) addrPort(n *ynode, path string) (netip.AddrPort, bool) {
	s, ok := d.scalar(n, path, "an ADDR:PORT")
	if !ok {
		return netip.AddrPort{}, false
	}
	a, err := netip.ParseAddrPort(s)
	if err != nil || a.Port() == 0 {
		d.c.at(pos(n), path, ErrInvalid, "%q is not ADDR:PORT with a port from 1 to 65535 ([ADDR]:PORT for IPv6)", s)
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port()), true
}

// readSyncKey reads a sync key file: hex, whitespace around it ignored.
func readSyncKey(path string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read the sync key: %v (write one with: openssl rand -hex 32 > %s, the same file on every node)", err, path)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(raw)))
	if err != nil {
		return nil, fmt.Errorf("%s is not hex (%v): write it with openssl rand -hex 32", path, err)
	}
	if len(key) < MinSyncKeyBytes {
		return nil, fmt.Errorf("%s holds %d bytes, at least %d are needed: write it with openssl rand -hex 32", path, len(key), MinSyncKeyBytes)
	}
	return key, nil
}

// marshal writes s back as node.sync (the key by its file, never itself).
func (s *Sync) marshal() *yaml.Node {
	peers := make([]string, len(s.Peers))
	for i, p := range s.Peers {
		peers[i] = p.String()
	}
	return mapping("listen", str(s.Listen.String()), "peers", list(peers), "key_file", str(s.KeyFile))
}
