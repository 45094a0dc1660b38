/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* icmpfit.h: an ICMP error about a VIP flow that does not fit its
 * backend's egress once encapsulated is cut to fit (RFC 1812 4.3.2.3 and
 * RFC 4443 2.4 let an error carry only as much of the offending packet as
 * fits; the backend needs the quoted headers, not the payload).
 *
 * The message is cut at a multiple of 8 bytes from the ICMP header. The
 * checksum is updated, not recomputed: the removed tail's one's complement
 * sum (and, for ICMPv6, the pseudo-header's length change) is added to
 * the old checksum, so an error whose checksum was wrong stays wrong. The
 * IP header's length (and IPv4 header checksum, RFC 1624) follow. An error
 * that would keep less than the quoted IP header and 8 bytes of it is
 * dropped (drop_too_big). */
#pragma once

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "maps.h"
#include "icmp.h"
#include "parse.h"
#include "toobig.h"
#include "types.h"

#define ICMPFIT_CHUNK 512
#define ICMPFIT_CHUNKS 17 /* the last one's bound (1020, as the verifier sees it) stays in the buffer */
/* The largest tail summed, zero padding included. */
#define ICMPFIT_TAIL_MAX (ICMPFIT_CHUNKS * ICMPFIT_CHUNK - 4)

/* icmpfit_tail_sum: the folded one's complement sum (16 bits, memory
 * order) of the len bytes at frame offset off, zero-padded to a multiple
 * of 4 (off is at an even distance from the ICMP header). -1 on failure. */
static __always_inline __s64 icmpfit_tail_sum(struct xdp_md *ctx, __u32 off, __u64 len)
{
	__u32 zero = 0;
	struct frag_hold_buf *b = bpf_map_lookup_elem(&xlb_frag_buf, &zero);
	__s64 sum = 0;

	asm volatile("" : "+r"(len)); /* compared as 64 bits: "R4 min value is negative" */
	if (!b || len < 1 || len > ICMPFIT_TAIL_MAX)
		return -1;
	if (bpf_xdp_load_bytes(ctx, off, b->data, len))
		return -1;
	*(__u32 *)(b->data + len) = 0;
	len = (len + 3) & ~3U;
	for (__u32 i = 0; i < ICMPFIT_CHUNKS; i++) {
		__u32 o = i * ICMPFIT_CHUNK, n = (__u32)len - o;

		if (o >= len)
			break;
		if (n > ICMPFIT_CHUNK)
			n = ICMPFIT_CHUNK;
		asm volatile("" : "+r"(n));
		n &= 0x3fc; /* for the verifier: 4..512, a multiple of 4 */
		sum = bpf_csum_diff(NULL, 0, (__be32 *)(b->data + o), n, (__u32)sum);
		if (sum < 0)
			return -1;
	}
	return (__u16)~csum_fold64((__u64)sum);
}

/* icmpfit_add: the one's complement sum of two 16-bit values. */
static __always_inline __u16 icmpfit_add(__u32 a, __u32 b)
{
	a += b;
	return (a & 0xffff) + (a >> 16);
}

/* icmpfit_ip_len writes the IP header's new length len (IPv4: tot_len,
 * header checksum updated, RFC 1624; IPv6: payload_len = len - 40). */
static __always_inline int icmpfit_ip_len(struct xdp_md *ctx, const struct pkt *p, __u32 len)
{
	__u32 l3 = p->l3_off;
	__u16 w[6]; /* IPv4: the first 12 bytes of the header */

	if (p->family == XLB_AF_INET6) {
		w[0] = bpf_htons(len - IPV6_HLEN);
		return bpf_xdp_store_bytes(ctx, l3 + 4, w, 2);
	}
	if (bpf_xdp_load_bytes(ctx, l3, w, sizeof(w)))
		return -1;
	w[5] = csum_replace16(w[5], w[1], bpf_htons(len));
	w[1] = bpf_htons(len);
	return bpf_xdp_store_bytes(ctx, l3, w, sizeof(w));
}

/* icmpfit_cut cuts the ICMP error p so that its datagram is at most max
 * bytes: 0 (p->l3_len updated), or -1 when it cannot keep the quoted IP
 * header and 8 bytes more, or the frame could not be changed. */
static __always_inline int icmpfit_cut(struct xdp_md *ctx, struct pkt *p, __u32 max)
{
	__u32 ip_hdrs = p->l4_off - p->l3_off; /* the error's IP header(s) */
	__u32 quoted = p->family == XLB_AF_INET ? IPV4_HLEN : IPV6_HLEN;
	__u32 msg = p->l3_len - ip_hdrs, keep, old;
	__u16 csum;
	__s64 tail;

	if (max <= ip_hdrs || p->l4_off > ICMP_MAX_OFF || msg > 0xffff)
		return -1;
	keep = (max - ip_hdrs) & ~7U;
	if (keep < ICMP_HLEN + quoted + 8 || keep >= msg)
		return -1;
	tail = icmpfit_tail_sum(ctx, p->l4_off + keep, msg - keep);
	if (tail < 0 || bpf_xdp_load_bytes(ctx, p->l4_off + 2, &csum, 2))
		return -1;
	/* the removed bytes' sum moves into the checksum (and, for ICMPv6,
	 * the pseudo-header's length change: both in memory order) */
	csum = icmpfit_add(csum, (__u32)tail);
	if (p->family == XLB_AF_INET6)
		csum = icmpfit_add(csum, bpf_htons(msg - keep));
	if (bpf_xdp_store_bytes(ctx, p->l4_off + 2, &csum, 2) || icmpfit_ip_len(ctx, p, ip_hdrs + keep))
		return -1;
	old = (__u32)bpf_xdp_get_buff_len(ctx);
	if (bpf_xdp_adjust_tail(ctx, (int)(p->l3_off + ip_hdrs + keep) - (int)old))
		return -1;
	p->l3_len = ip_hdrs + keep;
	stats_count(XLB_STAT_ICMP_CUT);
	return 0;
}

/* icmpfit_fit: an ICMP error p for real r, outer bytes of encapsulation
 * in front of it (as xlb_send puts them): cut when it does not fit r's
 * egress (toobig_egress_mtu). 0, or XLB_STAT_DROP_TOO_BIG. */
static __always_inline int icmpfit_fit(struct xdp_md *ctx, struct pkt *p, const struct real_info *r,
				       const struct node_info *n, __u16 outer)
{
	__u32 egress = toobig_egress_mtu(ctx, p, r, n, outer);

	if (!egress)
		return 0;
	if (egress <= outer || icmpfit_cut(ctx, p, egress - outer))
		return XLB_STAT_DROP_TOO_BIG;
	return 0;
}
