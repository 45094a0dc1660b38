package e2e

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xlbproject/xlb/internal/testenv"
	"github.com/xlbproject/xlb/lab"
)

// TestClusterConfigEtcd: two xlbd take their config from etcd (Debian's
// etcd-server, started in the router's namespace): their node files hold
// node, the key the pools and services. `xlbctl apply --cluster` on n1
// writes a change there; both nodes commit it and xlbctl shows both
// running the new revision. An invalid document is refused by xlbctl
// before anything is written. With etcd stopped, both keep forwarding and
// their status says etcd is unreachable.
func TestClusterConfigEtcd(t *testing.T) {
	testenv.RequireNetns(t)
	testenv.RequireCommands(t, "nsenter", "ip", "etcd")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l := newLab(ctx, t, lab.Config{Nodes: 2})
	etcd, ep, err := l.StartEtcd(ctx)
	if err != nil {
		t.Fatal(err)
	}
	url := "etcd://" + ep + "/xlb/config"
	xlbctl, err := l.Binary("xlbctl")
	if err != nil {
		t.Fatal(err)
	}
	apply := func(doc []byte) (string, error) {
		file := filepath.Join(l.Dir, "cluster.yaml")
		os.WriteFile(file, doc, 0o644)
		out, err := l.Nodes[0].Run(ctx, xlbctl, "--socket", l.APISocket(0), "apply", "--cluster", "-f", file)
		return string(out), err
	}
	var cluster []byte
	nodeFiles := make([]string, 2)
	for i := range nodeFiles {
		var node []byte
		node, cluster = lab.SplitXLBDConfig(l.XLBDConfig(i, lab.XLBDOptions{}))
		nodeFiles[i] = filepath.Join(l.Dir, "node-"+l.Nodes[i].Short+".yaml")
		if err := os.WriteFile(nodeFiles[i], node, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The first value: written with --etcd (no xlbd runs yet).
	file := filepath.Join(l.Dir, "cluster.yaml")
	os.WriteFile(file, cluster, 0o644)
	if out, err := l.Nodes[0].Run(ctx, xlbctl, "apply", "--cluster", "--etcd", url, "-f", file, "--timeout", "1s"); err != nil &&
		!strings.Contains(string(out), "written to") {
		t.Fatalf("first apply: %v\n%s", err, out)
	}
	daemons := make([]*lab.Daemon, 2)
	for i := range daemons {
		if daemons[i], err = l.StartXLBDCluster(ctx, i, url, nodeFiles[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.WaitForwarding(ctx, netip.AddrPortFrom(l.VIP4(), lab.DefaultPorts.HTTP), 20*time.Second, daemons...); err != nil {
		t.Fatal(err)
	}
	// The forwarder forwards from xlbd's first commit; its API answers
	// from "xlbd running" on (before, calls are refused as "xlbd is
	// starting", which apply --cluster without --etcd needs).
	for _, d := range daemons {
		if err := d.WaitOutput(ctx, "xlbd running", 1, 20*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// A weight change through the store reaches both nodes.
	_, changed := lab.SplitXLBDConfig(l.XLBDConfig(0, lab.XLBDOptions{Weights: []int{2, 1, 1}}))
	out, err := apply(changed)
	if err != nil {
		t.Fatalf("xlbctl apply --cluster: %v\n%s", err, out)
	}
	t.Logf("xlbctl apply --cluster:\n%s", out)
	rev := regexp.MustCompile(`\(revision (\d+)\)`).FindStringSubmatch(out)
	for i := range 2 {
		if rev == nil || !regexp.MustCompile(`(?m)^`+l.NodeName(i)+`\s+running\s+`+rev[1]+`\s`).MatchString(out) {
			t.Fatalf("xlbctl does not show %s running the new revision:\n%s", l.NodeName(i), out)
		}
	}
	// An invalid document never reaches the store.
	bad := []byte(strings.Replace(string(changed), l.Backends[0].Addr4.String(), "10.100.0.300", 1))
	if out, err := apply(bad); err == nil || !strings.Contains(out, "rejected, nothing written") {
		t.Fatalf("xlbctl apply --cluster of an invalid document: %v\n%s", err, out)
	}
	// etcd down: both keep forwarding and say so.
	if err := etcd.Stop(5 * time.Second); err != nil {
		t.Logf("etcd stop: %v", err)
	}
	for i := range 2 {
		deadline := time.Now().Add(10 * time.Second)
		for {
			st, _ := l.Nodes[i].Run(ctx, xlbctl, "--socket", l.APISocket(i), "status")
			if strings.Contains(string(st), "etcd unreachable: forwarding on the last committed config") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("n%d's status does not say etcd is unreachable:\n%s", i+1, st)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if err := l.WaitForwarding(ctx, netip.AddrPortFrom(l.VIP4(), lab.DefaultPorts.HTTP), 5*time.Second, daemons...); err != nil {
		t.Fatalf("forwarding with etcd down: %v", err)
	}
}
