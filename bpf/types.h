/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* types.h: the Go <-> BPF ABI. Map keys and values and the enums that name
 * counters and states. Go types are generated from this file by bpf2go
 * (internal/datapath/xlb_bpfel.go); nothing is mirrored by hand. Enumerations
 * are append-only: never renumber a value, pinned maps outlive binaries. */
#pragma once

#include <linux/types.h>

enum xlb_family {
	XLB_AF_INET = 4,
	XLB_AF_INET6 = 6,
};

/* Forwarding method toward a backend (bpf/methods.h; the name is from
 * when every method was a tunnel). ENCAP_NONE on a real means "the
 * service's". */
enum xlb_encap {
	XLB_ENCAP_NONE = 0,
	XLB_ENCAP_GRE = 1,  /* RFC 2784 base header, IPv4 or IPv6 outer */
	XLB_ENCAP_IPIP = 2, /* ipip, ip6ip6, 4in6 or 6in4 by the two families */
	XLB_ENCAP_GUE = 3,  /* outer IP, UDP to node_info.gue_port, inner IP (GUE version 1) */
	XLB_ENCAP_DR = 4,   /* direct routing: the frame as it came, to the backend's MAC */
	XLB_ENCAP_NAT = 5,  /* destination NAT to the real's address and port (bpf/nat.h) */
};

/* xlb_vips key. IPv4 addresses use addr[0..3], the rest is zero. */
struct vip_key {
	__u8 addr[16];
	__be16 port; /* 0: the VIP serves all ports of proto */
	__u8 proto;  /* IPPROTO_TCP or IPPROTO_UDP */
	__u8 family; /* enum xlb_family */
};

struct vip_info {
	__u32 svc_id;     /* stable for the life of the VIP; indexes xlb_svc_stats */
	__u32 table_id;   /* slot of this service's Maglev table in xlb_tables */
	__u32 table_size; /* M, the inner table's length */
	__u8 encap;       /* enum xlb_encap */
	__u8 flags;       /* enum xlb_vip_flags */
	__u16 pad;
};

enum xlb_vip_flags {
	/* The service takes IP fragments (bpf/frag.h). */
	XLB_VIP_F_FRAGMENTS = 1,
};

/* xlb_vip_addrs value: bits about a VIP address as a whole. */
enum xlb_vip_addr_flags {
	XLB_VADDR_F_VIP = 1,      /* some service uses the address */
	XLB_VADDR_F_FRAG_TCP = 2, /* some TCP service on it takes fragments */
	XLB_VADDR_F_FRAG_UDP = 4, /* some UDP service on it takes fragments */
};

enum xlb_real_flags {
	/* The real may keep its tracked flows. Cleared when the backend leaves
	 * its service (or, later, fails its health check): tracked flows then
	 * reselect through the Maglev table. */
	XLB_REAL_F_ACTIVE = 1,
	/* dmac/smac/ifindex/mtu hold the backend's next hop as the control
	 * plane resolved it from the kernel FIB and neighbour table; without
	 * it the forwarder asks bpf_fib_lookup for every packet. */
	XLB_REAL_F_NEXTHOP = 2,
	/* The backend's address is one of this node's: the packet goes up
	 * the local stack (XDP_PASS) after the method's rewrite, if any. */
	XLB_REAL_F_LOCAL = 4,
};

/* xlb_reals value: one per (service, backend) pair. Id 0 is never used. */
struct real_info {
	__u8 addr[16];
	__u32 svc_id; /* the service this real belongs to */
	__u8 family;  /* enum xlb_family of addr */
	__u8 flags;   /* enum xlb_real_flags */
	__u8 encap;   /* enum xlb_encap, NONE = the service's */
	__u8 pad;
	/* Cached next hop (XLB_REAL_F_NEXTHOP). */
	__u8 dmac[6];
	__u8 smac[6];
	__u32 ifindex; /* egress interface */
	__u16 mtu;     /* of the egress interface: larger outer packets are dropped */
	/* XLB_ENCAP_NAT: the backend's port (network order), 0 = the VIP's.
	 * Took the high half of a 32-bit mtu, always 0 there (little-endian),
	 * so pinned reals of the older layout read as port 0. */
	__be16 port;
};

