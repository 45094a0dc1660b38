// Package lab builds network-namespace topologies for xlb: the demo, the
// integration test bed and the benchmark bed (docs/DESIGN.md, Lab).
//
// One lab is a set of namespaces named <prefix><role>, where the prefix is
// unique per lab ("xl" + 4 hex digits + "-", e.g. "xl3fa2-"), so several labs
// coexist and leftovers are easy to find (Cleanup, `xlb-lab down`):
//
//	client ns                router ns                    switch ns          LAN hosts (MTU 1600)
//	eth0 10.99.0.2  ------  eth0 10.99.0.1
//	     fd00:99::2              fd00:99::1
//	(MTU 1500)              eth1 10.100.0.1   ------  port "router"
//	                             fd00:100::1             br0 --- port "n1" --- eth0 node n1     10.100.0.11   fd00:100::11
//	                        VIP routes via the nodes         --- port "b1" --- eth0 backend b1  10.100.0.101  fd00:100::101
//	                        (multipath if several)           --- ...           (VIPs on lo)
//
// The router forwards (IPv4 and IPv6, rp_filter 0) and hashes multipath
// routes by 5-tuple. Nodes and backends route by default via the router.
// Backends hold the VIPs on lo and never answer ARP for them (arp_ignore 1,
// arp_announce 2), so replies go straight back to the router: DSR.
//
// Every LAN host's eth0 is a veth whose peer is a port of the bridge in the
// switch namespace. Each switch port runs an XDP program that passes every
// frame: xlb's XDP program on a node's eth0 sends each encapsulated packet
// back out with XDP_TX, and a veth hands such frames to the stack promptly
// only when it runs an XDP program itself (GRO alone enables the receive
// path, but the frames then wait for the next unrelated packet). GRO is off
// on the ports, so the switch never merges segments. Transmit checksum
// offload is off on every lab veth, so packets carry complete checksums as
// on a real wire (kernel 6.18 completes a partial checksum before an XDP
// program on a veth sees the packet anyway; this keeps the lab independent
// of that).
//
// Lab.SetPortXDP removes a port's program (and attaches it again): the
// node's native XDP_TX frames are then dropped while its stack's packets
// pass, the black hole xlbd's transmit check and prober must notice.
// StartXLBD runs xlbd with its blackbox prober every ProbeInterval (off
// unless set: xlb-lab and the prober's tests set it).
//
// With Config.Routing RouteNone the router has no VIP routes of its own:
// StartBIRD runs BIRD 2 there, peering by eBGP with every node (router AS
// 65000, nodes AS 65001, an IPv4 and an IPv6 session per node, hold time
// 3 s, graceful restart helper) and merging equal routes into one
// multipath kernel route per VIP (bird.go). Until xlbd speaks BGP,
// StartNodeBIRD runs a stand-in speaker on a node. KernelRoute, WaitRoute
// and KeepsRoute read the router's FIB; SetLinkUp pulls a host's cable.
//
// Traffic is made in-process: Do runs a function on a thread switched into a
// namespace, and sockets created there stay in that namespace. Servers
// (HTTP, UDP echo, TCP line echo) run on the backends and answer with the
// backend's name; clients (HTTPLoad, UDPFlows, StartTCPSessions) run in the
// client namespace and report which backend served what.
//
// Everything here needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN).
package lab
