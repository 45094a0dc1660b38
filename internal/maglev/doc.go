// Package maglev is the pure model of xlb's backend selection: the flow hash
// and Maglev lookup-table population. It does no I/O and touches no kernel
// state; the data plane only reads the tables computed here.
//
// Population follows Maglev: A Fast and Reliable Software Network Load
// Balancer (Eisenbud et al., NSDI 2016), section 3.4, Pseudocode 1: every
// backend has a preference list of all M table slots (a permutation given by
// an offset and a skip, M prime), and backends take turns filling their most
// preferred empty slot until the table is full. Weights change the relative
// frequency of turns (see Populate for the exact rule); with equal weights the
// result is exactly Pseudocode 1.
//
// The flow hash (FlowHash, Slot, CTBucket, CTTag) is specified in
// docs/ARCHITECTURE.md, "flow hash v1", and implemented identically in C in
// bpf/hash.h; testdata/flowhash_vectors.json binds the two.
//
// # Versioning
//
// Every node of an ECMP group must pick the same backend for the same flow
// (docs/DESIGN.md, Scale-out by ECMP), so every node must compute identical
// tables from the same
// backend set, whatever its xlb version. The following are therefore part of
// a versioned contract, and changing any of them is a version bump
// (TableVersion or FlowHashVersion) that must be rolled out as such:
//
//   - h1 and h2, the per-backend offset and skip hashes (TableVersion);
//   - the ordering of backends (stable sort by Name) (TableVersion);
//   - the quota and turn rule for weights (TableVersion);
//   - the flow hash and the slot, bucket and tag derivations (FlowHashVersion).
package maglev