enum xlb_node_flags {
	XLB_NODE_F_ADDR4 = 1,  /* addr4 is set: IPv4 outer headers possible */
	XLB_NODE_F_ADDR6 = 2,  /* addr6 is set */
	XLB_NODE_F_GATEWAY = 4, /* gw_mac is the fallback next hop */
	XLB_NODE_F_NAT = 8,     /* some real uses NAT: look replies up in xlb_nat */
};

/* Connection-tracking states; each has its own idle timeout. */
enum xlb_ct_state {
	XLB_CT_FREE = 0,
	XLB_CT_SYN = 1,         /* TCP, only SYNs seen */
	XLB_CT_ESTABLISHED = 2, /* TCP past the SYN, or any UDP flow */
	XLB_CT_CLOSING = 3,     /* TCP, FIN or RST seen */
};

/* xlb_node value (one element): settings the control plane may change at
 * run time without reloading the program. Timeouts are in conntrack ticks
 * (2^XLB_TICK_SHIFT ns). */
struct node_info {
	__u8 addr4[4];
	__u8 addr6[16];
	__u8 gw_mac[6];
	__u8 if_mac[6];
	__u16 flags; /* enum xlb_node_flags */
	__u16 timeout_tcp_syn;
	__u16 timeout_tcp;
	__u16 timeout_tcp_fin;
	__u16 timeout_udp;
	/* Flood defence: new flows a CPU may track per conntrack tick, those
	 * whose packet has SYN and, apart, the others (TCP without SYN, UDP);
	 * beyond it, new flows of that kind are forwarded by Maglev alone,
	 * untracked, so they cannot evict established entries (and a non-SYN
	 * one skips the other CPUs' slices). 0: no limit. */
	__u32 flood_syn_limit;
	/* ICMP echo requests to a VIP address each CPU answers per second
	 * (token bucket, burst of one second's worth). 0: never answered. */
	__u32 icmp_echo_rate;
	/* Packet tracer (trace.h): records each CPU may emit per second
	 * (token bucket, burst of one second's worth). 0: tracer off. */
	__u32 trace_rate;
	__u32 flood_new_limit; /* see flood_syn_limit */
	/* Self-check probes carry this value in their marker (trace.h); 0:
	 * no packet is taken for a probe. Random, set by the control plane. */
	__u64 probe_cookie;
	/* ICMP fragmentation-needed / ICMPv6 packet-too-big each CPU sends
	 * per second for VIP packets that do not fit the egress MTU once
	 * encapsulated (bpf/toobig.h; token bucket, burst of one second's
	 * worth). 0: never sent (the packets are dropped). Fields after
	 * probe_cookie were appended: a pinned node map of an older, shorter
	 * layout is migrated (internal/datapath/compat.go). */
	__u32 icmp_too_big_rate;
	__be16 gue_port; /* destination UDP port of XLB_ENCAP_GUE (network order) */
	__u16 pad;
};

/* xlb_icmp_rl value (per CPU): the echo-reply token bucket. credit is in
 * nanoseconds times icmp_echo_rate; a reply costs 1e9. */
struct icmp_rl_state {
	__u64 last_ns;
	__u64 credit;
};

/* xlb_flood keys: the flood budgets (node_info.flood_syn_limit,
 * flood_new_limit). */
enum xlb_flood_kind {
	XLB_FLOOD_SYN = 0, /* new flows whose packet has SYN */
	XLB_FLOOD_NEW = 1, /* other new flows: TCP without SYN, UDP */
	/* ICMP errors about a flow this CPU's slice does not hold (limit:
	 * flood_new_limit): over it, the other CPUs' slices are not read
	 * (bpf/icmpflood.h). */
	XLB_FLOOD_ICMP = 2,
	XLB_FLOOD__MAX,
};

/* xlb_flood value (per CPU and kind): new flows counted in the current tick. */
struct flood_state {
	__u64 tick;
	__u32 count;
	__u32 active; /* over the limit in this or the previous tick */
};

/* Per-service and per-real counters (per CPU; the daemon sums them). */
struct xlb_counters {
	__u64 packets;
	__u64 bytes;
	__u64 new_flows;
};

