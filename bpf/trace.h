/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* trace.h: the packet tracer (paper section 4.4) and the
 * self-check probe marker. A TCP/UDP packet to a VIP whose payload starts
 * with a struct trace_marker (types.h) is forwarded as usual; the node also
 * puts a struct trace_event in the xlb_trace_ring ring buffer (per-CPU token
 * bucket, node_info.trace_rate per second), which the daemon sends to the
 * receiver named in the marker. A probe marker carrying the node's
 * probe_cookie makes the packet a self-check probe: read-only selection, no
 * service/real counters (xlb.c, xlb_probe). The layout is in
 * docs/ARCHITECTURE.md. */
#pragma once

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "consts.h"
#include "csum.h"
#include "maps.h"
#include "parse.h"
#include "select.h"
#include "stats.h"
#include "types.h"
#include "ratelimit.h"

/* Markers further into the frame than this are not looked for. */
#define TRACE_MAX_OFF 2048

/* trace_marker_off returns the frame offset of p's TCP/UDP payload (shift
 * bytes further when the caller pushed outer headers) when that payload is
 * long enough for a marker and starts with one of the two magics, else 0.
 * Called before selection (probes) and after the verdict (tracer) rather
 * than keeping the offset live across selection, which would double the
 * verifier's states. The cost for an ordinary packet is a length check and
 * one 4-byte load; nothing is written. */
static __always_inline __u32 trace_marker_off(struct xdp_md *ctx, const struct pkt *p,
						__u32 shift)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 off = p->l4_off, end = (__u32)p->l3_off + p->l3_len + shift;
	__be32 *magic;

	if (off > TRACE_MAX_OFF || shift > 128)
		return 0;
	off += shift;
	if (p->proto == IPPROTO_UDP) {
		off += 8;
	} else {
		__u8 *doff = data + off + 12;

		if ((void *)(doff + 1) > data_end)
			return 0;
		off += (*doff >> 4) * 4;
	}
	if (off + TRACE_MARKER_LEN > end)
		return 0; /* no payload, or too short to hold a marker */
	magic = data + off;
	if ((void *)(magic + 1) > data_end)
		return 0;
	if (*magic != bpf_htonl(TRACE_MAGIC) && *magic != bpf_htonl(TRACE_MAGIC_PROBE))
		return 0;
	return off;
}

/* trace_is_probe: the marker at off (from trace_marker_off) is a valid
 * self-check probe marker of this node. Reads the packet only. */
static __always_inline int trace_is_probe(struct xdp_md *ctx, const struct node_info *n, __u32 off)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct trace_marker *m;

	if (off > TRACE_MAX_OFF + 64)
		return 0;
	m = data + off;
	if ((void *)(m + 1) > data_end || m->magic != bpf_htonl(TRACE_MAGIC_PROBE))
		return 0;
	if (m->version != TRACE_VERSION || !n->probe_cookie ||
	    *(__u64 *)m->addr != n->probe_cookie) {
		stats_count(XLB_STAT_TRACE_INVALID);
		return 0;
	}
	return 1;
}

/* trace_probe_answer writes a self-check probe's answer (enum
 * xlb_probe_ct) in the id field of its marker at frame offset off (from
 * trace_marker_off, before any header is pushed): the caller of the test
 * run reads what this run did from the frame it gets back, whatever other
 * packets other CPUs forward meanwhile. The TCP or UDP checksum is updated
 * for the new id (a UDP checksum of 0, none, stays 0), so a probe sent on
 * by a live run (the blackbox prober) still reaches its backend's socket. */
