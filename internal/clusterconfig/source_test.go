package clusterconfig_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/xlbproject/xlb/internal/clusterconfig"
	"github.com/xlbproject/xlb/internal/controller"
	"github.com/xlbproject/xlb/internal/ctl"
	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/plan"
	"github.com/xlbproject/xlb/internal/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdServer is a real etcd (Debian's etcd-server) on loopback.
type etcdServer struct {
	dir, client, peer string
	cmd               *exec.Cmd
}

func freeTCP(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func startEtcd(t *testing.T) *etcdServer {
	t.Helper()
	testenv.RequireCommands(t, "etcd")
	e := &etcdServer{dir: t.TempDir(), client: freeTCP(t), peer: freeTCP(t)}
	e.start(t)
	t.Cleanup(e.stop)
	return e
}

func (e *etcdServer) start(t *testing.T) {
	t.Helper()
	e.cmd = exec.Command("etcd", "--name", "test", "--data-dir", e.dir,
		"--listen-client-urls", "http://"+e.client, "--advertise-client-urls", "http://"+e.client,
		"--listen-peer-urls", "http://"+e.peer, "--initial-advertise-peer-urls", "http://"+e.peer,
		"--initial-cluster", "test=http://"+e.peer)
	e.cmd.Stdout, e.cmd.Stderr = nil, nil
	if err := e.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cli := e.clientOf(t)
	defer cli.Close()
	for end := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Get(ctx, "probe")
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("etcd did not answer: %v", err)
		}
	}
}

func (e *etcdServer) stop() {
	if e.cmd != nil && e.cmd.Process != nil {
		e.cmd.Process.Kill()
		e.cmd.Wait()
		e.cmd = nil
	}
}

func (e *etcdServer) clientOf(t *testing.T) *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.client}, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

func (e *etcdServer) put(t *testing.T, key, val string) int64 {
	t.Helper()
	cli := e.clientOf(t)
	defer cli.Close()
	resp, err := cli.Put(context.Background(), key, val)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// cluster6Doc is cluster4 with a second pool and service of IPv6 backends.
func cluster6Doc() string {
	return "pools:\n  web:\n    backends:\n      - {address: 10.0.1.1, weight: 1}\n      - {address: 10.0.1.2, weight: 1}\n" +
		"  web6:\n    backends:\n      - {address: \"fd00:1::1\", weight: 1}\n" +
		"services:\n  - {name: web, vip: 10.200.0.1, port: 80, protocol: tcp, pools: [web]}\n" +
		"  - {name: web6, vip: \"fd00:200::1\", port: 80, protocol: tcp, pools: [web6]}\n"
}

// testNode is one xlbd's config path: a real forwarder (loaded, not
// attached), its controller, and the etcd source.
type testNode struct {
	name string
	src  *Source
	ctl  *controller.Controller
	opts Options
}

func startNode(t *testing.T, ctx context.Context, e *etcdServer, name string, v6 bool, cache string) *testNode {
	t.Helper()
	dir := t.TempDir()
	node := fmt.Sprintf("node:\n  name: %s\n  interface: lo\n  address: 10.0.0.11\n", name)
	if v6 {
		node += "  address6: \"fd00::11\"\n"
	}
	nodeFile := filepath.Join(dir, name+".yaml")
	os.WriteFile(nodeFile, []byte(node), 0o644)
	loc, err := ParseURL("etcd://" + e.client + "/xlb/config")
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Location: loc, NodeFile: nodeFile, Cache: cache, Timeout: time.Second}
	src, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	cfg, err := src.Load(ctx)
	if err != nil {
		t.Fatalf("%s: load: %v", name, err)
	}
	ctl := controller.New(loadForwarder(t), controller.Options{Path: loc.String(), Limits: plan.Limits{MaxServices: 16, MaxReals: 64}})
	if err := ctl.Commit(cfg); err != nil {
		t.Fatalf("%s: commit: %v", name, err)
	}
	src.Committed(ctx, cfg, src.Status().Revision)
	go ctl.Run(ctx, nil)
	go src.Run(ctx, ctl)
	return &testNode{name: name, src: src, ctl: ctl, opts: opts}
}