/* Global counters, one slot each in struct xlb_global. Append only. */
enum xlb_stat {
	XLB_STAT_PASS_NOT_IP = 0,   /* not IPv4/IPv6: to the kernel */
	XLB_STAT_PASS_NOT_VIP,      /* IP but no VIP matched: to the kernel */
	XLB_STAT_PASS_BAD_L3,       /* unparseable IP header, not to a VIP address */
	XLB_STAT_PASS_OTHER_PROTO,  /* neither TCP nor UDP */
	XLB_STAT_FORWARD_TX,        /* encapsulated, XDP_TX */
	XLB_STAT_FORWARD_REDIRECT,  /* encapsulated, XDP_REDIRECT */
	XLB_STAT_CT_HIT,            /* tracked flow, same CPU */
	XLB_STAT_CT_REMOTE_HIT,     /* tracked by another CPU, adopted */
	XLB_STAT_CT_MISS,           /* not tracked: Maglev table lookup */
	XLB_STAT_CT_RESELECT,       /* tracked, but the real is gone: reselected */
	XLB_STAT_NEXTHOP_FALLBACK,  /* FIB had no answer: fallback gateway used */
	XLB_STAT_DROP_MALFORMED,    /* to a VIP address, headers invalid */
	XLB_STAT_DROP_FRAGMENT,     /* fragment to a VIP (no fragment support) */
	XLB_STAT_DROP_NO_BACKEND,   /* the service's table is empty */
	XLB_STAT_DROP_NO_NEXTHOP,   /* FIB failed and no fallback gateway */
	XLB_STAT_DROP_TOO_BIG,      /* encapsulated packet exceeds the MTU */
	XLB_STAT_DROP_NO_SOURCE,    /* no node address of the backend's family */
	XLB_STAT_DROP_ENCAP,        /* headroom could not be grown */
	XLB_STAT_DROP_INTERNAL,     /* a map lookup that cannot fail did */
	XLB_STAT_FLOOD_ACTIVATIONS, /* a CPU went over a flood limit (per kind) */
	XLB_STAT_FLOOD_UNTRACKED,   /* new flows not tracked (flood budget, drop_packet defence) */
	XLB_STAT_ICMP_FRAG_NEEDED,  /* ICMP frag-needed / ICMPv6 packet-too-big forwarded to the flow's backend */
	XLB_STAT_ICMP_UNREACH,      /* other destination-unreachable forwarded to the flow's backend */
	XLB_STAT_ICMP_TIME_EXCEEDED, /* time-exceeded forwarded to the flow's backend */
	XLB_STAT_ICMP_ECHO_REPLY,   /* echo request to a VIP address answered (XDP_TX) */
	XLB_STAT_ICMP_ECHO_LIMITED, /* echo request to a VIP address over the rate: dropped */
	XLB_STAT_ICMP_PASS,         /* other ICMP (not about a VIP flow): to the kernel */
	XLB_STAT_FRAG_REDIRECT,     /* fragment sent in GRE to the pool node its 3-tuple hashes to */
	XLB_STAT_FRAG_FROM_PEER,    /* redirected fragment from a pool node, decapsulated here */
	XLB_STAT_FRAG_FIRST,        /* first fragment: backend selected, decision recorded */
	XLB_STAT_FRAG_FORWARD,      /* later fragment forwarded by the fragment table */
	XLB_STAT_FRAG_HELD,         /* later fragment before its first: copied to xlbd, held */
	XLB_STAT_FRAG_HOLD_FAIL,    /* could not be held (larger than the hold buffer, ring full): dropped */
	XLB_STAT_FRAG_RELEASE,      /* first fragment found fragments held: release event sent */
	XLB_STAT_TRACE_EMITTED,     /* traced packet: a record went to the ring buffer */
	XLB_STAT_TRACE_LIMITED,     /* traced packet over node.trace_rate (or tracer off): no record */
	XLB_STAT_TRACE_LOST,        /* traced packet, ring buffer full: no record */
	XLB_STAT_TRACE_INVALID,     /* marker magic with a bad version/family/port/cookie: ordinary packet */
	XLB_STAT_SELFCHECK_PROBE,   /* self-check probe: read-only selection, not in service/real counters */
	XLB_STAT_ICMP_TOO_BIG_SENT, /* too big once encapsulated (IPv4 DF, IPv6): ICMP frag-needed / packet-too-big sent to the client (XDP_TX) */
	XLB_STAT_ICMP_TOO_BIG_LIMITED, /* the same over node.icmp_too_big_rate (or rate 0): dropped, nothing sent */
	XLB_STAT_TOO_BIG_FRAGMENT,  /* too big once encapsulated, IPv4 without DF: handed to xlbd to be fragmented, dropped here */
	XLB_STAT_TOO_BIG_FRAGMENT_FAIL, /* the same, but the ring buffer was full or the frame too large: dropped */
	XLB_STAT_ICMP_SCAN_LIMITED, /* ICMP error about a flow this CPU does not track, over the flood budget: other CPUs' slices not read, Maglev table */
	XLB_STAT_ICMP_CUT,          /* ICMP error to a backend too big once encapsulated: cut to fit (bpf/icmpfit.h) */
	XLB_STAT_TOO_BIG_NO_XLBD,   /* too big once encapsulated, IPv4 without DF, xlbd not reading (stopped): dropped */
	XLB_STAT_FORWARD_LOCAL,     /* to a backend on this node: XDP_PASS to the local stack */
	XLB_STAT_NAT_REPLY,         /* a NAT backend's reply, rewritten to the VIP and sent to the client */
	XLB_STAT_NAT_REPLY_PASS,    /* the same, rewritten, but no FIB answer: to the kernel to route */
	XLB_STAT_NAT_TRACK_FAIL,    /* a NAT flow could not be recorded in xlb_nat: its replies will pass untouched */
	XLB_STAT_NAT_ICMP,          /* an ICMP error to a VIP about a NAT flow, rewritten for its backend (bpf/naticmp.h) */
	XLB_STAT_NAT_ICMP_REPLY,    /* a NAT backend's ICMP error about a tracked flow, rewritten to the VIP and sent to the client */
	XLB_STAT__MAX,
};

