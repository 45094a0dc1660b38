package config

import "net/netip"

// Pool resolution: pools include pools; a pool's backends are
// its own followed by those of its includes, depth first, each backend address
// once. Both the validator and Desired use the functions here, so what is
// checked is what is resolved.

// member is a backend of a flattened pool with the place it was written.
type member struct {
	Backend
	pool  string // the pool whose backends list holds it
	index int    // its index in that list
}

// poolIndex maps pool names to pools; the first of several pools with one name
// wins (the validator reports the others).
func poolIndex(pools []Pool) map[string]*Pool {
	return firstByName(pools, func(p *Pool) string { return p.Name })
}

// firstByName maps the names of items to items; the first of several items
// with one name wins.
func firstByName[T any](items []T, name func(*T) string) map[string]*T {
	idx := make(map[string]*T, len(items))
	for i := range items {
		if n := name(&items[i]); idx[n] == nil {
			idx[n] = &items[i]
		}
	}
	return idx
}

// flatten returns the backends reachable from pool root in depth-first order:
// a pool's own backends in file order, then each included pool's in include
// order. Unknown pools and invalid addresses are skipped, and an address seen
// again is dropped: the first occurrence wins. again, when not nil, is called
// for every dropped occurrence with the one that was kept.
//
// Each member's HealthCheck is the check in effect: the backend's own, else
// its pool's, else the one its pool inherits from the pool that included it
// (recursively). A pool is visited once per check it inherits (so cycles
// terminate) and at most twice; a pool with a check of its own inherits
// nothing, so it is visited once. A pool without a check reached through
// includes that hand it different checks yields its backends twice (the
// first two checks only: that is enough to report the conflict and bounds
// the walk): again sees the same backend (same pool and index) with two
// checks.
func flatten(idx map[string]*Pool, root string, again func(kept, dropped member)) []member {
	type visit struct{ pool, inherited string }
	var out []member
	if p, ok := idx[root]; ok && len(p.Include) == 0 {
		// Most pools include none: their size is known.
		out = make([]member, 0, len(p.Backends))
	}
	// byAddr maps addresses to their index in out, once out is too long
	// to search.
	var byAddr map[netip.Addr]int
	const searchMax = 32
	find := func(a netip.Addr) (int, bool) {
		if byAddr == nil {
			for j := range out {
				if out[j].Addr == a {
					return j, true
				}
			}
			return 0, false
		}
		j, ok := byAddr[a]
		return j, ok
	}
	visited := map[visit]bool{}
	visits := map[string]int{} // per pool
	stack := []visit{{pool: root}}
	for len(stack) > 0 {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		p, ok := idx[v.pool]
		if !ok {
			continue
		}
		check := v.inherited
		if p.HealthCheck != "" {
			check, v.inherited = p.HealthCheck, ""
		}
		if visited[v] || visits[v.pool] == 2 {
			continue
		}
		visited[v] = true
		visits[v.pool]++
		for i, b := range p.Backends {
			if !b.Addr.IsValid() {
				continue
			}
			m := member{Backend: b, pool: v.pool, index: i}
			if m.HealthCheck == "" {
				m.HealthCheck = check
			}
			if j, dup := find(b.Addr); dup {
				if again != nil {
					again(out[j], m)
				}
				continue
			}
			out = append(out, m)
			switch {
			case byAddr != nil:
				byAddr[b.Addr] = len(out) - 1
			case len(out) > searchMax:
				byAddr = make(map[netip.Addr]int, 2*len(out))
				for j := range out {
					byAddr[out[j].Addr] = j
				}
			}
		}
		// Pushed in reverse so that the first include is visited next,
		// which gives the same order as the recursive walk.
		for i := len(p.Include) - 1; i >= 0; i-- {
			if next := (visit{p.Include[i], check}); !visited[next] {
				stack = append(stack, next)
			}
		}
	}
	return out
}

// cycle is a pool inclusion cycle, closed by include entry index of pool from.
type cycle struct {
	from  string
	index int
	path  []string // first pool repeated at the end: a -> b -> a
}

// findCycles returns every inclusion cycle a depth-first search from each pool
// in file order meets, each once (as the back edge that closes it).
func findCycles(pools []Pool, idx map[string]*Pool) []cycle {
	const (
		white = iota
		grey  // on the current path
		black // done
	)
	color := map[string]int{}
	type frame struct {
		name string
		next int // next include to follow
	}
	var cycles []cycle
	for i := range pools {
		start := pools[i].Name
		if color[start] != white {
			continue
		}
		color[start] = grey
		path := []frame{{name: start}}
		for len(path) > 0 {
			top := &path[len(path)-1]
			p := idx[top.name]
			if top.next >= len(p.Include) {
				color[top.name] = black
				path = path[:len(path)-1]
				continue
			}
			i := top.next
			top.next++
			inc := p.Include[i]
			if _, ok := idx[inc]; !ok {
				continue
			}
			switch color[inc] {
			case white:
				color[inc] = grey
				path = append(path, frame{name: inc})
			case grey:
				cyc := cycle{from: top.name, index: i}
				for j := len(path) - 1; j >= 0; j-- {
					if path[j].name == inc {
						for _, f := range path[j:] {
							cyc.path = append(cyc.path, f.name)
						}
						break
					}
				}
				cyc.path = append(cyc.path, inc)
				cycles = append(cycles, cyc)
			}
		}
	}
	return cycles
}
