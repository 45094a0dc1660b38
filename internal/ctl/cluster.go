package ctl

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	pb "github.com/xlbproject/xlb/api/xlb/v1"
	"github.com/xlbproject/xlb/internal/api"
	"github.com/xlbproject/xlb/internal/clusterconfig"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// applyCluster is `xlbctl apply --cluster`: the cluster document (health
// checks, pools, services) is checked as a node would check it (with a
// placeholder node section), written to the etcd key the node's xlbd
// watches (or --etcd), and the nodes' statuses are shown once each has
// answered the new revision (or wait passed).
func (c *CLI) applyCluster(ctx context.Context, file string, data []byte, etcdURL string, dry bool, wait time.Duration) error {
	if _, err := clusterconfig.Compose([]byte(clusterconfig.Placeholder), "(placeholder node section)", data, file); err != nil {
		fmt.Fprintf(c.Err, "xlbctl: %s rejected, nothing written:\n", file)
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(c.Err, "  %s\n", line)
		}
		return fmt.Errorf("%w: config rejected", errReported)
	}
	if dry {
		fmt.Fprintf(c.Out, "%s: valid cluster config (not written: --dry-run)\n", file)
		return nil
	}
	loc, err := c.clusterLocation(ctx, etcdURL)
	if err != nil {
		return err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: loc.Endpoints, DialTimeout: 3 * time.Second})
	if err != nil {
		return err
	}
	defer cli.Close()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	resp, err := cli.Put(pctx, loc.Key, string(data))
	cancel()
	if err != nil {
		return fmt.Errorf("write %s: %w", loc, err)
	}
	rev := resp.Header.Revision
	fmt.Fprintf(c.Out, "%s written to %s (revision %d)\n", file, loc, rev)
	return c.clusterStatuses(ctx, cli, loc, rev, wait)
}

// clusterLocation is --etcd, else where this node's xlbd takes its
// config from (its status's config source).
func (c *CLI) clusterLocation(ctx context.Context, etcdURL string) (clusterconfig.Location, error) {
	if etcdURL == "" {
		var src string
		err := run(ctx, c, (*api.Client).Status, &pb.StatusRequest{}, func(r *pb.StatusResponse) error {
			src = r.GetConfig().GetSource()
			return nil
		})
		if err != nil {
			return clusterconfig.Location{}, fmt.Errorf("--cluster without --etcd asks xlbd where its config comes from: %w", err)
		}
		etcdURL, _, _ = strings.Cut(src, " ")
		if !clusterconfig.IsURL(etcdURL) {
			return clusterconfig.Location{}, fmt.Errorf("this node's xlbd runs the config %q, not one from etcd: give --etcd etcd://HOST:PORT/KEY", src)
		}
	}
	return clusterconfig.ParseURL(etcdURL)
}

// clusterStatuses waits until every node reporting under the status prefix
// has answered revision rev, or wait passes, and prints them; a node that
// refused it is an error.
func (c *CLI) clusterStatuses(ctx context.Context, cli *clientv3.Client, loc clusterconfig.Location, rev int64, wait time.Duration) error {
	var sts []clusterconfig.Status
	for end := time.Now().Add(wait); ; time.Sleep(200 * time.Millisecond) {
		gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		var err error
		sts, err = clusterconfig.Statuses(gctx, cli, loc)
		cancel()
		if err != nil {
			return fmt.Errorf("read node statuses: %w", err)
		}
		if answered(sts, rev) || time.Now().After(end) {
			break
		}
	}
	tw := tabwriter.NewWriter(c.Out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tREVISION\tVERSION\tDETAIL")
	refused := 0
	for _, s := range sts {
		detail := ""
		switch {
		case s.Refused != nil && s.Refused.Revision == rev:
			refused++
			detail = "refused: " + strings.ReplaceAll(s.Refused.Reason, "\n", "; ")
		case s.Revision < rev && s.State != clusterconfig.StateUnreachable:
			detail = "has not answered yet"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", s.Node, s.State, s.Revision, s.Version, detail)
	}
	tw.Flush()
	if refused > 0 {
		return fmt.Errorf("%w: %d node(s) refused revision %d (they keep running their previous config)", errReported, refused, rev)
	}
	return nil
}

// answered: every node runs rev or has refused it.
func answered(sts []clusterconfig.Status, rev int64) bool {
	for _, s := range sts {
		if s.Revision < rev && (s.Refused == nil || s.Refused.Revision < rev) {
			return false
		}
	}
	return len(sts) > 0
}