/* xlb_nat key: a NAT flow as its replies carry it (bpf/nat.h): from the
 * backend's address and port to the client's. IPv4 in addr[0..3]. */
struct nat_key {
	__u8 backend[16];
	__u8 client[16];
	__be16 bport;
	__be16 cport;
	__u8 proto;
	__u8 family; /* enum xlb_family */
	__u16 pad;
};

/* xlb_nat value: what the reply's source is rewritten back to. */
struct nat_val {
	__u8 vip[16];
	__be16 vport;
	/* Conntrack ticks (16 bits) when the forward path last recorded the
	 * flow, or a peer's record said it did (connection sync: the newer
	 * of two entries for one tuple wins). 0 in entries of older builds,
	 * which left it as padding: they read as old. */
	__u16 seen;
	__u32 rid; /* the real that made it (counters) */
};

/* Fragments (bpf/frag.h). */

/* xlb_frag_conf value (one element). The pool is xlb_frag_peers[0, peers),
 * the same sorted list on every node; self is this node's index in it. */
struct frag_conf {
	__u32 peers;      /* 0: fragment support off (no pool, no decapsulation) */
	__u32 self;       /* this node's index */
	__u64 timeout_ns; /* a recorded decision is used this long */
};

/* xlb_frags key: one datagram. IPv4 ids are 16 bits (network order in the
 * low bytes as loaded), IPv6 ids 32 bits, as loaded. */
struct frag_key {
	__u8 src[16];
	__u8 dst[16];
	__u32 id;
	__u8 family; /* enum xlb_family */
	__u8 proto;
	__u16 pad;
};

enum xlb_frag_state {
	XLB_FRAG_WAITING = 1, /* later fragments are held, the first has not come */
	XLB_FRAG_DECIDED = 2, /* the first fragment chose rid */
	/* This node fragments the datagram itself (too big once encapsulated,
	 * IPv4 without DF: bpf/toobig.h); its pieces, re-injected by xlbd,
	 * follow rid whatever the service's fragment settings. */
	XLB_FRAG_LOCAL = 3,
};

struct frag_entry {
	__u64 ts_ns; /* bpf_ktime_get_coarse_ns at the decision / first hold */
	__u64 hash;  /* the flow hash of the first fragment's 5-tuple */
	__u32 rid;
	__u32 svc_id;
	__u8 state; /* enum xlb_frag_state */
	__u8 encap; /* resolved enum xlb_encap */
	__u16 pad;
	__u32 pad2;
};

