package kubeenv

import (
	"context"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestVersionsMatchModules: the versions Binaries looks for are the ones
// scripts/kube-bin.sh builds, those the tools/kube modules require.
func TestVersionsMatchModules(t *testing.T) {
	for mod, want := range map[string]string{
		"../../../tools/kube/apiserver/go.mod": "k8s.io/kubernetes " + KubeVersion,
		"../../../tools/kube/etcd/go.mod":      "go.etcd.io/etcd/server/v3 " + EtcdVersion,
	} {
		b, err := os.ReadFile(mod)
		if err != nil {
			t.Fatal(err)
		}
		// A require line, alone or in a block (where go mod tidy may
		// mark it indirect: the tool directive is its only user).
		re := regexp.MustCompile(`(?m)^(require)?\s+` + regexp.QuoteMeta(want) + `(\s|$)`)
		if !re.Match(b) {
			t.Errorf("%s does not require %s", mod, want)
		}
	}
}

// TestBinariesNamesMakeTarget: with an empty cache, Binaries says how to
// fill it.
func TestBinariesNamesMakeTarget(t *testing.T) {
	t.Setenv(CacheEnv, t.TempDir())
	if _, _, err := Binaries(); err == nil || !strings.Contains(err.Error(), "make kube-bin") {
		t.Fatalf("Binaries with an empty cache: %v, want an error naming make kube-bin", err)
	}
}

// TestKubeEnv: the API server takes the objects xlb reads and writes (a
// Node, a LoadBalancer Service of xlb's class, its EndpointSlice, the
// Service's status with ipMode VIP), through the Env's client and through
// its kubeconfig file, and keeps them across a stop and start of the API
// server; a KubeconfigFor user is subject to RBAC.
func TestKubeEnv(t *testing.T) {
	t0 := time.Now()
	e := Start(t)
	t.Logf("Start took %v", time.Since(t0).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	if v, err := e.Client.Discovery().ServerVersion(); err != nil || v.GitVersion != KubeVersion {
		t.Fatalf("server version %v (%v), want %s", v, err, KubeVersion)
	}
	createObjects(ctx, t, e.Client)

	// The kubeconfig file, as xlbd reads it, reaches the same server.
	rc, err := clientcmd.BuildConfigFromFlags("", e.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	fromFile := kubernetes.NewForConfigOrDie(rc)
	checkObjects(ctx, t, fromFile)

	// KubeconfigFor's users are who they say, with RBAC's verdict: one
	// bound to nothing may not list Nodes.
	rc, err = clientcmd.BuildConfigFromFlags("", e.KubeconfigFor(t, "nobody", "some-group"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = kubernetes.NewForConfigOrDie(rc).CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `"nobody"`) {
		t.Errorf("user nobody lists Nodes: %v, want forbidden", err)
	}

	t0 = time.Now()
	e.StopAPIServer(t)
	t.Logf("StopAPIServer took %v", time.Since(t0).Round(time.Millisecond))
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	if _, err := e.Client.CoreV1().Nodes().Get(short, "node-a", metav1.GetOptions{}); err == nil {
		t.Fatal("the API server still answers after StopAPIServer")
	}
	cancelShort()
	t0 = time.Now()
	e.StartAPIServer(t)
	t.Logf("StartAPIServer took %v", time.Since(t0).Round(time.Millisecond))
	checkObjects(ctx, t, e.Client)
	checkObjects(ctx, t, fromFile)
}

func createObjects(ctx context.Context, t *testing.T, c kubernetes.Interface) {
	t.Helper()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
		Status: corev1.NodeStatus{
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.11"}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
	n, err := c.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create node: %v", err)
	}
	// Without a kubelet, a Node's status is the test's to write.
	n.Status = node.Status
	if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("node status: %v", err)
	}
	class := "xlb.io/l4"
	svc, err := c.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: map[string]string{"xlb.io/scheduler": "mh"}},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeLoadBalancer,
			LoadBalancerClass:     &class,
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Selector:              map[string]string{"app": "web"},
			Ports:                 []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service: %v", err)
	}
	if svc.Spec.HealthCheckNodePort == 0 || svc.Spec.Ports[0].NodePort == 0 {
		t.Errorf("the API server gave no node ports: %+v", svc.Spec)
	}
	ready, port := true, int32(8080)
	_, err = c.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{"10.244.0.5"},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			NodeName:   &node.Name,
		}},
		Ports: []discoveryv1.EndpointPort{{Name: strPtr("http"), Port: &port}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create endpointslice: %v", err)
	}
	vip := corev1.LoadBalancerIPModeVIP
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{
		IP: "198.51.100.1", IPMode: &vip,
		Ports: []corev1.PortStatus{{Port: 80, Protocol: corev1.ProtocolTCP}},
	}}
	if _, err := c.CoreV1().Services("default").UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("service status: %v", err)
	}
}

func checkObjects(ctx context.Context, t *testing.T, c kubernetes.Interface) {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil || len(n.Status.Addresses) != 1 || n.Status.Addresses[0].Address != "10.0.0.11" {
		t.Fatalf("node-a: %v %+v", err, n)
	}
	svc, err := c.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("service: %v", err)
	}
	if svc.Spec.LoadBalancerClass == nil || *svc.Spec.LoadBalancerClass != "xlb.io/l4" || svc.Annotations["xlb.io/scheduler"] != "mh" {
		t.Errorf("service spec: class %v, annotations %v", svc.Spec.LoadBalancerClass, svc.Annotations)
	}
	ing := svc.Status.LoadBalancer.Ingress
	if len(ing) != 1 || ing[0].IP != "198.51.100.1" || ing[0].IPMode == nil || *ing[0].IPMode != corev1.LoadBalancerIPModeVIP ||
		len(ing[0].Ports) != 1 || ing[0].Ports[0].Port != 80 {
		t.Errorf("service status: %+v", svc.Status.LoadBalancer)
	}
	sl, err := c.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=web"})
	if err != nil || len(sl.Items) != 1 || len(sl.Items[0].Endpoints) != 1 || *sl.Items[0].Endpoints[0].NodeName != "node-a" {
		t.Fatalf("endpointslices of web: %v %+v", err, sl)
	}
}

func strPtr(s string) *string { return &s }

// TestFreePorts: distinct ports, below the ephemeral range when it leaves
// room, each free.
func TestFreePorts(t *testing.T) {
	ports, err := freePorts(5)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	lo := ephemeralLow()
	for _, p := range ports {
		if seen[p] || (lo > minPort+1000 && (p < minPort || p >= lo)) {
			t.Errorf("ports %v: %d repeated or outside %d..%d", ports, p, minPort, lo-1)
		}
		seen[p] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Errorf("port %d is not free: %v", p, err)
			continue
		}
		l.Close()
	}
}
