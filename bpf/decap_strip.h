/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* decap_strip.h: removes the outer headers of a parsed tunnel packet:
 *
 *   before: [eth (+vlan)] [outer IPv4/IPv6] [GRE or UDP?] [inner IP ...]
 *   after:                [eth (+vlan)]            [inner IP ...]
 *
 * The L2 header keeps its addresses and tags; its last ethertype becomes
 * the inner family's. The inner datagram is not touched. */
#pragma once

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "decap_types.h"
#include "decap_parse.h"

/* decap_write_l2 writes the saved L2 header (MACs and vlans tags) at the
 * new start of the frame and sets the ethertype in front of the inner
 * header. Constant sizes per case keep the verifier's range checks simple. */
static __always_inline void decap_write_l2(void *data, const __u8 *l2,
					   __u8 vlans, __be16 proto)
{
	switch (vlans) {
	case 0:
		__builtin_memcpy(data, l2, 12);
		*(__be16 *)(data + 12) = proto;
		break;
	case 1:
		__builtin_memcpy(data, l2, 16);
		*(__be16 *)(data + 16) = proto;
		break;
	default:
		__builtin_memcpy(data, l2, 20);
		*(__be16 *)(data + 20) = proto;
		break;
	}
}

/* decap_strip moves the frame's start t->strip bytes forward; returns 0,
 * or -1 if bpf_xdp_adjust_head failed (the frame is then unusable). */
static __always_inline int decap_strip(struct xdp_md *ctx,
				       const struct decap_tunnel *t)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__be16 proto = t->inner6 ? BE_ETH_P_IPV6 : BE_ETH_P_IP;
	__u8 l2[DECAP_L2_MAX];

	/* A parsed tunnel packet holds at least 14 + 20 + 20 bytes. */
	if (data + DECAP_L2_MAX > end)
		return -1;
	__builtin_memcpy(l2, data, DECAP_L2_MAX);

	if (bpf_xdp_adjust_head(ctx, (int)t->strip))
		return -1;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if (data + DECAP_L2_MAX > end)
		return -1;
	decap_write_l2(data, l2, t->vlans, proto);
	return 0;
}