/* Ring buffer records (xlb_frag_ring) for xlbd. A HOLD record is followed by
 * len bytes of the frame as the program saw it (after decapsulation of a
 * redirected fragment); a RELEASE record has no frame. */
enum xlb_frag_event_kind {
	XLB_FRAG_EV_HOLD = 1,
	XLB_FRAG_EV_RELEASE = 2,
	/* A whole IPv4 datagram without DF (the frame follows, as for HOLD)
	 * too big once encapsulated: xlbd fragments it into pieces whose IP
	 * length is at most pad and runs each through the program. */
	XLB_FRAG_EV_FRAGMENT = 3,
};

struct frag_event {
	__u32 kind; /* enum xlb_frag_event_kind */
	__u32 len;
	__u32 ifindex; /* ingress interface */
	__u32 pad;     /* FRAGMENT: the pieces' largest IP length; else 0 */
	struct frag_key key;
};

/* Largest frame held for xlbd. */
#define XLB_FRAG_HOLD_MAX 9216

struct xlb_global {
	__u64 count[XLB_STAT__MAX];
};

/* Tracer marker (docs/ARCHITECTURE.md "Packet tracer"): the
 * first TRACE_MARKER_LEN bytes of a TCP/UDP payload, multi-byte fields in
 * network order. magic TRACE_MAGIC: trace this packet and send the record
 * to addr:port; magic TRACE_MAGIC_PROBE: a control-plane self-check probe
 * (addr[0..7] holds node_info.probe_cookie, family and port are 0). */
enum xlb_trace_const {
	TRACE_MAGIC = 0x584c4274,       /* "XLBt" */
	TRACE_MAGIC_PROBE = 0x584c4270, /* "XLBp" */
	TRACE_VERSION = 1,
	TRACE_MARKER_LEN = 28,
};

/* A self-check probe's answer (trace.h, trace_probe_answer): the forwarder
 * writes it in the probe marker's id field of the frame it returns, as
 * TRACE_PROBE_ANSWERED << 24 | conntrack result << 16 | drop reason (enum
 * xlb_stat, 0: none). */
enum xlb_probe_ct {
	XLB_PROBE_CT_NONE = 0,       /* not looked up */
	XLB_PROBE_CT_HIT = 1,        /* this CPU's slice holds the flow */
	XLB_PROBE_CT_REMOTE_HIT = 2, /* another CPU's slice holds it */
	XLB_PROBE_CT_MISS = 3,       /* no entry: the Maglev table */
	XLB_PROBE_CT_RESELECT = 4,   /* an entry whose real is gone: the Maglev table */
	TRACE_PROBE_ANSWERED = 0x41,
};

struct trace_marker {
	__be32 magic;
	__u8 version; /* TRACE_VERSION */
	__u8 family;  /* enum xlb_family of addr */
	__be16 port;  /* receiver's UDP port, not 0 */
	__be32 id;    /* chosen by the sender, echoed in the record */
	__u8 addr[16]; /* receiver; IPv4 in addr[0..3], addr[4..15] zero */
};

/* xlb_trace_ring record: one traced packet, as the node handled it. */
struct trace_event {
	__u64 ktime_ns;    /* CLOCK_MONOTONIC when recorded */
	__u8 src[16];      /* flow source (client); IPv4 in [0..3] */
	__u8 dst[16];      /* VIP address */
	__u8 backend[16];  /* chosen backend, zero when none */
	__u8 receiver[16]; /* from the marker */
	__u32 id;          /* marker id, host order */
	__u32 cpu;
	__u32 svc_id;
	__u32 real_id;     /* 0: no backend */
	__u32 reason;      /* enum xlb_stat drop reason of selection, 0: none */
	__u32 verdict;     /* enum xdp_action */
	__be16 sport;
	__be16 dport;
	__be16 receiver_port;
	__u8 family;          /* of the flow */
	__u8 proto;
	__u8 receiver_family; /* enum xlb_family */
	__u8 backend_family;  /* enum xlb_family, 0: no backend */
	__u8 ct_hit;          /* 1: the flow was tracked (conntrack hit) */
	__u8 pad;
	__u32 pad2;
};

