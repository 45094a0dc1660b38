// Package sched is the list of the forwarder's schedulers: the one place
// that numbers them and states what each is. The data plane's numbering
// (bpf/sched/kinds.h), its dispatch (bpf/sched/dispatch.h), state's
// SchedKind constants and config's Scheduler names are generated from
// List (go generate ./internal/sched); docs/ARCHITECTURE.md, "Schedulers",
// gives the steps for adding one.
package sched

// Family is how the forwarder runs a scheduler: which of its functions
// asks it, with what. A family's code is in bpf/sched.h (hash, cursor,
// least) or bpf/lblc.h (locality); a scheduler's own is in
// bpf/sched/<file>.h.
type Family uint8

const (
	// Hash schedulers read the service's Maglev table at the slot of a
	// hash of their own: sched_<file>_hash(p, s, h) returns it (h: the
	// flow's 5-tuple hash).
	Hash Family = iota
	// Cursor schedulers take the list's entry for the service's shared
	// cursor c, advanced by one for each new flow of the node:
	// sched_<file>_pick(s, n, c).
	Cursor
	// Least schedulers walk the list for the entry of least load by the
	// connection counts: sched_<file>_entry(wk, k, rid, active, inactive,
	// weight) considers entry k and returns 1 to end the walk.
	Least
	// Locality schedulers keep a backend, or a set, per destination
	// address (bpf/lblc.h): sched_<file>_pick(e, wk, s, now) decides on
	// a live entry.
	Locality
)

// String returns the family's name as the generated C spells it.
func (f Family) String() string {
	return [...]string{"hash", "cursor", "least", "locality"}[f]
}

// Weights is how the control plane writes a list scheduler's weights.
type Weights uint8

const (
	// WeightsNone: the scheduler has no list (hash schedulers).
	WeightsNone Weights = iota
	// WeightsOne: every entry weighs 1.
	WeightsOne
	// WeightsReduced: the configured weights divided by their greatest
	// common divisor.
	WeightsReduced
	// WeightsAsIs: the configured weights, compared with connection
	// counts as they are.
	WeightsAsIs
)

// Info is one scheduler, or one more name of one (AliasOf).
type Info struct {
	// Name is the configuration's name. Ident is the Go identifier
	// suffix: config.Scheduler<Ident>, and for a scheduler
	// state.Sched<Ident>.
	Name, Ident string
	// Doc says in one line what the scheduler picks.
	Doc string
	// AliasOf names the scheduler this name is another name of (IPVS's
	// sh is maglev-source); the fields below are that scheduler's.
	AliasOf string
	// Kind is svc_sched.kind, the data plane's number, which pinned maps
	// hold: never renumbered, a new scheduler takes the next.
	Kind uint8
	// File is the base name of the scheduler's C file,
	// bpf/sched/<File>.h, and of its C identifiers: XLB_SCHED_<FILE>,
	// sched_<File>_*.
	File   string
	Family Family
	// Weights is how its list's weights are written.
	Weights Weights
	// HashesSource: the hash is of the client address under the
	// service's source_netmask(6).
	HashesSource bool
	// Stride: the control plane writes svc_sched.stride, a number
	// coprime with the weights' sum (wrr).
	Stride bool
	// Expires: its per-destination entries expire (svc_sched.stride,
	// ticks).
	Expires bool
}

// UsesList reports whether the control plane writes the service's
// usable backends into svc_sched.ent.
func (i *Info) UsesList() bool { return i.Family != Hash }

// List is every configuration name of a scheduler, in the order the
// configuration lists them (config.Scheduler is the index + 1).
var List = []Info{
	{Name: "maglev", Ident: "Maglev", Kind: 0, File: "maglev", Family: Hash,
		Doc: "Maglev consistent hashing: the 5-tuple's slot of the Maglev table"},
	{Name: "maglev-source", Ident: "MaglevSource", Kind: 1, File: "maglev_source", Family: Hash, HashesSource: true,
		Doc: "the slot of the client address under the source netmask"},
	{Name: "rr", Ident: "RR", Kind: 3, File: "rr", Family: Cursor, Weights: WeightsOne,
		Doc: "the usable backends in turn"},
	{Name: "wrr", Ident: "WRR", Kind: 4, File: "wrr", Family: Cursor, Weights: WeightsReduced, Stride: true,
		Doc: "round robin in proportion to the weights"},
	{Name: "lc", Ident: "LC", Kind: 5, File: "lc", Family: Least, Weights: WeightsReduced,
		Doc: "least connections, (active << 8) + inactive (IPVS lc)"},
	{Name: "wlc", Ident: "WLC", Kind: 6, File: "wlc", Family: Least, Weights: WeightsReduced,
		Doc: "least connections relative to the weight (IPVS wlc)"},
	{Name: "sed", Ident: "SED", Kind: 7, File: "sed", Family: Least, Weights: WeightsReduced,
		Doc: "shortest expected delay, least (active + 1) / weight (IPVS sed)"},
	{Name: "nq", Ident: "NQ", Kind: 8, File: "nq", Family: Least, Weights: WeightsReduced,
		Doc: "never queue: the first without an active connection, else as sed (IPVS nq)"},
	{Name: "sh", Ident: "SH", AliasOf: "maglev-source",
		Doc: "source hashing (IPVS sh): as maglev-source"},
	{Name: "dh", Ident: "DH", Kind: 2, File: "dh", Family: Hash,
		Doc: "destination hashing on the destination address (IPVS dh)"},
	{Name: "lblc", Ident: "LBLC", Kind: 9, File: "lblc", Family: Locality, Weights: WeightsAsIs, Expires: true,
		Doc: "locality-based least connections: the destination's backend, wlc when it is overloaded (IPVS lblc)"},
	{Name: "lblcr", Ident: "LBLCR", Kind: 10, File: "lblcr", Family: Locality, Weights: WeightsAsIs, Expires: true,
		Doc: "locality-based least connections with replication: the destination's set of backends (IPVS lblcr)"},
}

// Resolve returns the scheduler i names: i itself, or the one it is an
// alias of.
func Resolve(i *Info) *Info {
	if i.AliasOf == "" {
		return i
	}
	for k := range List {
		if List[k].Name == i.AliasOf && List[k].AliasOf == "" {
			return &List[k]
		}
	}
	panic("sched: alias " + i.Name + " of no scheduler")
}

// Kinds returns the schedulers (no aliases) by kind: Kinds()[k] is the
// scheduler of svc_sched.kind k.
func Kinds() []*Info {
	var ks []*Info
	for k := range List {
		if List[k].AliasOf == "" {
			ks = append(ks, &List[k])
		}
	}
	out := make([]*Info, len(ks))
	for _, i := range ks {
		out[i.Kind] = i
	}
	return out
}

// ListMax is the most entries svc_sched.ent holds (a power of two).
const ListMax = 256

// kinds is Kinds(), computed once.
var kinds = Kinds()

// Of returns the scheduler of kind k, and false for a kind not in List.
func Of(k uint8) (*Info, bool) {
	if int(k) >= len(kinds) {
		return nil, false
	}
	return kinds[k], true
}
