package harness

import (
	"bytes"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/xlbproject/xlb/bench/reference"
	"github.com/xlbproject/xlb/internal/datapath"
)

// TestWidenReference: the reference build's maps that this build
// appended to (the node settings, the global counters) are widened to
// this build's value sizes, and then every map they share has this
// build's key and value sizes.
func TestWidenReference(t *testing.T) {
	b, err := reference.Object()
	if err != nil {
		t.Fatal(err)
	}
	old, err := ebpf.LoadCollectionSpecFromReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	cur, err := datapath.LoadSpec(datapath.Options{Interface: "lo", PinDir: t.TempDir(), ConntrackEntries: 1 << 14, MaxServices: 64, MaxReals: 1024})
	if err != nil {
		t.Fatal(err)
	}
	for name, ms := range old.Maps {
		c := cur.Maps[name]
		if c == nil || name[0] == '.' {
			continue
		}
		if err := widenMap(ms, c); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if ms.KeySize != c.KeySize || ms.ValueSize != c.ValueSize {
			t.Errorf("%s: key %d value %d, this build's %d %d", name, ms.KeySize, ms.ValueSize, c.KeySize, c.ValueSize)
		}
	}
}

// TestWidenRefusesMoves: a field that moved, or a grown array that is not
// last, is not a prefix.
func TestWidenRefusesMoves(t *testing.T) {
	u32 := &btf.Int{Name: "u32", Size: 4}
	arr := func(n uint32) btf.Type { return &btf.Array{Type: u32, Nelems: n} }
	st := func(size uint32, ms ...btf.Member) *btf.Struct { return &btf.Struct{Size: size, Members: ms} }
	spec := func(v *btf.Struct) *ebpf.MapSpec {
		return &ebpf.MapSpec{Name: "m", Type: ebpf.Array, KeySize: 4, ValueSize: v.Size, Value: v}
	}
	for _, c := range []struct {
		name     string
		old, cur *btf.Struct
		ok       bool
	}{
		{"appended", st(8, btf.Member{Name: "a", Type: u32}, btf.Member{Name: "pad", Type: u32, Offset: 32}),
			st(12, btf.Member{Name: "a", Type: u32}, btf.Member{Name: "b", Type: u32, Offset: 32}, btf.Member{Name: "c", Type: u32, Offset: 64}), true},
		{"last array grew", st(8, btf.Member{Name: "n", Type: arr(2)}), st(16, btf.Member{Name: "n", Type: arr(4)}), true},
		{"moved", st(8, btf.Member{Name: "a", Type: u32}, btf.Member{Name: "b", Type: u32, Offset: 32}),
			st(12, btf.Member{Name: "x", Type: u32}, btf.Member{Name: "a", Type: u32, Offset: 32}, btf.Member{Name: "b", Type: u32, Offset: 64}), false},
		{"array not last", st(12, btf.Member{Name: "n", Type: arr(2)}, btf.Member{Name: "b", Type: u32, Offset: 64}),
			st(20, btf.Member{Name: "n", Type: arr(4)}, btf.Member{Name: "b", Type: u32, Offset: 128}), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			o, cu := spec(c.old), spec(c.cur)
			err := widenMap(o, cu)
			if (err == nil) != c.ok {
				t.Fatalf("err %v, want ok %v", err, c.ok)
			}
			if c.ok && o.ValueSize != cu.ValueSize {
				t.Fatalf("value size %d, want %d", o.ValueSize, cu.ValueSize)
			}
		})
	}
}
