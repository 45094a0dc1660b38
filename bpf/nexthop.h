/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* nexthop.h: the Ethernet next hop of an encapsulated packet: the one the
 * control plane cached in the real (resolved from the kernel FIB and
 * neighbour table, kept fresh by xlbd), else bpf_fib_lookup per packet,
 * else the configured fallback gateway. */
#pragma once

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "encap.h"
#include "stats.h"
#include "types.h"

/* nexthop_fib asks the kernel's FIB for the route from this node to r of
 * an outer packet of tot_len bytes (BPF_FIB_LKUP_RET_FRAG_NEEDED, with
 * fib->mtu_result, when it does not fit the route's MTU: reported before
 * the neighbour is looked at). */
static __always_inline int nexthop_fib(struct xdp_md *ctx, struct bpf_fib_lookup *fib,
				       const struct real_info *r, const struct node_info *n,
				       __u16 tot_len)
{
	fib->ifindex = ctx->ingress_ifindex;
	fib->tot_len = tot_len;
	if (r->family == XLB_AF_INET) {
		fib->family = AF_INET;
		__builtin_memcpy(&fib->ipv4_src, n->addr4, 4);
		__builtin_memcpy(&fib->ipv4_dst, r->addr, 4);
	} else {
		fib->family = AF_INET6;
		__builtin_memcpy(fib->ipv6_src, n->addr6, 16);
		__builtin_memcpy(fib->ipv6_dst, r->addr, 16);
	}
	return bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
}

/* nexthop_forward_fib: nexthop_forward for a real without a cached next
 * hop, by the kernel's FIB. Apart, so that the lookup's 64 bytes are
 * zeroed only on this path (declared in nexthop_forward, they were zeroed
 * for every packet). */
static __always_inline int nexthop_forward_fib(struct xdp_md *ctx, struct ethhdr *eth,
					       const struct real_info *r, const struct node_info *n,
					       __u16 tot_len, __u32 hit)
{
	struct bpf_fib_lookup fib = {};
	int rc = nexthop_fib(ctx, &fib, r, n, tot_len);

	if (rc == BPF_FIB_LKUP_RET_SUCCESS) {
		__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
		__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
		if (fib.ifindex == ctx->ingress_ifindex) {
			stats_count_hit(XLB_STAT_FORWARD_TX, hit);
			return XDP_TX;
		}
		stats_count_hit(XLB_STAT_FORWARD_REDIRECT, hit);
		return bpf_redirect(fib.ifindex, 0);
	}
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED) {
		stats_count_hit(XLB_STAT_DROP_TOO_BIG, hit);
		return XDP_DROP;
	}
	if (n->flags & XLB_NODE_F_GATEWAY) {
		__builtin_memcpy(eth->h_dest, n->gw_mac, ETH_ALEN);
		__builtin_memcpy(eth->h_source, n->if_mac, ETH_ALEN);
		stats_count(XLB_STAT_NEXTHOP_FALLBACK);
		stats_count_hit(XLB_STAT_FORWARD_TX, hit);
		return XDP_TX;
	}
	stats_count_hit(XLB_STAT_DROP_NO_NEXTHOP, hit);
	return XDP_DROP;
}

/* nexthop_forward sets the MACs and returns the XDP verdict. The frame
 * starts with the (outer) Ethernet header; tot_len is the outer IP length.
 * hit: 1 when the packet's conntrack hit is still to be counted (with the
 * verdict's counter, in the same update). */
static __always_inline int nexthop_forward(struct xdp_md *ctx, const struct real_info *r,
					   const struct node_info *n, __u16 tot_len, __u32 hit)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end) {
		stats_count_hit(XLB_STAT_DROP_INTERNAL, hit);
		return XDP_DROP;
	}
	if (!(r->flags & XLB_REAL_F_NEXTHOP))
		return nexthop_forward_fib(ctx, eth, r, n, tot_len, hit);
	if (tot_len > r->mtu) {
		stats_count_hit(XLB_STAT_DROP_TOO_BIG, hit);
		return XDP_DROP;
	}
	copy_mac(eth->h_dest, r->dmac);
	copy_mac(eth->h_source, r->smac);
	if (r->ifindex == ctx->ingress_ifindex) {
		stats_count_hit(XLB_STAT_FORWARD_TX, hit);
		return XDP_TX;
	}
	stats_count_hit(XLB_STAT_FORWARD_REDIRECT, hit);
	return bpf_redirect(r->ifindex, 0);
}
