package kube

import (
	"context"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
)

// ConditionAccepted is the condition xlb keeps in a served Service's
// status.conditions: True once its addresses are in its status and its
// settings are programmed, False with a Problem's reason and message.
const ConditionAccepted = "xlb.io/Accepted"

// LeaseName is the Lease the nodes of one class elect their leader with.
func LeaseName(class string) string {
	r := strings.NewReplacer("/", "-", ".", "-", "_", "-")
	return "xlb-" + strings.ToLower(r.Replace(class))
}

// namespace is where the Lease lives: the option, else the pod's
// namespace, else kube-system.
func (s *Source) namespace() string {
	if s.o.Namespace != "" {
		return s.o.Namespace
	}
	if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil && len(b) > 0 {
		return strings.TrimSpace(string(b))
	}
	return "kube-system"
}

// lead runs for the Lease until ctx ends; while this node holds it, it
// allocates addresses and writes the Services' status and Events.
func (s *Source) lead(ctx context.Context) {
	o := s.o
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: LeaseName(s.model.class), Namespace: s.namespace()},
		Client:     s.client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: o.Identity},
	}
	lec := leaderelection.LeaderElectionConfig{
		Lock: lock, ReleaseOnCancel: true, Name: lock.LeaseMeta.Name,
		LeaseDuration: or(o.LeaseDuration, 15*time.Second), RenewDeadline: or(o.RenewDeadline, 10*time.Second),
		RetryPeriod: or(o.RetryPeriod, 2*time.Second),
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: s.leadStatus,
			OnStoppedLeading: func() { s.setLeading(false) },
		},
	}
	le, err := leaderelection.NewLeaderElector(lec)
	if err != nil {
		s.log.Error("leader election not started: this node never writes status", "error", err)
		return
	}
	for ctx.Err() == nil {
		le.Run(ctx) // returns when leadership is lost
	}
}

func or(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func (s *Source) setLeading(on bool) {
	s.mu.Lock()
	changed := s.status.Leader != on
	s.status.Leader = on
	s.mu.Unlock()
	if changed {
		s.log.Info("leadership", "leader", on, "identity", s.o.Identity)
	}
}

// notifyLeader wakes the status writer after a sync.
func (s *Source) notifyLeader() {
	select {
	case s.leaderKick <- struct{}{}:
	default:
	}
}

// leadStatus is the leader's loop: after every sync (and every few
// seconds) it brings each served Service's status to what it should be.
func (s *Source) leadStatus(ctx context.Context) {
	s.setLeading(true)
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: s.client.CoreV1().Events("")})
	defer b.Shutdown()
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "xlb", Host: s.o.Identity})
	select {
	case <-s.synced:
	case <-ctx.Done():
		return
	}
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		s.writeStatus(ctx, rec)
		select {
		case <-ctx.Done():
			return
		case <-s.leaderKick:
		case <-t.C:
		}
	}
}

// writeStatus allocates and writes status for every served Service,
// oldest first.
func (s *Source) writeStatus(ctx context.Context, rec record.EventRecorder) {
	used := map[netip.Addr]Key{}
	if vips, err := s.sink.FileVIPs(ctx); err == nil {
		for _, a := range vips {
			used[a] = Key{}
		}
	}
	svcs := s.services()
	slices.SortFunc(svcs, byAge)
	s.mu.Lock()
	problems := s.problems
	s.mu.Unlock()
	type write struct {
		svc   *corev1.Service
		addrs []netip.Addr
		prob  *Problem
	}
	var writes []write
	for _, svc := range svcs { // in order: the allocation is deterministic
		if !serves(svc, s.model.class) {
			continue
		}
		addrs, prob := s.alloc.assign(svc, used)
		if p := problems[keyOf(svc)]; prob == nil && p != nil && p.Reason != ReasonAddressInUse {
			prob = p
		}
		writes = append(writes, write{svc, addrs, prob})
	}
	// The writes themselves are independent: a few at a time, so that a
	// thousand new Services get their status in seconds.
	next := make(chan write)
	var wg sync.WaitGroup
	for range statusWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w := range next {
				s.writeOne(ctx, rec, w.svc, w.addrs, w.prob)
			}
		}()
	}
	for _, w := range writes {
		if ctx.Err() != nil {
			break
		}
		next <- w
	}
	close(next)
	wg.Wait()
}

// statusWriters is how many status writes the leader has in flight.
const statusWriters = 8

// writeOne updates svc's status when it differs: the ingress (kept as it
// is when prob stopped the allocation) and the condition; a new problem
// is also an Event.
func (s *Source) writeOne(ctx context.Context, rec record.EventRecorder, svc *corev1.Service, addrs []netip.Addr, prob *Problem) {
	next := svc.DeepCopy()
	if addrs != nil {
		next.Status.LoadBalancer.Ingress = ingress(svc, addrs)
	}
	cond := metav1.Condition{Type: ConditionAccepted, Status: metav1.ConditionTrue, Reason: "Accepted",
		Message: "served on " + joinAddrs(addrs), ObservedGeneration: svc.Generation}
	if prob != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, prob.Reason, prob.Message
	}
	old := meta.FindStatusCondition(svc.Status.Conditions, ConditionAccepted)
	condSame := old != nil && old.Status == cond.Status && old.Reason == cond.Reason && old.Message == cond.Message &&
		old.ObservedGeneration == cond.ObservedGeneration
	if condSame && equality.Semantic.DeepEqual(next.Status.LoadBalancer, svc.Status.LoadBalancer) {
		return
	}
	meta.SetStatusCondition(&next.Status.Conditions, cond)
	if _, err := s.client.CoreV1().Services(svc.Namespace).UpdateStatus(ctx, next, metav1.UpdateOptions{}); err != nil {
		s.log.Warn("service status not written (again at the next sync)", "service", keyOf(svc), "error", err)
		return
	}
	switch {
	case condSame:
	case prob != nil:
		rec.Event(svc, corev1.EventTypeWarning, prob.Reason, prob.Message)
	case !equality.Semantic.DeepEqual(next.Status.LoadBalancer, svc.Status.LoadBalancer):
		rec.Event(svc, corev1.EventTypeNormal, "AddressAssigned", cond.Message)
	}
}

// ingress is the status of svc served on addrs: one entry per address,
// ipMode VIP, with every port.
func ingress(svc *corev1.Service, addrs []netip.Addr) []corev1.LoadBalancerIngress {
	vip := corev1.LoadBalancerIPModeVIP
	var ports []corev1.PortStatus
	for _, p := range svc.Spec.Ports {
		ports = append(ports, corev1.PortStatus{Port: p.Port, Protocol: p.Protocol})
	}
	out := make([]corev1.LoadBalancerIngress, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, corev1.LoadBalancerIngress{IP: a.String(), IPMode: &vip, Ports: slices.Clone(ports)})
	}
	return out
}

func joinAddrs(addrs []netip.Addr) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}
