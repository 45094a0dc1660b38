/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* stage_types.h: the types of the forwarder's stages (xlb.c, stage_*.c):
 * their index in xlb_stages, the parsed packet and the argument the entry
 * leaves a new-flow stage (maps.h). Included by types.h. */
#pragma once

#include <linux/types.h>

/* xlb_stages index: the forwarder's stages, XDP programs the entry
 * (xlb_forward) tail-calls (stage_*.c). The entry chooses the new flows of
 * the hash schedulers (Maglev, the default); those of the other families
 * go to their family's stage (sched/kinds.h), which holds that family's
 * code only. */
enum xlb_stage {
	XLB_STAGE_ICMP = 0,         /* ICMP and ICMPv6 (stage_icmp.c) */
	XLB_STAGE_FRAG = 1,         /* fragments and GRE (stage_frag.c) */
	XLB_STAGE_PROBE = 2,        /* self-check probes (stage_probe.c) */
	XLB_STAGE_NEW_CURSOR = 3,   /* new flows, XLB_SCHED_FAMILY_CURSOR (stage_new.c) */
	XLB_STAGE_NEW_LEAST = 4,    /* new flows, XLB_SCHED_FAMILY_LEAST */
	XLB_STAGE_NEW_LOCALITY = 5, /* new flows, XLB_SCHED_FAMILY_LOCALITY */
	XLB_STAGE__MAX,
};

/* What parse_packet (parse.h) found in a packet; the stages get it again
 * from their own parse, or from the entry in struct stage_arg. */
struct pkt {
	__u8 src[16];
	__u8 dst[16];
	__u32 ports;    /* sport | dport << 16, as loaded from the wire */
	__u16 l3_off;   /* bytes of L2 header: 14, 18 or 22 */
	__u16 l3_len;   /* IP datagram length (header + payload) */
	__u16 l4_off;   /* frame offset of the L4 header (set when parsing got there) */
	__u8 family;    /* enum xlb_family */
	__u8 proto;     /* L4 protocol */
	__u8 tcp_flags; /* TCP_FLAG_* */
	__u8 tos;       /* IPv4 TOS / IPv6 traffic class */
	__u8 have_dst;  /* dst is valid even if parsing failed later */
	/* Fragments: filled by bpf/frag.h (frag_parse), not here. */
	__u8 frag_l4;   /* first fragment whose TCP/UDP header (ports) was read */
	__u16 frag_off; /* offset in 8-byte units; 0: the first fragment */
	__u32 frag_id;  /* IPv4 id (16 bits) or IPv6 identification, as loaded */
};

/* xlb_stage_arg value: what a new-flow stage gets from the entry besides
 * the context (all a tail call passes), so that it does not parse, look
 * up or hash the packet again. */
struct stage_arg {
	struct pkt p;         /* as the entry parsed it */
	struct vip_info v;    /* a copy of the flow's service's */
	__u64 h;              /* the flow's hash (select_flow_hash) */
};
