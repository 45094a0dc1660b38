// Package kubernetes_test checks the manifests of this directory against
// a real API server (internal/testenv/kubeenv): each is created, with the
// server's strict field validation, and xlbd's ServiceAccount may do what
// xlbd does and nothing it does not need.
package kubernetes_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/xlbproject/xlb/internal/testenv/kubeenv"
)

// xlbdUser is the user of xlbd's ServiceAccount (rbac.yaml).
const xlbdUser = "system:serviceaccount:xlb-system:xlbd"

// TestManifests creates every manifest in a real API server (strict field
// validation: an unknown or misplaced field fails), then checks the
// access rbac.yaml gives xlbd's ServiceAccount.
func TestManifests(t *testing.T) {
	e := kubeenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	kinds := map[string]int{}
	for _, o := range e.Apply(t, files...) {
		kinds[o.GetKind()]++
	}
	for _, k := range []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet", "Service"} {
		if kinds[k] == 0 {
			t.Errorf("no %s among the manifests (%v)", k, kinds)
		}
	}
	checkExampleService(ctx, t, e.Client)
	checkDaemonSetPod(ctx, t, e.Client)
	checkAccess(ctx, t, e.KubeconfigFor(t, xlbdUser))
}

// checkExampleService: the example is a Service xlbd takes.
func checkExampleService(ctx context.Context, t *testing.T, c kubernetes.Interface) {
	svc, err := c.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Spec.LoadBalancerClass == nil || *svc.Spec.LoadBalancerClass != "xlb.io/l4" ||
		svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal || svc.Spec.HealthCheckNodePort == 0 {
		t.Errorf("the example Service is not one xlbd serves with a health check node port: %+v", svc.Spec)
	}
	for _, a := range []string{"xlb.io/scheduler", "xlb.io/method"} {
		if svc.Annotations[a] == "" {
			t.Errorf("the example Service has no %s annotation", a)
		}
	}
}

// checkAccess asks, as xlbd's ServiceAccount (a kubeconfig of its user),
// whether it may do each thing xlbd does (it must) and a few it does not
// (it must not), then does some of them for real.
func checkAccess(ctx context.Context, t *testing.T, kubeconfig string) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	type ask struct {
		group, resource, sub, verb, ns string
		allowed                        bool
	}
	var asks []ask
	for _, v := range []string{"get", "list", "watch"} {
		asks = append(asks, ask{"", "services", "", v, "", true}, ask{"", "nodes", "", v, "", true},
			ask{"discovery.k8s.io", "endpointslices", "", v, "", true})
	}
	for _, v := range []string{"update", "patch"} {
		asks = append(asks, ask{"", "services", "status", v, "default", true})
	}
	for _, v := range []string{"create", "patch"} {
		asks = append(asks, ask{"", "events", "", v, "default", true}, ask{"events.k8s.io", "events", "", v, "default", true})
	}
	for _, v := range []string{"get", "create", "update"} {
		asks = append(asks, ask{"coordination.k8s.io", "leases", "", v, "xlb-system", true})
	}
	asks = append(asks,
		ask{"", "services", "", "delete", "default", false},
		ask{"", "services", "", "update", "default", false},
		ask{"", "services", "", "create", "default", false},
		ask{"", "nodes", "", "update", "", false},
		ask{"", "nodes", "status", "patch", "", false},
		ask{"discovery.k8s.io", "endpointslices", "", "create", "default", false},
		ask{"", "secrets", "", "get", "xlb-system", false},
		ask{"", "pods", "", "list", "", false},
		ask{"coordination.k8s.io", "leases", "", "delete", "xlb-system", false},
	)
	for _, a := range asks {
		r, err := c.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Group: a.group, Resource: a.resource, Subresource: a.sub, Verb: a.verb, Namespace: a.ns,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("access review: %v", err)
		}
		if r.Status.Allowed != a.allowed {
			t.Errorf("xlbd %s %s.%s/%s in %q: allowed %v, want %v (%s)", a.verb, a.resource, a.group, a.sub, a.ns, r.Status.Allowed, a.allowed, r.Status.Reason)
		}
	}
	checkAccessForReal(ctx, t, c)
}

// checkAccessForReal does, as xlbd, what it does: list the Services,
// write the example's status, record an Event, take a Lease; and fails
// to delete the Service.
func checkAccessForReal(ctx context.Context, t *testing.T, c kubernetes.Interface) {
	svcs, err := c.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil || len(svcs.Items) == 0 {
		t.Fatalf("xlbd lists Services: %v", err)
	}
	svc, err := c.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vip := corev1.LoadBalancerIPModeVIP
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.7", IPMode: &vip}}
	if _, err := c.CoreV1().Services("default").UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Errorf("xlbd writes a Service's status: %v", err)
	}
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: "web.", Namespace: "default"},
		InvolvedObject: corev1.ObjectReference{Kind: "Service", Namespace: "default", Name: "web", UID: svc.UID},
		Reason:         "InvalidAnnotation", Message: "test", Type: corev1.EventTypeWarning,
		Source: corev1.EventSource{Component: "xlbd"},
	}
	if _, err := c.CoreV1().Events("default").Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		t.Errorf("xlbd records an Event: %v", err)
	}
	holder := "lb1"
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "xlbd", Namespace: "xlb-system"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}
	if _, err := c.CoordinationV1().Leases("xlb-system").Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Errorf("xlbd takes a Lease: %v", err)
	}
	err = c.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("xlbd deletes a Service: %v, want forbidden", err)
	}
}

// checkDaemonSetPod: a Pod of the decap DaemonSet's template passes the
// Pod admission chain (priority class, privileged containers), with a
// server-side dry run: there is no DaemonSet controller to make one.
func checkDaemonSetPod(ctx context.Context, t *testing.T, c kubernetes.Interface) {
	ds, err := c.AppsV1().DaemonSets("xlb-system").Get(ctx, "xlb-decap", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The ServiceAccount admission wants the namespace's default account,
	// which the controller-manager would make.
	if _, err := c.CoreV1().ServiceAccounts("xlb-system").Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: ds.Spec.Template.ObjectMeta, Spec: ds.Spec.Template.Spec}
	pod.Name, pod.Namespace, pod.Spec.NodeName = "xlb-decap-test", "xlb-system", "node-a"
	p, err := c.CoreV1().Pods("xlb-system").Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatalf("a Pod of the decap DaemonSet: %v", err)
	}
	if !p.Spec.HostNetwork || p.Spec.Priority == nil || *p.Spec.Priority < 2000000000 {
		t.Errorf("the decap Pod: hostNetwork %v, priority %v", p.Spec.HostNetwork, p.Spec.Priority)
	}
	if cmd := p.Spec.Containers[0].Command; len(cmd) != 3 || cmd[0] != "xlb-decap" || cmd[1] != "follow" {
		t.Errorf("the decap Pod runs %q, want xlb-decap follow IFACE", cmd)
	}
}
