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

// keyFile is node.sync.key_file: the key file's name, whose key is read
// with it.
type keyFile struct{}

func (keyFile) decode(d *decoder, n *ynode, path string, s *Sync) {
	if s.KeyFile, _ = d.str(n, path); s.KeyFile == "" {
		return
	}
	key, err := readSyncKey(s.KeyFile)
	if err != nil {
		d.c.at(pos(n), path, ErrInvalid, "%v", err)
	}
	s.Key = key
}
func (keyFile) encode(s *Sync) *yaml.Node           { return str(s.KeyFile) }
func (keyFile) isZero(s *Sync) bool                 { return s.KeyFile == "" }
func (keyFile) reset(s *Sync)                       { s.KeyFile, s.Key = "", nil }
func (keyFile) clear(s *Sync)                       { s.KeyFile, s.Key = "", nil }
func (keyFile) check(s *Sync, at loc, c *collector) {}
func (keyFile) about() about                        { return about{typ: "file name"} }

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
