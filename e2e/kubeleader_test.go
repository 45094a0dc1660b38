package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pb "github.com/xlbproject/xlb/api/xlb/v1"
	"github.com/xlbproject/xlb/internal/kube"
	"github.com/xlbproject/xlb/lab"
)

// TestKubernetesLeader runs xlbd on two nodes (with connection sync)
// against one API server: one holds the Lease and is the one status
// writer; both program the same tables (the same fingerprint); when the
// leader is killed, the other takes the Lease and serves the next
// Service's status.
func TestKubernetesLeader(t *testing.T) {
	e := setupKube(t, 2, true)
	e.createService(t, lab.KubeService("web"))
	vip, _ := e.waitAddress(t, "web")
	e.setEndpoints(t, "web", readyOn("b1"), readyOn("b2"), readyOn("b3"))
	for i := range 2 {
		e.waitBackends(t, i, vip, "b1", "b2", "b3")
	}
	leader := e.waitLeader(t, "")
	t.Logf("leader %s", leader)
	ev := e.waitEvent(t, "web", "AddressAssigned", vip.String())
	if ev.Source.Host != leader || ev.Count != 1 {
		t.Fatalf("AddressAssigned written by %q, %d times; want once, by the leader %s", ev.Source.Host, ev.Count, leader)
	}
	roles := map[string]int{}
	for i := range 2 {
		st := waitStatus(t, e.l, i, "kubernetes connected", 10*time.Second, func(st *pb.StatusResponse) bool {
			return strings.Contains(st.GetConfig().GetSource(), "kubernetes: connected")
		})
		for _, r := range []string{"leader", "follower"} {
			if strings.Contains(st.GetConfig().GetSource(), r) {
				roles[r]++
			}
		}
	}
	if roles["leader"] != 1 || roles["follower"] != 1 {
		t.Fatalf("roles %v, want one leader and one follower", roles)
	}
	fp := e.sameFingerprint(t)
	t.Logf("both nodes' tables fingerprint %s", fp)

	li := 0
	if e.l.NodeName(1) == leader {
		li = 1
	}
	e.daemons[li].Kill()
	next := e.waitLeader(t, leader)
	if next != e.l.NodeName(1-li) {
		t.Fatalf("leadership went to %q, want %s", next, e.l.NodeName(1-li))
	}
	e.createService(t, lab.KubeService("web2", func(s *corev1.Service) {
		s.Spec.ExternalTrafficPolicy, s.Spec.HealthCheckNodePort = corev1.ServiceExternalTrafficPolicyCluster, 0
	}))
	vip2, _ := e.waitAddress(t, "web2")
	if ev := e.waitEvent(t, "web2", "AddressAssigned", vip2.String()); ev.Source.Host != next {
		t.Fatalf("web2's address written by %q, want the new leader %s", ev.Source.Host, next)
	}
	e.waitBackends(t, 1-li, vip2, "b1", "b2", "b3")
}

// waitLeader waits for the Lease to name a holder other than not, and
// returns it.
func (e *kubeEnv) waitLeader(t *testing.T, not string) string {
	t.Helper()
	deadline := time.Now().Add(40 * time.Second)
	for {
		l, err := e.cs.CoordinationV1().Leases("kube-system").Get(context.Background(), kube.LeaseName("xlb.io/l4"), metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" && *l.Spec.HolderIdentity != not {
			return *l.Spec.HolderIdentity
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Lease holder other than %q: %v %v", not, l, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// sameFingerprint waits until both nodes report the same tables
// fingerprint, and returns it.
func (e *kubeEnv) sameFingerprint(t *testing.T) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var fps [2]string
		for i := range 2 {
			if st, err := nodeStatus(e.l, i); err == nil {
				fps[i] = st.GetCluster().GetFingerprint()
			}
		}
		if fps[0] != "" && fps[0] == fps[1] {
			return fps[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("tables fingerprints %q and %q", fps[0], fps[1])
		}
		time.Sleep(100 * time.Millisecond)
	}
}
