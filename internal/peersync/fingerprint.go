package peersync

import (
	"cmp"
	"encoding/binary"
	"slices"

	"github.com/xlbproject/xlb/internal/state"
)

// Fingerprints of the committed tables: a service's covers its VIP,
// encapsulation and every slot of its Maglev table by the backend's
// address (real ids are node-local), so two nodes running the same config
// with the same health verdicts have the same fingerprints, and a node
// whose table differs in one slot has another.
type Fingerprints struct {
	Overall  uint64
	Services map[state.VIPKey]uint64
}

const fpK = 0x9E3779B97F4A7C15

func fpMix(h, v uint64) uint64 {
	h ^= v
	h *= fpK
	return h ^ h>>29
}

func fpAddr(a netip16) uint64 {
	h := fpMix(0x1f83d9abfb41bd6b, binary.LittleEndian.Uint64(a[:8]))
	return fpMix(h, binary.LittleEndian.Uint64(a[8:]))
}

type netip16 = [16]byte

// fingerprint computes st's fingerprints; cache holds the services'
// fingerprints of the previous call (tables the planner kept are shared,
// so an unchanged service is not read again) and is updated.
func fingerprint(st *state.State, cache map[*state.Service]uint64) Fingerprints {
	fp := Fingerprints{Services: make(map[state.VIPKey]uint64, len(st.Services))}
	addr := map[uint32]uint64{}
	keys := make([]state.VIPKey, 0, len(st.Services))
	seen := make(map[*state.Service]bool, len(st.Services))
	for k, s := range st.Services {
		keys = append(keys, k)
		seen[s] = true
		if h, ok := cache[s]; ok {
			fp.Services[k] = h
			continue
		}
		h := fpMix(fpAddr(k.Addr.As16()), uint64(k.Port)<<16|uint64(k.Proto)<<8|uint64(s.Encap))
		for _, rid := range s.Table {
			a, ok := addr[rid]
			if !ok && rid != 0 {
				a = fpAddr(st.Reals.At(rid).Addr.As16())
				addr[rid] = a
			}
			h = fpMix(h, a)
		}
		cache[s] = h
		fp.Services[k] = h
	}
	for s := range cache {
		if !seen[s] {
			delete(cache, s)
		}
	}
	slices.SortFunc(keys, func(a, b state.VIPKey) int { return cmp.Compare(a.Compare(b), 0) })
	fp.Overall = 0x51ed270b27e5b3c9
	for _, k := range keys {
		fp.Overall = fpMix(fp.Overall, fp.Services[k])
	}
	return fp
}
