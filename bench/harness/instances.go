package harness

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/xlbproject/xlb/internal/datapath"
)

// Instances. The kernel places each program it loads (and each of its
// functions) at an address of its own choosing, partly at random, and
// where the code lands moves its speed: two loads of the same object can
// differ by 5-10% per packet, for as long as they stay loaded, whatever
// the order of the runs. Comparing one load of A with one load of B would
// compare their placements as much as A and B. So every program under
// test is loaded Options.Instances times and run r of a target uses
// instance r mod Instances: a figure is the median over many placements,
// as it would be over many restarts of xlbd. The instances of a program
// share its maps (the forwarder's are the harness's; bench_lru's table is
// the first instance's), so priming one primes them all; targets that run
// the same program (other settings: FIB, scheduler, sync) share its
// instances.

// instKey says which program a target runs.
type instKey struct {
	table  Table
	stop   Stage
	object string
	apart  int // targetSpec.apart
}

// instances are the loads of one program.
type instances struct {
	progs []*ebpf.Program
	objs  []*benchObjects    // bench_lru's collections; none for TableXLB
	colls []*ebpf.Collection // the forwarder's (but h.dp's)
}

func (in *instances) close() {
	for _, o := range in.objs {
		o.Close()
	}
	for _, c := range in.colls {
		c.Close()
	}
}

// use makes run r of t use instance r mod Instances.
func (t *target) use(r int) { t.prog = t.inst.progs[r%len(t.inst.progs)] }

// loadTarget gives t the instances of the program of s, loading them
// unless another target runs the same program.
func (h *harness) loadTarget(t *target, s targetSpec) error {
	key := instKey{s.table, s.stop, s.object, s.apart}
	if h.loaded == nil {
		h.loaded = map[instKey]*instances{}
	}
	in := h.loaded[key]
	if in == nil {
		in = new(instances)
		h.loaded[key] = in
		if err := h.loadInstances(in, s); err != nil {
			return err
		}
	}
	t.inst, t.prog = in, in.progs[0]
	return nil
}

// loadInstances loads h.o.Instances instances of the program of s.
func (h *harness) loadInstances(in *instances, s targetSpec) error {
	var spec *ebpf.CollectionSpec
	var err error
	switch {
	case s.table == TableXLB && s.object != "":
		spec, err = ebpf.LoadCollectionSpec(s.object)
	case s.table == TableXLB:
		// This build's: the first instance is h.dp's own.
		in.progs = append(in.progs, h.dp.Program())
		spec, err = datapath.LoadSpec(h.dpOpts)
	}
	if err != nil {
		return err
	}
	for len(in.progs) < h.o.Instances {
		if s.table != TableXLB {
			var table *ebpf.Map
			if len(in.objs) > 0 {
				table = in.objs[0].BenchLruCt
			}
			objs, err := h.loadBench(s.table, s.stop, table)
			if err != nil {
				return err
			}
			in.objs = append(in.objs, objs)
			in.progs = append(in.progs, objs.BenchLru)
			continue
		}
		coll, err := h.loadForwarder(spec, s.object)
		if err != nil {
			return err
		}
		in.colls = append(in.colls, coll)
		p := coll.Programs["xlb_forward"]
		if p == nil {
			return errors.New("no program xlb_forward")
		}
		in.progs = append(in.progs, p)
	}
	return nil
}

// loadForwarder loads the forwarder of spec (this build's, or of the
// object file path) with the load-time settings of this build's and its
// maps replaced by the harness's; the maps the harness has none of are
// the collection's own, unpinned.
func (h *harness) loadForwarder(spec *ebpf.CollectionSpec, path string) (*ebpf.Collection, error) {
	spec = spec.Copy()
	if err := setVariables(spec, h.loadTimeSettings()); err != nil {
		return nil, err
	}
	var cur *ebpf.CollectionSpec
	if path != "" { // another build's: its maps may be shorter (widen.go)
		var err error
		if cur, err = datapath.LoadSpec(h.dpOpts); err != nil {
			return nil, err
		}
	}
	repl := map[string]*ebpf.Map{}
	for name, ms := range spec.Maps {
		ms.Pinning = ebpf.PinNone
		if m := h.repl[name]; m != nil {
			ms.MaxEntries, ms.Flags = m.MaxEntries(), m.Flags()
			repl[name] = m
			if cur != nil && cur.Maps[name] != nil {
				if err := widenMap(ms, cur.Maps[name]); err != nil {
					return nil, fmt.Errorf("%s: %w", path, err)
				}
			}
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: repl})
	if err != nil {
		if path == "" {
			path = "this build's forwarder"
		}
		return nil, loadError("load "+path, err)
	}
	return coll, nil
}
