/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* methods.h: sends a packet to its selected real by the real's forwarding
 * method (docs/ARCHITECTURE.md, Forwarding methods):
 *
 *   gre, ipip, gue  outer headers in front (encap.h), to the next hop
 *   dr              the frame as it came, to the backend's own MAC
 *   nat             destination rewritten to the backend (nat.h)
 *   local           a backend at one of this node's addresses: after the
 *                   method's rewrite (nat only), XDP_PASS to the local stack
 *
 * Only the MAC addresses change for dr, so it costs no MTU; nat changes
 * addresses, ports and checksums in place. */
#pragma once

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "encap.h"
#include "nat.h"
#include "nexthop.h"
#include "stats.h"
#include "types.h"

/* methods_of: the method of packets of service v to real r. */
static __always_inline __u8 methods_of(const struct real_info *r, const struct vip_info *v)
{
	return r->encap ? r->encap : v->encap;
}

/* methods_outer: the bytes the method puts in front of the datagram. */
static __always_inline __u16 methods_outer(const struct real_info *r, __u8 m)
{
	if (r->flags & XLB_REAL_F_LOCAL)
		return 0;
	return encap_outer_len(m, r->family);
}

/* methods_reason: a global function's drop reason as a constant the
 * verifier sees (it counts it in an array). */
static __always_inline int methods_reason(int rc)
{
	switch (rc) {
	case 0:
		return 0;
	case XLB_STAT_DROP_MALFORMED:
		return XLB_STAT_DROP_MALFORMED;
	case XLB_STAT_DROP_NO_SOURCE:
		return XLB_STAT_DROP_NO_SOURCE;
	case XLB_STAT_DROP_ENCAP:
		return XLB_STAT_DROP_ENCAP;
	}
	return XLB_STAT_DROP_INTERNAL;
}

/* xlb_tunnel: encap_push for the tunnel methods (gre, ipip, gue), as a
 * global function: the verifier checks the headers' many shapes once,
 * not at every place a packet is sent from. */
__attribute__((noinline)) int xlb_tunnel(struct xdp_md *ctx, const struct pkt *p,
					const struct real_info *r, __u32 m, __u64 h)
{
	struct node_info *n;
	__u32 zero = 0;

	n = bpf_map_lookup_elem(&xlb_node, &zero);
	if (!p || !r || !n)
		return XLB_STAT_DROP_INTERNAL;
	/* bounded here, in the register encap_push goes on to use (as
	 * frag_send does): "offset is outside of the packet" otherwise */
	if (p->l3_off < ETH_HLEN || p->l3_off > ETH_HLEN + 2 * VLAN_HLEN)
		return XLB_STAT_DROP_INTERNAL;
	return encap_push(ctx, p, r, m, n, h);
}

/* methods_tunnel: xlb_tunnel's work, inline when inl (a literal at every
 * call). The entry's packets push their headers inline: the call to the
 * global function cost 11-15% of a conntrack hit (its frame, its own
 * lookup of the node, the packet re-read behind pointers), measured side
 * by side. The stages call the global function, verified once for them
 * all. */
static __always_inline int methods_tunnel(struct xdp_md *ctx, const struct pkt *p,
					  const struct real_info *r, __u8 m,
					  const struct node_info *n, __u64 h, const bool inl)
{
	if (!inl)
		return methods_reason(xlb_tunnel(ctx, p, r, m, h));
	if (p->l3_off < ETH_HLEN || p->l3_off > ETH_HLEN + 2 * VLAN_HLEN)
		return XLB_STAT_DROP_INTERNAL; /* as in xlb_tunnel */
	return encap_push(ctx, p, r, m, n, h);
}

/* methods_send sends p to real r (id rid) by method m and returns the
 * verdict. hit: a conntrack hit still to be counted with the verdict; new:
 * the flow is new to this CPU (nat records it for the replies); inl: the
 * tunnel headers are pushed inline (methods_tunnel). */
static __always_inline int methods_send(struct xdp_md *ctx, const struct pkt *p,
					const struct real_info *r, __u32 rid, __u8 m,
					const struct node_info *n, __u64 h, __u32 hit, int new,
					const bool inl)
{
	int local = r->flags & XLB_REAL_F_LOCAL;
	int rc = 0;

	if (m == XLB_ENCAP_NAT)
		rc = methods_reason(xlb_nat_forward(ctx, p, r, rid, new));
	else if (!local && m != XLB_ENCAP_DR)
		rc = methods_tunnel(ctx, p, r, m, n, h, inl);
	if (rc) {
		stats_count_hit(rc, hit);
		return XDP_DROP;
	}
	if (local) {
		stats_count_hit(XLB_STAT_FORWARD_LOCAL, hit);
		return XDP_PASS;
	}
	return nexthop_forward(ctx, r, n, encap_outer_len(m, r->family) + p->l3_len, hit);
}
