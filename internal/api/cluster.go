package api

import (
	"time"

	pb "github.com/xlbproject/xlb/api/xlb/v1"
)

// ClusterInfo is the node among its sync peers (node.sync): the
// fingerprints of its committed tables, each peer as last heard, and the
// sync counters.
type ClusterInfo struct {
	Version                           string // config version
	Fingerprint                       string // hex
	Services                          []ServiceFingerprint
	Listen                            string
	Peers                             []SyncPeer
	Sent, Received, Applied, Rejected uint64
	Lag                               time.Duration
}

// ServiceFingerprint is one service's table fingerprint.
type ServiceFingerprint struct {
	VIP, Fingerprint string
}

// SyncPeer is one peer as this node sees it.
type SyncPeer struct {
	Addr, Node, Version, Fingerprint string
	State                            string // up | down | unknown
	Mismatch                         bool
	LastHello                        time.Time
}

func clusterToPB(c *ClusterInfo) *pb.Cluster {
	if c == nil {
		return nil
	}
	r := &pb.Cluster{Version: c.Version, Fingerprint: c.Fingerprint, Listen: c.Listen,
		Counters: &pb.SyncCounters{Sent: c.Sent, Received: c.Received, Applied: c.Applied, Rejected: c.Rejected, Lag: dur(c.Lag)}}
	for _, s := range c.Services {
		r.Services = append(r.Services, &pb.ServiceFingerprint{Vip: s.VIP, Fingerprint: s.Fingerprint})
	}
	for _, p := range c.Peers {
		r.Peers = append(r.Peers, &pb.SyncPeer{Address: p.Addr, Node: p.Node, Version: p.Version, Fingerprint: p.Fingerprint,
			State: p.State, Mismatch: p.Mismatch, LastHello: ts(p.LastHello)})
	}
	return r
}