/* Connection table: a plain ARRAY of buckets, sliced by CPU (index =
 * cpu << ct_shift | bucket); each CPU writes only its own slice. A bucket
 * is one cache line of eight 8-byte ways:
 *
 *   63            37 36          18 17  16 15          0
 *  +----------------+--------------+------+-------------+
 *  | tag (27 bits)  | real (19)    |state |  last seen  |
 *  +----------------+--------------+------+-------------+
 *
 * tag = flow_hash >> 37, real = xlb_reals index, state = enum xlb_ct_state,
 * last seen = conntrack ticks, 16 bits (wraps after ~4.9 hours). */
enum xlb_ct_layout {
	XLB_CT_WAYS = 8,
	XLB_CT_TAG_SHIFT = 37, /* the tag's 27 bits are the top of the hash */
	XLB_CT_REAL_SHIFT = 18,
	XLB_CT_REAL_BITS = 19, /* node.max_backends up to 524,287 */
	XLB_CT_REAL_MASK = (1 << XLB_CT_REAL_BITS) - 1,
	XLB_CT_STATE_SHIFT = 16,
	XLB_CT_STATE_MASK = 0x3,
	XLB_CT_TIME_MASK = 0xffff,
	XLB_TICK_SHIFT = 28, /* one tick = 2^28 ns ~ 0.268 s */
	/* A last-seen time up to this many ticks after the reader's clock is
	 * "now" (ct_idle): far above any clock skew, far below the wrap
	 * less the longest timeout (2 h, 26,844 ticks). */
	XLB_CT_AHEAD = 64,
	/* One more than the largest real id a way can hold. */
	XLB_MAX_REALS = 1 << XLB_CT_REAL_BITS,
};

struct ct_bucket {
	__u64 way[XLB_CT_WAYS];
};

/* XLB_CLOCK_NS: the clock of conntrack, templates and lblc entries, in ns
 * (CLOCK_MONOTONIC_COARSE); >> XLB_TICK_SHIFT gives ticks. The test
 * variant (xlb_variant.c) defines it first to add an offset that tests
 * advance (days in minutes); this build reads the kernel's clock alone. */
#ifndef XLB_CLOCK_NS
#define XLB_CLOCK_NS() bpf_ktime_get_coarse_ns()
#endif

/* ct_idle: the ticks way (or template) w has been idle at now. A time
 * written after now was read (by another CPU, or by the forwarder while
 * the sweep runs on a clock xlbd read before) is at most XLB_CT_AHEAD
 * ticks ahead: idle 0, where modulo 2^16 it would look hours old and
 * expired. */
static __always_inline __u64 ct_idle(__u64 now, __u64 w)
{
	__u64 d = (now - w) & XLB_CT_TIME_MASK;

	/* Without a branch (each would double the verifier's states in the
	 * loops over ways): d + XLB_CT_AHEAD carries into bit 16 exactly when
	 * d is within XLB_CT_AHEAD of the wrap; the mask is then 0. */
	return d & (((d + XLB_CT_AHEAD) >> 16) - 1);
}

/* The forwarder's VIP match (select.h): xlb_vip_index is an ARRAY of
 * buckets, two candidate buckets per key (vip_hash); a bucket holds up to
 * XLB_VIP_SLOTS ids of xlb_vip_ents entries, 0 = empty. The entry holds the
 * whole key, compared on every match. The control plane writes an entry
 * first, then publishes its id with one atomic 32-bit store into the
 * mmapped index (never rewriting a published entry in place: a changed VIP
 * gets a fresh entry id, swapped in with one store), so a packet sees the
 * old or the new entry, never a mix. xlb_vips stays the catalog the control
 * plane and xlbctl read. */
enum xlb_vip_match {
	XLB_VIP_SLOTS = 4,
	/* The seed's two halves: BTF enums of clang 14 hold 32 bits. */
	XLB_VIP_SEED_HI = 0x2545F491,
	XLB_VIP_SEED_LO = 0x4F6CDD1D,
};
#define XLB_VIP_SEED ((__u64)XLB_VIP_SEED_HI << 32 | XLB_VIP_SEED_LO)

struct vip_bucket {
	__u32 ent[XLB_VIP_SLOTS];
};

struct vip_ent {
	struct vip_key key;
	struct vip_info info;
};

