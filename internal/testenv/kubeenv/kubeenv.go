// Package kubeenv runs a real Kubernetes API server for tests: etcd and
// kube-apiserver on loopback, built by `make kube-bin` into a cache keyed
// by version (scripts/kube-bin.sh), with an admin client and a kubeconfig
// file for xlbd. There is no kubelet, scheduler or controller-manager:
// tests create Nodes and EndpointSlices themselves.
//
// Without the binaries a test is skipped with the reason, or failed under
// CI=true (testenv.Unavailable). `go test -short` (make check) leaves out
// every test that starts an API server.
package kubeenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/xlbproject/xlb/internal/testenv"
)

// The versions built by scripts/kube-bin.sh: those tools/kube/apiserver
// and tools/kube/etcd require (a test checks that they agree).
const (
	KubeVersion = "v1.37.2"
	EtcdVersion = "v3.6.16"
)

// CacheEnv names the environment variable that moves the binaries' cache
// from DefaultCache (scripts/kube-bin.sh reads it too).
const (
	CacheEnv     = "XLB_KUBE_CACHE"
	DefaultCache = "/var/cache/xlb/kube"
)

// startTimeout bounds each start of etcd or of the API server.
const startTimeout = 90 * time.Second

// Env is one etcd and one API server on loopback, and an admin client.
type Env struct {
	Kubeconfig string // path of a kubeconfig file for xlbd (the admin's)
	Config     *rest.Config
	Client     kubernetes.Interface

	dir       string
	server    string // the API server's URL
	apiBin    string
	apiArgs   []string
	pki       *pki
	mu        sync.Mutex
	etcd      *proc
	apiserver *proc // nil while stopped
}

// Binaries returns the paths of the cached kube-apiserver and etcd, or an
// error naming `make kube-bin` when either is missing.
func Binaries() (apiserver, etcd string, err error) {
	cache := os.Getenv(CacheEnv)
	if cache == "" {
		cache = DefaultCache
	}
	apiserver = filepath.Join(cache, "kube-apiserver", KubeVersion, "kube-apiserver")
	etcd = filepath.Join(cache, "etcd", EtcdVersion, "etcd")
	for _, b := range []string{apiserver, etcd} {
		if fi, err := os.Stat(b); err != nil || fi.Mode()&0o111 == 0 {
			return "", "", fmt.Errorf("no %s (run make kube-bin; %s moves the cache from %s)", b, CacheEnv, DefaultCache)
		}
	}
	return apiserver, etcd, nil
}

// Start starts etcd and the API server in t's temporary directory and
// returns once the API server's /readyz is ok and the default and
// kube-system namespaces exist. t.Cleanup stops both.
func Start(t testing.TB) *Env {
	t.Helper()
	if testing.Short() {
		t.Skip("starts an API server: left out of -short (make check); make test runs it")
	}
	apiBin, etcdBin, err := Binaries()
	if err != nil {
		testenv.Unavailable(t, "a real API server: %v", err)
	}
	e := &Env{dir: t.TempDir(), apiBin: apiBin}
	t.Cleanup(func() { e.stopAll(t) })
	if e.pki, err = newPKI(e.dir); err != nil {
		t.Fatalf("kubeenv: key material: %v", err)
	}
	ports, err := freePorts(3)
	if err != nil {
		t.Fatalf("kubeenv: ports: %v", err)
	}
	etcdURL, err := e.startEtcd(etcdBin, ports[0], ports[1])
	if err != nil {
		t.Fatalf("kubeenv: %v", err)
	}
	e.apiArgs = e.apiserverArgs(etcdURL, ports[2])
	if err := e.clients("https://127.0.0.1:" + strconv.Itoa(ports[2])); err != nil {
		t.Fatalf("kubeenv: %v", err)
	}
	if err := e.startAPIServer(); err != nil {
		t.Fatalf("kubeenv: %v", err)
	}
	return e
}

// StopAPIServer stops the API server (SIGTERM, then SIGKILL after 5 s);
// etcd and its data stay.
func (e *Env) StopAPIServer(t testing.TB) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.apiserver == nil {
		t.Fatal("kubeenv: StopAPIServer: the API server is not running")
	}
	e.apiserver.stop(5 * time.Second)
	e.apiserver = nil
}

// StartAPIServer starts the API server stopped by StopAPIServer again, on
// the same address with the same certificates, and returns once it is
// ready.
func (e *Env) StartAPIServer(t testing.TB) {
	t.Helper()
	if err := e.startAPIServer(); err != nil {
		t.Fatalf("kubeenv: %v", err)
	}
}

func (e *Env) stopAll(t testing.TB) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.apiserver != nil {
		if t.Failed() {
			t.Logf("kubeenv: the API server's log ends:\n%s", e.apiserver.tail(30))
		}
		e.apiserver.stop(5 * time.Second)
		e.apiserver = nil
	}
	if e.etcd != nil {
		e.etcd.stop(5 * time.Second)
		e.etcd = nil
	}
}

// startEtcd starts a one-member etcd on the two loopback ports and waits
// for its /health; it returns the client URL. Its data is in the
// temporary directory and never synced to disk.
func (e *Env) startEtcd(bin string, clientPort, peerPort int) (string, error) {
	client := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peer := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	args := []string{
		"--name=kubeenv",
		"--data-dir=" + filepath.Join(e.dir, "etcd"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=kubeenv=" + peer,
		"--unsafe-no-fsync",
		"--log-level=warn",
	}
	p, err := startProc("etcd", bin, args, filepath.Join(e.dir, "etcd.log"))
	if err != nil {
		return "", err
	}
	e.etcd = p
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	return client, p.waitFor(ctx, func(ctx context.Context) error {
		return httpOK(ctx, client+"/health", `"health":"true"`)
	})
}
