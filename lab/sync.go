package lab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

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

// StartEtcd starts Debian's etcd in the router's namespace, serving
// clients on the router's LAN address (port 2379), and waits until it
// serves. It is stopped when the lab is destroyed.
func (l *Lab) StartEtcd(ctx context.Context) (*Proc, string, error) {
	client := "http://" + netip.AddrPortFrom(l.Router.Addr4, 2379).String()
	peer := "http://127.0.0.1:2380"
	p, err := l.Start(ctx, l.Router.NS, "etcd", "--name", "lab", "--data-dir", filepath.Join(l.Dir, "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "lab="+peer)
	if err != nil {
		return nil, "", err
	}
	if err := p.WaitOutput(ctx, "ready to serve client requests", 1, 20*time.Second); err != nil {
		return nil, "", err
	}
	return p, netip.AddrPortFrom(l.Router.Addr4, 2379).String(), nil
}

// SplitXLBDConfig splits a generated config into the node's own part
// (node, bgp) and the cluster's (pools, services): a node file and the
// value of the etcd key.
func SplitXLBDConfig(cfg []byte) (node, cluster []byte) {
	s := string(cfg)
	i := strings.Index(s, "pools:\n")
	j := strings.Index(s, "bgp:\n")
	k := strings.Index(s, "services:\n")
	if j < 0 {
		return []byte(s[:i]), []byte(s[i:])
	}
	return []byte(s[:i] + s[j:k]), []byte(s[i:j] + s[k:])
}

// StartXLBDCluster starts xlbd on node i with its config from etcd
// (--config url --node-config nodeFile). The node file alone is what the
// lab's cleanup gives `xlbd --cleanup` (it names the instance).
func (l *Lab) StartXLBDCluster(ctx context.Context, i int, url, nodeFile string) (*Daemon, error) {
	bin, err := l.Binary(XLBDBinary)
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(nodeFile)
	if err != nil {
		return nil, err
	}
	cache := filepath.Join(l.Dir, "cluster-cache-"+l.Nodes[i].Short+".yaml")
	// The later --config wins over the node file startXLBD passes first.
	return l.startXLBD(ctx, i, l.NodeName(i), abs, bin, "--api-socket", l.APISocket(i),
		"--config", url, "--node-config", abs, "--cluster-cache", cache)
}
