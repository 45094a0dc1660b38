package lab

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	pb "github.com/xlbproject/xlb/api/xlb/v1"
	"github.com/xlbproject/xlb/internal/api"
)

// The objects of the Kubernetes lab, as the tests and the demo make
// them: there is no kubelet or controller-manager, so the lab creates the
// Nodes (its backends) and the EndpointSlices itself.

// KubeHCPort is the backends' HTTP port in the Kubernetes lab: the Local
// Services' healthCheckNodePort (kube-proxy's /healthz).
const KubeHCPort = 30080

// KubeNamespace holds the lab's Services.
const KubeNamespace = "default"

// KubeCluster drives the lab's cluster through an API server.
type KubeCluster struct {
	CS kubernetes.Interface
}

// AddNode makes backend h a Ready Node named h.Short with its InternalIPs.
func (c *KubeCluster) AddNode(ctx context.Context, h *Host) error {
	n, err := c.CS.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: h.Short}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: h.Addr4.String()},
		{Type: corev1.NodeInternalIP, Address: h.Addr6.String()}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(), Reason: "KubeletReady", Message: "lab node"}}
	_, err = c.CS.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	return err
}

// KubeService is a LoadBalancer Service of class xlb.io/l4 on the
// backends' TCP echo port, policy Local (health check on KubeHCPort),
// changed by mod.
func KubeService(name string, mod ...func(*corev1.Service)) *corev1.Service {
	class := "xlb.io/l4"
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: KubeNamespace, Name: name, Annotations: map[string]string{}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerClass: &class,
			Selector:              map[string]string{"app": name},
			Ports:                 []corev1.ServicePort{{Name: "echo", Port: int32(DefaultPorts.TCP), Protocol: corev1.ProtocolTCP}},
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, HealthCheckNodePort: KubeHCPort},
	}
	for _, m := range mod {
		m(s)
	}
	return s
}

// KubeEndpoint is one endpoint of a Service on a node (a backend's
// Short name) with its conditions.
type KubeEndpoint struct {
	Node                        string
	Ready, Serving, Terminating bool
}

// ReadyOn is a ready endpoint on node.
func ReadyOn(node string) KubeEndpoint { return KubeEndpoint{Node: node, Ready: true, Serving: true} }

// TerminatingOn is an endpoint on node that is terminating but serving.
func TerminatingOn(node string) KubeEndpoint {
	return KubeEndpoint{Node: node, Serving: true, Terminating: true}
}

// SetEndpoints makes the Service's one EndpointSlice hold eps.
func (c *KubeCluster) SetEndpoints(ctx context.Context, svc string, eps ...KubeEndpoint) error {
	port, proto, name := int32(DefaultPorts.TCP), corev1.ProtocolTCP, "echo"
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: KubeNamespace, Name: svc + "-slice", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}
	for i, p := range eps {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{fmt.Sprintf("10.244.%d.%d", i/200, 10+i%200)}, NodeName: &p.Node,
			Conditions: discoveryv1.EndpointConditions{Ready: &p.Ready, Serving: &p.Serving, Terminating: &p.Terminating}})
	}
	esc := c.CS.DiscoveryV1().EndpointSlices(KubeNamespace)
	cur, err := esc.Get(ctx, es.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = esc.Create(ctx, es, metav1.CreateOptions{})
	case err == nil:
		es.ResourceVersion = cur.ResourceVersion
		_, err = esc.Update(ctx, es, metav1.UpdateOptions{})
	}
	return err
}

// WaitAddress waits for the Service's status to hold an address.
func (c *KubeCluster) WaitAddress(ctx context.Context, name string, timeout time.Duration) (netip.Addr, *corev1.Service, error) {
	deadline := time.Now().Add(timeout)
	for {
		s, err := c.CS.CoreV1().Services(KubeNamespace).Get(ctx, name, metav1.GetOptions{})
		if err == nil && len(s.Status.LoadBalancer.Ingress) > 0 {
			a, err := netip.ParseAddr(s.Status.LoadBalancer.Ingress[0].IP)
			return a, s, err
		}
		if time.Now().After(deadline) {
			return netip.Addr{}, nil, fmt.Errorf("Service %s has no address in its status after %v (%v)", name, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitEvent waits for an Event on the Service with reason and a message
// containing want.
func (c *KubeCluster) WaitEvent(ctx context.Context, svc, reason, want string, timeout time.Duration) (corev1.Event, error) {
	deadline := time.Now().Add(timeout)
	for {
		evs, err := c.CS.CoreV1().Events(KubeNamespace).List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, ev := range evs.Items {
				if ev.InvolvedObject.Name == svc && ev.Reason == reason && strings.Contains(ev.Message, want) {
					return ev, nil
				}
			}
		}
		if time.Now().After(deadline) {
			return corev1.Event{}, fmt.Errorf("no Event %s on %s with %q after %v (%v)", reason, svc, want, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ServiceTable returns, from node i's API, the backends (Short names) of
// vip:port/tcp with entries in its Maglev table, and those in the data
// plane without entries (draining); found is false without the service.
func (l *Lab) ServiceTable(ctx context.Context, i int, vip netip.Addr, port uint16) (table, drained []string, found bool, err error) {
	c, err := api.Dial(api.DialOptions{Socket: l.APISocket(i)})
	if err != nil {
		return nil, nil, false, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := c.ListServices(ctx, &pb.ListServicesRequest{})
	if err != nil {
		return nil, nil, false, err
	}
	names := map[string]string{}
	for _, b := range l.Backends {
		names[b.Addr4.String()], names[b.Addr6.String()] = b.Short, b.Short
	}
	for _, s := range r.GetServices() {
		if s.GetVip() != vip.String() || s.GetPort() != uint32(port) {
			continue
		}
		found = true
		for _, b := range s.GetBackends() {
			switch {
			case b.GetTableEntries() > 0:
				table = append(table, names[b.GetAddress()])
			case b.GetInDataPlane():
				drained = append(drained, names[b.GetAddress()])
			}
		}
	}
	slices.Sort(table)
	slices.Sort(drained)
	return table, drained, found, nil
}
