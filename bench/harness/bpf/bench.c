// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* bench.c: programs for per-packet measurements with BPF_PROG_TEST_RUN
 * (bench/harness). Not part of the forwarder; never attached.
 *
 *   bench_wrap  restores the template frame, sets the flow, tail-calls
 *               bench_target[0]: the forwarder, bench_lru or bench_tx
 *   bench_tx    XDP_TX and nothing else: calibrates the wrapper
 *   bench_lru   the forwarder's job (xlb.c) with a kernel LRU hash as the
 *               connection table (bench_lru.h), or with none
 *
 * The xlb_* maps are the forwarder's own: the loader replaces them with the
 * maps pinned by internal/datapath, so bench_lru reads the same VIPs,
 * Maglev tables, reals and node settings and counts in the same xlb_stats. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "consts.h"
#include "types.h"
#include "maps.h"
#include "parse.h"
#include "hash.h"
#include "select.h"
#include "encap.h"
#include "nexthop.h"
#include "stats.h"
#include "bench_wrap.h"
#include "bench_lru.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Elimination: bench_lru answers XDP_TX right after this stage, so the
 * difference between two stops is what the stage costs. */
enum bench_stage {
	BENCH_STOP_NONE = 0,   /* the whole job */
	BENCH_STOP_PARSE = 1,  /* parse_packet */
	BENCH_STOP_VIP = 2,    /* + VIP match, node settings, flow hash */
	BENCH_STOP_SELECT = 3, /* + connection table / Maglev, real checks */
	BENCH_STOP_STATS = 4,  /* + service and real counters */
	BENCH_STOP_ENCAP = 5,  /* + encapsulation (the rest is the next hop) */
};

volatile const __u32 bench_stop = BENCH_STOP_NONE; /* enum bench_stage */

/* BTF anchors for bpf2go. */
const enum bench_flow_mode *bench_anchor_flow_mode __attribute__((unused));
const enum bench_ct_kind *bench_anchor_ct_kind __attribute__((unused));
const enum bench_stage *bench_anchor_stage __attribute__((unused));
const enum xlb_stat *bench_anchor_stat __attribute__((unused));

SEC("xdp")
int bench_wrap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 off = bench_var_off;
	__u32 pos = bench_pos;

	/* The previous program only ever grew the head: give it back. */
	if (bpf_xdp_adjust_head(ctx, (int)(data_end - data) - (int)bench_len))
		return XDP_ABORTED;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + BENCH_HEAD > data_end || (__u32)(data_end - data) != bench_len)
		return XDP_ABORTED;
	__builtin_memcpy(data, bench_head, BENCH_HEAD);
	if (bench_tail_len) {
		__u32 n = bench_tail_len & (BENCH_TAIL - 1); /* bounded for the verifier */

		if (n && bpf_xdp_store_bytes(ctx, BENCH_HEAD, bench_tail, n))
			return XDP_ABORTED;
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
	}
	if (bench_mode != BENCH_SAME) {
		if (off > BENCH_VAR_OFF_MAX || data + off + 4 > data_end)
			return XDP_ABORTED;
		*(__be32 *)(data + off) = bpf_htonl(bench_base + pos);
		pos++;
		if (bench_mode == BENCH_CYCLE && pos >= bench_flows)
			pos = 0;
		bench_pos = pos;
	}
	bench_iters++;
	bpf_tail_call(ctx, &bench_target, 0);
	return XDP_ABORTED;
}

SEC("xdp")
int bench_tx(struct xdp_md *ctx)
{
	return XDP_TX;
}

/* bench_lru is xlb_forward (xlb.c) with lru_select_backend for
 * select_backend; packets the benchmark never sends (not parsed, not for a
 * VIP) are passed without the forwarder's finer verdicts. */
SEC("xdp")
int bench_lru(struct xdp_md *ctx)
{
	struct pkt p = {};
	struct selection sel = {};
	struct vip_info *v;
	struct node_info *n;
	__u32 zero = 0;
	__u64 h;
	int rc;

	rc = parse_packet(ctx, &p);
	if (rc != PARSE_OK)
		return XDP_PASS;
	if (bench_stop == BENCH_STOP_PARSE)
		return XDP_TX;
	v = select_vip(&p);
	if (!v) {
		stats_count(XLB_STAT_PASS_NOT_VIP);
		return XDP_PASS;
	}
	n = bpf_map_lookup_elem(&xlb_node, &zero);
	if (!n) {
		stats_count(XLB_STAT_DROP_INTERNAL);
		return XDP_DROP;
	}
	h = select_flow_hash(&p);
	if (bench_stop == BENCH_STOP_VIP)
		return XDP_TX;
	rc = lru_select_backend(&p, v, n, h, &sel);
	if (rc) {
		stats_count(rc);
		return XDP_DROP;
	}
	if (bench_stop == BENCH_STOP_SELECT)
		return XDP_TX;
	stats_add(&xlb_svc_stats, v->svc_id, p.l3_len, sel.new_flow);
	stats_add(&xlb_real_stats, sel.rid, p.l3_len, sel.new_flow);
	if (bench_stop == BENCH_STOP_STATS)
		return XDP_TX;

	__u8 encap = sel.real->encap ? sel.real->encap : v->encap;
	__u16 outer = (sel.real->family == XLB_AF_INET ? IPV4_HLEN : IPV6_HLEN) +
		      (encap == XLB_ENCAP_GRE ? GRE_HLEN : 0);

	rc = encap_push(ctx, &p, sel.real, encap, n, h);
	if (rc) {
		stats_count(rc);
		return XDP_DROP;
	}
	if (bench_stop == BENCH_STOP_ENCAP)
		return XDP_TX;
	return nexthop_forward(ctx, sel.real, n, outer + p.l3_len, 0);
}
