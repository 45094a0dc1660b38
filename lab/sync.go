package lab

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/xlbproject/xlb/internal/maglev"
)

// SyncPort is the UDP port of connection sync between the lab's nodes.
const SyncPort = 7946

// SyncKeyFile is the lab's sync key (node.sync.key_file), written on first
// use: 32 random bytes as hex, as `openssl rand -hex 32` prints them.
func (l *Lab) SyncKeyFile() (string, error) {
	p := filepath.Join(l.Dir, "sync.key")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	var k [32]byte
	rand.Read(k[:])
	if err := os.WriteFile(p, []byte(hex.EncodeToString(k[:])+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write sync key: %w", err)
	}
	return p, nil
}

// syncSection is node i's node.sync (XLBDOptions.Sync): it listens on its
// LAN address, and every other node is a peer.
func (l *Lab) syncSection(i int) string {
	key, err := l.SyncKeyFile()
	if err != nil {
		key = filepath.Join(l.Dir, "sync.key") // xlbd says what is wrong with it
	}
	var peers []string
	for j, n := range l.Nodes {
		if j != i {
			peers = append(peers, fmt.Sprintf("%q", netip.AddrPortFrom(n.Addr4, SyncPort)))
		}
	}
	return fmt.Sprintf("  sync:\n    listen: %q\n    peers: [%s]\n    key_file: %s\n",
		netip.AddrPortFrom(l.Nodes[i].Addr4, SyncPort), strings.Join(peers, ", "), key)
}

// Locals returns each session's current local address (client side).
func (s *TCPSessions) Locals() []netip.AddrPort {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]netip.AddrPort, len(s.conns))
	for i, c := range s.conns {
		if c != nil {
			out[i] = netip.MustParseAddrPort(c.LocalAddr().String())
		}
	}
	return out
}

// MaglevPick returns, for a client address, the backend (short name) the
// IPv4 TCP echo service's table picks when the backends of exclude are left
// out (equal weights, the default table size): what a node that does not
// track the flow chooses.
func (l *Lab) MaglevPick(exclude ...int) (func(c netip.AddrPort) string, error) {
	const m = 65537 // config.DefaultTableSize: the lab's services set none
	var bs []maglev.Backend
	short := map[string]string{}
	for j, h := range l.Backends {
		if !containsInt(exclude, j) {
			bs = append(bs, maglev.Backend{Name: h.Addr4.String(), Weight: 1})
			short[h.Addr4.String()] = h.Short
		}
	}
	t, err := maglev.Build(bs, m)
	if err != nil {
		return nil, err
	}
	return func(c netip.AddrPort) string {
		h := maglev.FlowHash(maglev.Tuple{Src: c.Addr(), Dst: l.VIP4(), SrcPort: c.Port(), DstPort: DefaultPorts.TCP, Proto: 6})
		return short[t.Backends[t.Lookup(h)].Name]
	}, nil
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
