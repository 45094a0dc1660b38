// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* decap.c: xlb-decap, the backend side of xlb's tunnels for hosts whose
 * kernel lacks ip_gre/ipip/ip6_tunnel. GRE (RFC 2784), IPIP, 6in4, 4in6
 * and IP6IP6 packets addressed to this host lose their outer headers and
 * go on (XDP_PASS) to the local stack, where the VIP sits on loopback.
 * Everything else passes untouched; a tunnel packet for this host that is
 * malformed inside is dropped. Each outcome has a counter. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "decap_types.h"
#include "decap_maps.h"
#include "decap_parse.h"
#include "decap_strip.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

static __always_inline int decap_action(enum decap_counter c)
{
	switch (c) {
	case DECAP_DROP_TRUNCATED:
	case DECAP_DROP_INNER_VERSION:
	case DECAP_DROP_INNER_LENGTH:
	case DECAP_DROP_ADJUST:
		return XDP_DROP;
	default:
		return XDP_PASS;
	}
}

static __always_inline enum decap_counter
decap_rx_counter(const struct decap_tunnel *t)
{
	enum decap_counter base = t->proto == IPPROTO_GRE ? DECAP_RX_GRE_4IN4 :
				  t->proto == IPPROTO_UDP ? DECAP_RX_GUE_4IN4 :
							    DECAP_RX_IPIP_4IN4;

	return base + t->outer6 * 2 + t->inner6;
}

static __always_inline enum decap_counter decap_process(struct xdp_md *ctx)
{
	struct decap_cursor cur = {
		.pos = (void *)(long)ctx->data,
		.end = (void *)(long)ctx->data_end,
	};
	struct decap_tunnel t = {};
	enum decap_counter c;

	c = decap_parse_outer(&cur, &t);
	if (c != DECAP_NEXT)
		return c;
	if (!bpf_map_lookup_elem(&decap_local, &t.dst))
		return DECAP_PASS_NOT_LOCAL;
	if (t.frag)
		return DECAP_PASS_FRAGMENT;
	c = decap_parse_tunnel(&cur, &t);
	if (c != DECAP_NEXT)
		return c;
	if (decap_strip(ctx, &t))
		return DECAP_DROP_ADJUST;
	return decap_rx_counter(&t);
}

SEC("xdp")
int xlb_decap(struct xdp_md *ctx)
{
	__u64 bytes = ctx->data_end - ctx->data;
	enum decap_counter c = decap_process(ctx);

	decap_count(c, bytes);
	return decap_action(c);
}