func loadForwarder(t *testing.T) *datapath.Datapath {
	t.Helper()
	testenv.RequireRoot(t)
	var rnd [4]byte
	rand.Read(rnd[:])
	dir := filepath.Join("/sys/fs/bpf", "xlb-cctest-"+hex.EncodeToString(rnd[:]))
	t.Cleanup(func() { os.RemoveAll(dir) })
	d, err := datapath.Load(datapath.Options{Interface: "lo", PinDir: dir, ConntrackEntries: 1 << 12, MaxServices: 16, MaxReals: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// statuses waits until every node's status in etcd satisfies ok.
func waitStatuses(t *testing.T, e *etcdServer, what string, ok func(map[string]Status) bool) map[string]Status {
	t.Helper()
	cli := e.clientOf(t)
	defer cli.Close()
	loc := Location{Key: "/xlb/config"}
	var last map[string]Status
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		sts, err := Statuses(ctx, cli, loc)
		cancel()
		if err != nil {
			continue
		}
		last = map[string]Status{}
		for _, s := range sts {
			last[s.Node] = s
		}
		if ok(last) {
			return last
		}
	}
	t.Fatalf("%s: statuses %+v", what, last)
	return nil
}

func services(n *testNode) int { return len(n.ctl.State().Services) }

// TestClusterConfigFromEtcd: two nodes take their config from a real etcd.
// A new value is committed by both, each reporting the revision it runs
// under the status prefix; a value one node cannot run (IPv6 backends, no
// node.address6 there) is refused by that node alone, with the reason in its
// status, while the other commits it; an invalid value is refused by both,
// naming the key and the line; with etcd down the nodes keep their config
// and say so; a node started while etcd is down runs the cached copy.
func TestClusterConfigFromEtcd(t *testing.T) {
	e := startEtcd(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rev1 := e.put(t, "/xlb/config", Cluster4)
	cacheDir := t.TempDir()
	n1 := startNode(t, ctx, e, "n1", true, filepath.Join(cacheDir, "n1.yaml"))
	n2 := startNode(t, ctx, e, "n2", false, filepath.Join(cacheDir, "n2.yaml"))
	waitStatuses(t, e, "both running rev1", func(m map[string]Status) bool {
		return m["n1"].State == StateRunning && m["n1"].Revision == rev1 && m["n2"].State == StateRunning && m["n2"].Revision == rev1
	})

	rev2 := e.put(t, "/xlb/config", cluster6Doc())
	m := waitStatuses(t, e, "n1 runs rev2, n2 refuses it", func(m map[string]Status) bool {
		return m["n1"].Revision == rev2 && m["n2"].State == StateRefused && m["n2"].Refused != nil && m["n2"].Refused.Revision == rev2
	})
	if r := m["n2"].Refused.Reason; !strings.Contains(r, "node.address6") {
		t.Fatalf("n2's reason: %q, want it to name node.address6", r)
	}
	if m["n2"].Revision != rev1 || services(n2) != 1 || services(n1) != 2 {
		t.Fatalf("n2 runs revision %d with %d services, n1 %d services", m["n2"].Revision, services(n2), services(n1))
	}
	if m["n1"].Version == m["n2"].Version {
		t.Fatalf("n1 and n2 report the same version %s running different configs", m["n1"].Version)
	}
	t.Logf("n2 refused revision %d: %s", rev2, m["n2"].Refused.Reason)

	rev3 := e.put(t, "/xlb/config", BadDoc)
	m = waitStatuses(t, e, "both refuse rev3", func(m map[string]Status) bool {
		return m["n1"].Refused != nil && m["n1"].Refused.Revision == rev3 && m["n2"].Refused != nil && m["n2"].Refused.Revision == rev3
	})
	if r := m["n1"].Refused.Reason; !strings.Contains(r, "etcd:/xlb/config:4: pools.web.backends[0].address") {
		t.Fatalf("n1's reason %q does not name the key, line and field", r)
	}
	if services(n1) != 2 || m["n1"].Revision != rev2 {
		t.Fatalf("n1 changed on an invalid value: %d services, revision %d", services(n1), m["n1"].Revision)
	}

	// etcd down: both keep their config and say so.
	e.stop()
	for _, n := range []*testNode{n1, n2} {
		deadline := time.Now().Add(10 * time.Second)
		for n.src.Status().State != StateUnreachable && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if st := n.src.Status(); st.State != StateUnreachable {
			t.Fatalf("%s with etcd down: state %s", n.name, st.State)
		}
	}
	if services(n1) != 2 || services(n2) != 1 {
		t.Fatalf("etcd down changed the running configs")
	}
	// A node starting now runs the cached copy of its last commit.
	n3src, err := Open(n1.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer n3src.Close()
	cfg, err := n3src.Load(ctx)
	if err != nil {
		t.Fatalf("start with etcd down: %v", err)
	}
	if len(cfg.Services) != 2 || n3src.Status().State != StateUnreachable || n3src.Status().Revision != rev2 {
		t.Fatalf("start with etcd down: %d services, status %+v", len(cfg.Services), n3src.Status())
	}

	// etcd back: xlbctl apply --cluster writes a good value; both nodes
	// commit it and xlbctl shows them running it.
	e.start(t)
	file := filepath.Join(t.TempDir(), "cluster.yaml")
	os.WriteFile(file, []byte(Cluster4), 0o644)
	var out, errOut strings.Builder
	url := "etcd://" + e.client + "/xlb/config"
	if code := ctl.New(&out, &errOut).Run(ctx, []string{"apply", "--cluster", "--etcd", url, "-f", file}); code != 0 {
		t.Fatalf("xlbctl apply --cluster: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	t.Logf("xlbctl apply --cluster:\n%s", out.String())
	m = waitStatuses(t, e, "both running the applied revision", func(m map[string]Status) bool {
		return m["n1"].State == StateRunning && m["n2"].State == StateRunning && m["n1"].Revision == m["n2"].Revision && m["n1"].Revision > rev3
	})
	for _, n := range []string{"n1", "n2"} {
		if !regexp.MustCompile(`(?m)^` + n + `\s+running\s`).MatchString(out.String()) {
			t.Fatalf("xlbctl did not show %s running:\n%s", n, out.String())
		}
	}
	if services(n1) != 1 || services(n2) != 1 {
		t.Fatalf("after etcd came back: %d and %d services", services(n1), services(n2))
	}
	// An invalid document is refused by xlbctl before anything is written.
	os.WriteFile(file, []byte(BadDoc), 0o644)
	out.Reset()
	errOut.Reset()
	if code := ctl.New(&out, &errOut).Run(ctx, []string{"apply", "--cluster", "--etcd", url, "-f", file}); code == 0 ||
		!strings.Contains(errOut.String(), file+":4: pools.web.backends[0].address") {
		t.Fatalf("xlbctl apply --cluster of an invalid document: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	if m2 := waitStatuses(t, e, "unchanged", func(map[string]Status) bool { return true }); m2["n1"].Revision != m["n1"].Revision {
		t.Fatalf("an invalid document reached the nodes")
	}
}

// TestStatusWriteRetried: a status write that fails (here its context is
// already cancelled, as a slow etcd's timeout would end it) is written
// again by the node within a few seconds, without any new event: a node
// never stays absent or stale in the cluster's view because etcd was
// slow once.
func TestStatusWriteRetried(t *testing.T) {
	e := startEtcd(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.put(t, "/xlb/config", cluster6Doc())
	n := startNode(t, ctx, e, "r1", true, "")
	waitStatuses(t, e, "first status", func(m map[string]Status) bool { return m["r1"].State == StateRunning })
	dead, kill := context.WithCancel(ctx)
	kill()
	PublishChange(n.src, dead)
	want := n.src.Status().Updated
	st := waitStatuses(t, e, "status written again", func(m map[string]Status) bool { return m["r1"].Updated.Equal(want) })
	t.Logf("the failed write was retried: etcd has r1 %s at revision %d, updated %v", st["r1"].State, st["r1"].Revision, want)
}
