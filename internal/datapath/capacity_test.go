package datapath

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/xlbproject/xlb/internal/config"
)

// kernelMemlock is the memory the kernel accounts to m (the memlock line
// of its fdinfo).
func kernelMemlock(t *testing.T, m *ebpf.Map) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", m.FD()))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "memlock:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no memlock in the fdinfo of %s", m)
	return 0
}

// TestMapBytesMatchesKernel: the memory check's estimate of each map is
// within 10% (or 16 KiB, for the small ones) of what the kernel accounts,
// at sizes where the sized maps dominate.
func TestMapBytesMatchesKernel(t *testing.T) {
	o := compatOptions(t)
	o.MaxServices, o.MaxReals, o.ConntrackEntries = 20000, 300000, 1<<16
	d, err := Load(o)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	spec, err := LoadSpec(o)
	if err != nil {
		t.Fatal(err)
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	var est, kern uint64
	for name := range pinnedMapPolicy {
		m := d.mapByName(name)
		got, want := MapBytes(spec.Maps[name], ncpu), kernelMemlock(t, m)
		est, kern = est+got, kern+want
		diff := max(got, want) - min(got, want)
		if diff > want/10 && diff > 16<<10 {
			t.Errorf("%s (%s): estimate %d B, kernel %d B", name, spec.Maps[name].Type, got, want)
		}
	}
	t.Logf("pinned maps: estimate %s, kernel %s", MiB(est), MiB(kern))
}

// TestMemoryCheckRefuses: a load whose maps do not fit the memory
// available is refused before any map is created, naming the key that
// sizes the most of it; a restart counts only the maps it creates (the
// adopted pins are in memory already).
func TestMemoryCheckRefuses(t *testing.T) {
	o := compatOptions(t)
	o.available = func() (uint64, string, error) { return 16 << 20, "the test's 16 MiB", nil }
	for _, tc := range []struct {
		name  string
		edit  func(*Options)
		lower string
	}{
		{"conntrack", func(o *Options) { o.ConntrackEntries = 1 << 22 }, "lower node.conntrack_entries"},
		{"backends", func(o *Options) { o.MaxReals = 500000 }, "lower node.max_backends"},
		{"services", func(o *Options) { o.MaxServices, o.FragEntries = 30000, 1024 }, "lower node.max_services"},
		{"tables", func(o *Options) { o.TableBytes = 1 << 30 }, "lower services[].table_size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := o
			tc.edit(&o)
			_, err := Load(o)
			if !errors.Is(err, ErrNoMemory) || !strings.Contains(err.Error(), tc.lower) || !strings.Contains(err.Error(), "the test's 16 MiB has 16.0 MiB") {
				t.Fatalf("load: %v, want ErrNoMemory saying %q", err, tc.lower)
			}
			t.Logf("refused: %v", err)
			if got := pins(t, o.PinDir); len(got) != 0 {
				t.Fatalf("pins after the refusal: %v, want none", got)
			}
		})
	}
	o.available = nil
	d, err := Load(o)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	o.available = func() (uint64, string, error) { return 1 << 20, "the test's 1 MiB", nil }
	d, err = Load(o)
	if err != nil {
		t.Fatalf("a restart that adopts every pinned map: %v", err)
	}
	d.Close()
}

// TestTableBytesMatchesKernel: a small table's memory is a page, as the
// memory check counts it.
func TestTableBytesMatchesKernel(t *testing.T) {
	for _, m := range []int{251, 65537} {
		lt, err := makeTable(m)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := TableBytes(uint32(m)), kernelMemlock(t, lt.m); got != want {
			t.Errorf("table of %d: estimate %d B, kernel %d B", m, got, want)
		}
		lt.close()
	}
}

// TestMapCountCheck: a node.max_services whose tables could need more
// memory mappings than vm.max_map_count allows is refused, naming the key
// and the sysctl; the default fits the default limit.
func TestMapCountCheck(t *testing.T) {
	have, err := readUint("/proc/sys/vm/max_map_count")
	if err != nil {
		t.Skip(err)
	}
	if err := checkMapCount(uint32((have - 4096) / 2)); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
	err = checkMapCount(uint32(have))
	if err == nil || !strings.Contains(err.Error(), "lower node.max_services") || !strings.Contains(err.Error(), "vm.max_map_count") {
		t.Fatalf("beyond the limit: %v", err)
	}
	if have >= 65530 {
		if err := checkMapCount(config.DefaultMaxServices); err != nil {
			t.Fatalf("the default node.max_services: %v", err)
		}
	}
}
