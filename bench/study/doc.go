// Package study reproduces two measurements that justify xlb's hashing
// choices, as plain functions returning plain structs, so that
// cmd/xlb-bench (its balance and flowhash parts) can print them, store them
// in bench/out/report.json and plot them.
//
// # Consistent hashing (Maglev paper, section 5.3, Fig. 11 and 12)
//
// Balance and Disruption compare Maglev hashing (internal/maglev, section
// 3.4, Pseudocode 1) with the two comparators the paper uses: Karger
// consistent hashing with 1000 virtual nodes ("views") per backend on a
// 64-bit ring, and Rendezvous (highest random weight) hashing. All three
// map the same M table slots to the same N backends, so they are compared
// on the same footing as the paper: the share of each backend is its number
// of entries divided by M/N, and the over-provision factor is the largest
// share minus one. Disruption removes k random backends and counts the
// table entries whose backend changed.
//
// # Flow hash (the session-persistence study, section 4.2)
//
// A published study of lock-free session persistence in multi-core load
// balancers (Wu Hesheng, Wang Chongjun and Xie Junyuan, Nanjing
// University; "the session-persistence study" in this package) compares
// five hashes that spread flows over worker processes (its section 3.2)
// on a campus gateway trace (its section 4.2). HashStudy repeats that
// comparison on other real traffic. It reads real packet captures
// (classic libpcap, read by internal/testenv/traces), takes the distinct
// TCP/UDP 5-tuples, and spreads them over N = 2 ... 64 workers with six
// hashes: source address mod N, XOR fold of the source,
// XOR fold of source and destination, CRC-16/CCITT-FALSE of the 5-tuple,
// Toeplitz with the standard Microsoft RSS key, and xlb's own flow hash v1
// (maglev.FlowHash). It reports the flows-per-worker coefficient of
// variation and max/mean, and the time per hash.
//
// The captures are the public "DDoS Packet Capture Collection"
// (L.F. Haaijer, 2022, repository StopDDoS/packet-captures, commit
// 230dd43af86ff2523bcfaaa5c3cb8cf97a220938), kept in testdata/traces
// (see its README.md); traces.Source is the citation to print beside any
// result on them.
//
// Plot* functions write PNG figures (gonum.org/v1/plot) and Write*Markdown
// functions Markdown tables of each result.
package study