static __always_inline void trace_probe_answer(struct xdp_md *ctx, const struct pkt *p, __u32 off,
					       __u32 ct, int reason)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 coff = p->l4_off + (p->proto == IPPROTO_TCP ? 16 : 6);
	struct trace_marker *m;
	__u32 old, id;
	__u16 *check;

	if (off > TRACE_MAX_OFF + 64 || coff > TRACE_MAX_OFF + 64)
		return;
	m = data + off;
	check = data + coff;
	if ((void *)(m + 1) > data_end || (void *)(check + 1) > data_end)
		return;
	old = m->id;
	id = bpf_htonl((__u32)TRACE_PROBE_ANSWERED << 24 | (ct & 0xff) << 16 | (reason & 0xffff));
	m->id = id;
	if (p->proto == IPPROTO_UDP && !*check)
		return;
	*check = csum_replace16(csum_replace16(*check, (__u16)old, (__u16)id), (__u16)(old >> 16),
				(__u16)(id >> 16));
}

/* trace_info packs a traced packet's fate for xlb_trace: the XDP verdict,
 * the enum xlb_stat drop reason of selection (0: none) and whether the flow
 * was tracked (conntrack hit). */
static __always_inline __u32 trace_info(int verdict, int reason, const struct selection *sel)
{
	return (__u32)(verdict & 0xff) | (__u32)(reason & 0xff) << 8 |
	       (__u32)(sel->real && !sel->new_flow) << 16;
}

/* xlb_trace: the packet p's fate is known (info from trace_info; rid the
 * chosen real, 0 if none). When the marker at frame offset off (the caller
 * adds the encapsulation it pushed) is a valid tracer marker, a record goes
 * to the ring buffer within the node's rate; an invalid one is only
 * counted. A global function: verified once, apart from the forwarding
 * paths that lead to it. */
__attribute__((noinline)) int xlb_trace(struct xdp_md *ctx, const struct pkt *p, __u32 off,
					__u32 rid, __u32 info)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct trace_marker *m;
	struct trace_event *e;
	struct real_info *real;
	struct node_info *n;
	struct vip_info *v;
	__u32 zero = 0;

	if (!p || off > TRACE_MAX_OFF + 256)
		return 0;
	m = data + off;
	if ((void *)(m + 1) > data_end || m->magic != bpf_htonl(TRACE_MAGIC))
		return 0;
	if (m->version != TRACE_VERSION || !m->port ||
	    (m->family == XLB_AF_INET ? (*(__u32 *)(m->addr + 4) | *(__u32 *)(m->addr + 8) |
					 *(__u32 *)(m->addr + 12)) != 0 :
					m->family != XLB_AF_INET6)) {
		stats_count(XLB_STAT_TRACE_INVALID);
		return 0;
	}
	n = bpf_map_lookup_elem(&xlb_node, &zero);
	if (!n || !rl_allow(&xlb_trace_rl, n->trace_rate)) {
		stats_count(XLB_STAT_TRACE_LIMITED);
		return 0;
	}
	e = bpf_ringbuf_reserve(&xlb_trace_ring, sizeof(*e), 0);
	if (!e) {
		stats_count(XLB_STAT_TRACE_LOST);
		return 0;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->ktime_ns = bpf_ktime_get_ns();
	e->cpu = bpf_get_smp_processor_id();
	__builtin_memcpy(e->src, p->src, 16);
	__builtin_memcpy(e->dst, p->dst, 16);
	__builtin_memcpy(e->receiver, m->addr, 16);
	e->id = bpf_ntohl(m->id);
	e->receiver_port = m->port;
	e->receiver_family = m->family;
	e->verdict = info & 0xff;
	e->reason = (info >> 8) & 0xff;
	e->sport = (__be16)p->ports;
	e->dport = pkt_dport(p);
	e->family = p->family;
	e->proto = p->proto;
	v = select_vip(p);
	if (v)
		e->svc_id = v->svc_id;
	real = rid ? bpf_map_lookup_elem(&xlb_reals, &rid) : NULL;
	if (real) {
		__builtin_memcpy(e->backend, real->addr, 16);
		e->backend_family = real->family;
		e->real_id = rid;
		e->ct_hit = (info >> 16) & 1;
	}
	bpf_ringbuf_submit(e, 0);
	stats_count(XLB_STAT_TRACE_EMITTED);
	return 0;
}
