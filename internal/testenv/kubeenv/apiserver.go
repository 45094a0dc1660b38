package kubeenv

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// apiserverArgs returns the API server's flags: loopback only, no
// endpoint reconciler (it would publish 127.0.0.1 as the kubernetes
// Service's endpoint, which the API server refuses), dual-stack service
// ranges, RBAC, client certificates from the Env's CA, and privileged
// containers allowed (the decap DaemonSet is one).
func (e *Env) apiserverArgs(etcdURL string, port int) []string {
	return []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(e.dir, "certs"),
		"--tls-cert-file=" + e.pki.servingCert,
		"--tls-private-key-file=" + e.pki.servingKey,
		"--client-ca-file=" + e.pki.caCert,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + e.pki.saPub,
		"--service-account-signing-key-file=" + e.pki.saKey,
		"--service-cluster-ip-range=10.96.0.0/16,fd00:10:96::/112",
		"--endpoint-reconciler-type=none",
		"--authorization-mode=RBAC",
		"--allow-privileged=true",
		"--profiling=false",
		"--v=0",
	}
}

// clients writes the admin kubeconfig and makes the Env's rest.Config and
// clientset from it, so that the file xlbd reads is the one the tests use.
func (e *Env) clients(server string) error {
	e.server = server
	e.Kubeconfig = filepath.Join(e.dir, "kubeconfig")
	if err := e.writeKubeconfig(e.Kubeconfig, adminUser, e.pki.adminCertPEM, e.pki.adminKeyPEM); err != nil {
		return err
	}
	rc, err := clientcmd.BuildConfigFromFlags("", e.Kubeconfig)
	if err != nil {
		return fmt.Errorf("read kubeconfig: %w", err)
	}
	// Tests create objects by the thousand: no client-side rate limit.
	rc.QPS, rc.Burst = 5000, 10000
	e.Config = rc
	if e.Client, err = kubernetes.NewForConfig(rc); err != nil {
		return err
	}
	return nil
}

// writeKubeconfig writes a kubeconfig file for the API server, whose user
// authenticates with the client certificate and key (PEM).
func (e *Env) writeKubeconfig(path, user string, cert, key []byte) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubeenv"] = &clientcmdapi.Cluster{Server: e.server, CertificateAuthorityData: e.pki.caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts["kubeenv"] = &clientcmdapi.Context{Cluster: "kubeenv", AuthInfo: user}
	cfg.CurrentContext = "kubeenv"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

// startAPIServer starts the API server and waits until /readyz is ok and
// the namespaces the API server creates itself exist.
func (e *Env) startAPIServer() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.apiserver != nil {
		return fmt.Errorf("the API server is already running")
	}
	p, err := startProc("kube-apiserver", e.apiBin, e.apiArgs, filepath.Join(e.dir, "kube-apiserver.log"))
	if err != nil {
		return err
	}
	e.apiserver = p
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	return p.waitFor(ctx, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		body, err := e.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("readyz: %w", err)
		}
		if strings.TrimSpace(string(body)) != "ok" {
			return notOK(body)
		}
		for _, ns := range []string{metav1.NamespaceDefault, metav1.NamespaceSystem} {
			if _, err := e.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
				return fmt.Errorf("namespace %s: %w", ns, err)
			}
		}
		return nil
	})
}

// httpOK GETs url and wants a 200 whose body contains want.
func httpOK(ctx context.Context, url, want string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
		return fmt.Errorf("%s: %s: %w", url, resp.Status, notOK(body))
	}
	return nil
}
