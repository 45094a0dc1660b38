package ctl

import (
	"fmt"

	pb "github.com/xlbproject/xlb/api/xlb/v1"
)

// printCluster prints the status's cluster part: this node's config
// version and tables' fingerprint, then every sync peer with its version,
// fingerprint and sync state, a mismatch flagged.
func (c *CLI) printCluster(cl *pb.Cluster) error {
	if cl == nil {
		return nil // no node.sync
	}
	mismatches := 0
	for _, p := range cl.Peers {
		if p.Mismatch {
			mismatches++
		}
	}
	k := cl.GetCounters()
	fmt.Fprintf(c.Out, "%-12slisten %s; config %s, tables fingerprint %s; sent %d, received %d, applied %d, rejected %d, lag %s\n",
		"sync", cl.Listen, cl.Version, cl.Fingerprint, k.GetSent(), k.GetReceived(), k.GetApplied(), k.GetRejected(), k.GetLag().AsDuration())
	w := c.table()
	fmt.Fprintln(w, "  Peer\tNode\tState\tConfig\tFingerprint\tLast hello\t")
	for _, p := range cl.Peers {
		flag := ""
		if p.Mismatch {
			flag = "MISMATCH: its tables differ from this node's"
		}
		hello := "never"
		if p.LastHello != nil {
			hello = c.ago(p.LastHello)
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Address, orDash(p.Node), p.State, orDash(p.Version), orDash(p.Fingerprint), hello, flag)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if mismatches > 0 {
		fmt.Fprintf(c.Out, "drift: %d peer(s) run other tables than this node (compare: xlbctl status on each; metric xlb_service_table_fingerprint_info)\n", mismatches)
	}
	return nil
}
