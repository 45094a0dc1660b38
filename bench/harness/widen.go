package harness

import (
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// Objects of earlier builds (MeasureBuilds, bench/reference) run on the
// harness's maps, which have this build's layouts. Where this build only
// appended to a map's value since (fields after the old ones, a pad that
// became a field, counters added at the end of an enum that never
// renumbers), the old program reads and writes the same bytes of the
// longer value: it can share the map once its spec says the longer value
// size. widenMap checks that from the two specs' BTF; any other change of
// a shared map stays an error (the old program would misread it).

// widenMap sets old's value size to cur's when cur's value is old's with
// bytes appended; otherwise it leaves old alone, and the load reports
// the mismatch.
func widenMap(old, cur *ebpf.MapSpec) error {
	if old.Type != cur.Type || old.KeySize != cur.KeySize || old.ValueSize >= cur.ValueSize {
		return nil
	}
	if err := valuePrefix(old.Value, cur.Value); err != nil {
		return fmt.Errorf("map %s: value of %d bytes, this build's %d: %w", old.Name, old.ValueSize, cur.ValueSize, err)
	}
	old.ValueSize = cur.ValueSize
	return nil
}

// valuePrefix: every member of struct old is in struct cur at the same
// offset, under the same name and of the same size, but for old's pads
// (whatever this build keeps there the old program never read) and a
// last array member that grew.
func valuePrefix(old, cur btf.Type) error {
	ost, ok1 := btf.UnderlyingType(old).(*btf.Struct)
	cs, ok2 := btf.UnderlyingType(cur).(*btf.Struct)
	if !ok1 || !ok2 {
		return fmt.Errorf("no struct types to compare")
	}
	for i, om := range ost.Members {
		if strings.HasPrefix(om.Name, "pad") {
			continue
		}
		cm, ok := memberNamed(cs, om.Name)
		if !ok || cm.Offset != om.Offset {
			return fmt.Errorf("field %s moved or went away", om.Name)
		}
		if sameSize(om.Type, cm.Type) {
			continue
		}
		oa, ok1 := btf.UnderlyingType(om.Type).(*btf.Array)
		ca, ok2 := btf.UnderlyingType(cm.Type).(*btf.Array)
		if i != len(ost.Members)-1 || !ok1 || !ok2 || !sameSize(oa.Type, ca.Type) || ca.Nelems < oa.Nelems {
			return fmt.Errorf("field %s changed", om.Name)
		}
	}
	return nil
}

func memberNamed(s *btf.Struct, name string) (btf.Member, bool) {
	for _, m := range s.Members {
		if m.Name == name {
			return m, true
		}
	}
	return btf.Member{}, false
}

func sameSize(a, b btf.Type) bool {
	sa, err1 := btf.Sizeof(a)
	sb, err2 := btf.Sizeof(b)
	return err1 == nil && err2 == nil && sa == sb
}