/* The layouts Go reads and writes through the bpf2go bindings, pinned: a
 * change here fails the C build before it reaches a binding or a pinned
 * map of another version. */
#define XLB_ABI_SIZE(s, n) _Static_assert(sizeof(struct s) == (n), "ABI: struct " #s " size changed")
XLB_ABI_SIZE(vip_key, 20);
XLB_ABI_SIZE(vip_info, 16);
XLB_ABI_SIZE(real_info, 44);
XLB_ABI_SIZE(node_info, 80);
XLB_ABI_SIZE(icmp_rl_state, 16);
XLB_ABI_SIZE(flood_state, 16);
XLB_ABI_SIZE(xlb_counters, 24);
XLB_ABI_SIZE(frag_conf, 16);
XLB_ABI_SIZE(frag_key, 40);
XLB_ABI_SIZE(frag_entry, 32);
XLB_ABI_SIZE(frag_event, 56);
XLB_ABI_SIZE(xlb_global, 8 * XLB_STAT__MAX);
XLB_ABI_SIZE(trace_marker, TRACE_MARKER_LEN);
XLB_ABI_SIZE(trace_event, 112);
XLB_ABI_SIZE(ct_bucket, 8 * XLB_CT_WAYS);
XLB_ABI_SIZE(vip_bucket, 4 * XLB_VIP_SLOTS);
XLB_ABI_SIZE(vip_ent, 36);
XLB_ABI_SIZE(nat_key, 40);
XLB_ABI_SIZE(nat_val, 24);
_Static_assert(XLB_CT_REAL_SHIFT + XLB_CT_REAL_BITS == XLB_CT_TAG_SHIFT &&
		       XLB_CT_STATE_SHIFT + 2 == XLB_CT_REAL_SHIFT &&
		       XLB_CT_TIME_MASK == (1 << XLB_CT_STATE_SHIFT) - 1,
	       "ABI: conntrack way fields must tile the 64 bits");

/* --- connection counts (conns.h) --- */

/* xlb_real_conns value, by real id. Signed: a reader may see a decrement
 * land before the increment of another CPU's flow; readers clamp at 0. */
struct real_conns {
	__s64 active;   /* ESTABLISHED ways (IPVS ActiveConn) */
	__s64 inactive; /* SYN and CLOSING ways (IPVS InActConn) */
};

_Static_assert(sizeof(struct real_conns) == 16, "ABI: struct real_conns size changed");

/* --- schedulers (sched.h) --- */

/* xlb_stages index: the forwarder's stages, XDP programs the entry
 * (xlb_forward) tail-calls for the rare paths (stage_*.c). */
enum xlb_stage {
	XLB_STAGE_ICMP = 0,  /* ICMP and ICMPv6 (stage_icmp.c) */
	XLB_STAGE_FRAG = 1,  /* fragments and GRE (stage_frag.c) */
	XLB_STAGE_PROBE = 2, /* self-check probes (stage_probe.c) */
	XLB_STAGE__MAX,
};

#include "sched/kinds.h" /* enum xlb_sched, generated from internal/sched/list.go */

struct sched_ent {
	__u32 rid;    /* xlb_reals id */
	__u32 weight; /* wrr: > 0 */
};

/* xlb_svc_sched value, by service id; all zero: Maglev. Written whole by
 * the control plane: a new flow read during the write may take a backend
 * of the previous list (its real is checked as any table's is). */
struct svc_sched {
	__u8 kind;     /* enum xlb_sched */
	__u8 plen4;    /* MAGLEV_SOURCE: prefix lengths, 1..32 */
	__u8 plen6;    /* 1..128 */
	__u8 proto;    /* the service's IPPROTO_TCP or IPPROTO_UDP (the sweep's timeouts) */
	__u32 n;       /* entries in ent, 0..XLB_SCHED_LIST_MAX */
	__u32 total;   /* WRR: the sum of the weights */
	__u32 stride;  /* WRR: coprime with total, so consecutive new flows
			* walk the weight line in strides, not in blocks;
			* LBLC, LBLCR: an entry's expiration, ticks */
	/* Persistence (persist.h): templates of (client under pplen4 /
	 * pplen6, persist_id) live persist_timeout ticks after their last
	 * use, and while a tracked connection of theirs lives; 0: none. persist_id names the service, or its group. With
	 * persistence ent[] lists the usable backends whatever the kind. */
	__u32 persist_id;
	__u16 persist_timeout;
	__u8 pplen4;
	__u8 pplen6;
	struct sched_ent ent[XLB_SCHED_LIST_MAX];
};

