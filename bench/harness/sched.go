package harness

import (
	"errors"
	"fmt"
	"time"

	"github.com/xlbproject/xlb/internal/datapath"
	"github.com/xlbproject/xlb/internal/sched"
	"github.com/xlbproject/xlb/internal/state"
)

// SchedSpec is one scheduler setting of every VIP, measured by
// MeasureSchedulers.
type SchedSpec struct {
	Name    string          // the result's label, e.g. the config's name
	Kind    state.SchedKind // list schedulers get every backend at weight 1
	Persist time.Duration   // 0: no persistence; else each client its own template
}

// Schedulers are the scheduler settings `make bench` measures: every
// name of the scheduler list (sh as maglev-source on the whole client
// address, as the config plans it), and rr with persistence.
func Schedulers() []SchedSpec {
	var specs []SchedSpec
	for i := range sched.List {
		s := &sched.List[i]
		specs = append(specs, SchedSpec{Name: s.Name, Kind: state.SchedKind(sched.Resolve(s).Kind)})
	}
	return append(specs, SchedSpec{Name: "rr+persistence", Kind: state.SchedRR, Persist: 300 * time.Second})
}

// MeasureSchedulers measures the forwarder with each scheduler setting,
// side by side: one forwarder instance, and in each round of runs every
// setting has one run, its svc_sched written into the forwarder's maps
// just before (so drift and neighbours hit all schedulers alike; the
// connection counts, cursors and templates carry on from run to run, as
// they would on a node). Results are in the order of specs, Results.Sched
// naming each. o.Sched and o.Persist are ignored.
func MeasureSchedulers(specs []SchedSpec, o Options) ([]Results, error) {
	return MeasureSchedulerBuilds(nil, specs, o)
}

// MeasureSchedulerBuilds is MeasureSchedulers for this build's forwarder
// and, side by side with it, the forwarder of each object file in objects
// (as MeasureBuilds): results in the order this build's specs, then each
// object's; Results.Build names the object. At most 16 targets.
func MeasureSchedulerBuilds(objects []string, specs []SchedSpec, o Options) ([]Results, error) {
	if len(specs) == 0 {
		return nil, errors.New("bench: no scheduler to measure")
	}
	var out []targetSpec
	for _, obj := range append([]string{""}, objects...) {
		for i := range specs {
			out = append(out, targetSpec{table: TableXLB, noFIB: o.NoFIB, object: obj, sched: &specs[i]})
		}
	}
	return measureSpecs(out, o)
}

// schedWrite is a target's svc_sched of every service of benchState.
type schedWrite map[uint32]benchSvcSched

// schedValues is spec's svc_sched of every service of benchState(o).
func schedValues(o Options, spec *SchedSpec) (schedWrite, error) {
	o.Sched, o.Persist = spec.Kind, spec.Persist
	st, err := benchState(o)
	if err != nil {
		return nil, err
	}
	w := schedWrite{}
	for _, s := range st.Services {
		sc := &s.Sched
		v := benchSvcSched{Kind: uint8(sc.Kind), Proto: sc.Proto, Plen4: sc.Plen4, Plen6: sc.Plen6,
			N: uint32(len(sc.List)), Total: sc.Total(), Stride: sc.Stride, PersistId: sc.Persist.ID,
			PersistTimeout: datapath.Ticks(sc.Persist.Timeout), Pplen4: sc.Persist.Plen4, Pplen6: sc.Persist.Plen6}
		if i := sc.Kind.Info(); i != nil && i.Expires {
			v.Stride = datapath.LBLCTicks(lblcExpire) // the entries' expiration, as xlbd writes it
		}
		if len(sc.List) > len(v.Ent) {
			return nil, fmt.Errorf("bench: %d backends, a list holds %d", len(sc.List), len(v.Ent))
		}
		for i, e := range sc.List {
			v.Ent[i].Rid, v.Ent[i].Weight = e.RealID, e.Weight
		}
		w[s.SvcID] = v
	}
	return w, nil
}

// lblcExpire is xlbd's lblc/lblcr expiration (plan.LBLCExpiration).
const lblcExpire = 24 * time.Hour

// useSched writes t's scheduler settings into the forwarder's
// xlb_svc_sched unless they are the ones written last.
func (h *harness) useSched(t *target) error {
	if t.sched == nil || h.schedOf == t {
		return nil
	}
	m := h.repl["xlb_svc_sched"]
	if m == nil {
		return errors.New("bench: forwarder map xlb_svc_sched not found")
	}
	for id, v := range t.sched {
		if err := m.Put(id, &v); err != nil {
			return fmt.Errorf("%s: write svc_sched of service %d: %w", t, id, err)
		}
	}
	h.schedOf = t
	return nil
}
