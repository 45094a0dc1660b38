package datapath

import (
	"errors"

	"github.com/cilium/ebpf"
)

// scanArray calls fn with each index of the array map m and its value, in
// index order, until fn returns false. It reads the array in batches: one
// system call per 4,096 entries where an iterator makes two per entry, and
// the reals' arrays have 262,144 entries, read at every start (about a
// second of CPU each, one by one).
func scanArray[V any](m *ebpf.Map, fn func(uint32, *V) bool) error {
	const chunk = 4096
	keys := make([]uint32, chunk)
	vals := make([]V, chunk)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		for i := range n {
			if !fn(keys[i], &vals[i]) {
				return nil
			}
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