_Static_assert(sizeof(struct svc_sched) == 24 + 8 * XLB_SCHED_LIST_MAX, "ABI: struct svc_sched size changed");

/* --- lblc, lblcr (lblc.h) --- */

enum xlb_lblc_layout {
	XLB_LBLC_SET_MAX = 8,      /* backends of an lblcr set */
	XLB_LBLC_ENTRIES = 65536,  /* destinations remembered, all services */
};

struct lblc_key {
	__u32 svc_id;
	__u8 family; /* enum xlb_family */
	__u8 pad[3];
	__u8 addr[16]; /* the packet's destination address */
};

struct lblc_ent {
	__u64 used; /* tick of the last new flow to the destination */
	__u64 mod;  /* lblcr: tick of the set's last change */
	__u64 rid[XLB_LBLC_SET_MAX]; /* lblc: rid[0]; lblcr: the set; 0: empty
				      * (64-bit words: compare-and-swap) */
};

_Static_assert(sizeof(struct lblc_key) == 24 && sizeof(struct lblc_ent) == 80, "ABI: lblc layout changed");

/* A walk over the service's list (bpf_loop): wlc's choice over all, the
 * overload test's "some backend under half its weight", and the load of
 * each member of the entry. */
struct lblc_walk {
	struct lblc_key key; /* the flow's entry: key and, new, value */
	struct lblc_ent ne;
	__u64 best_oh, best_w;
	__u32 best;  /* wlc over the list, 0: none yet */
	__u32 under; /* some backend has active * 2 < weight */
	__u32 rid[XLB_LBLC_SET_MAX];  /* the entry's members, as read */
	__u32 w[XLB_LBLC_SET_MAX];    /* their weights, 0: not usable */
	__u64 oh[XLB_LBLC_SET_MAX];   /* their wlc overhead */
	__u64 act[XLB_LBLC_SET_MAX];  /* their active connections */
};

/* --- persistence (persist.h) --- */

/* A template holds the tick it expires at, 24 bits: it wraps after ~52
 * days, and a stamp reads as live only up to half of that ahead of now
 * (persist_live), far above any hold (a timeout of at most 2^16 ticks,
 * or a connection's state timeout). The sweep frees expired slots. */
enum xlb_persist_layout {
	XLB_PERSIST_SLOTS = 1 << 18, /* a power of two: 2 MiB */
	XLB_PERSIST_TAG_SHIFT = 43,
	XLB_PERSIST_REAL_SHIFT = 24,
	XLB_PERSIST_TIME_BITS = 24,
	XLB_PERSIST_TIME_MASK = (1 << XLB_PERSIST_TIME_BITS) - 1,
};
_Static_assert(XLB_PERSIST_REAL_SHIFT == XLB_PERSIST_TIME_BITS &&
		       XLB_PERSIST_REAL_SHIFT + XLB_CT_REAL_BITS == XLB_PERSIST_TAG_SHIFT,
	       "ABI: template fields must tile the 64 bits");

/* --- NAT reply next hops (nathop.h) --- */

#define NAT_HOP_SLOTS_SHIFT 12

/* xlb_nat_hops value: one client's FIB answer. */
struct nat_hop {
	__u64 client[2]; /* the lookup's inputs (IPv4: first 4 bytes) */
	__u64 vip[2];
	__u64 ts;        /* bpf_jiffies64 of the lookup */
	__u32 iif;       /* ingress interface */
	__u32 oif;       /* egress interface */
	__u8 dmac[6];
	__u8 smac[6];
	__u16 max_len;   /* the longest datagram the FIB accepted (egress MTU) */
	__u8 family;
	__u8 pad;
};

#include "synctypes.h" /* connection sync (sync.h) */

/* --- fragments (frag.h) --- */

/* 0 -> per-CPU staging buffer of a HOLD record (header + frame). */
struct frag_hold_buf {
	struct frag_event ev;
	__u8 data[XLB_FRAG_HOLD_MAX];
};
