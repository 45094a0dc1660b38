// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* gen_tput.c: the throughput harness's programs (bench/throughput). Not
 * part of the forwarder.
 *
 *   gen_tx       the traffic generator, run by BPF_PROG_TEST_RUN with
 *                BPF_F_TEST_XDP_LIVE_FRAMES on the generator's veth end:
 *                writes the template frame with this packet's 5-tuple and
 *                answers XDP_TX, which the kernel turns into a transmit on
 *                that veth, i.e. a receive on its peer (the node's
 *                interface, where the forwarder runs)
 *   gen_count    the receiver, attached (native XDP) to the generator's
 *                veth end: the forwarder's XDP_TX comes back there; it
 *                checks each frame against the forwarding method under
 *                test (rx_method), counts it, and drops it
 *   gen_reflect  XDP_TX and nothing else: stands in for the forwarder to
 *                measure what the harness alone costs
 *   gen_sink     the SYN flood's sink (throughput.SYNFlood, e2e): on the
 *                device whose peer is a lab node, it drops and counts the
 *                node's encapsulated flood and passes everything else
 *
 * Live frames come from a page pool the kernel does not re-initialise when
 * a page is recycled, and the forwarder overwrote the head of the frame
 * (encapsulation), so the generator writes the whole template every time. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "gen_tput.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* BTF anchors for bpf2go. */
const enum gen_mode *gen_anchor_mode __attribute__((unused));
const enum gen_method *gen_anchor_method __attribute__((unused));

/* Generator state. Plain globals (mmapped .bss): the harness changes them
 * between runs without reloading. The generator runs on one CPU at a time. */
__u8 gen_tmpl[GEN_FRAME]; /* the frame, with flow 0's 5-tuple */
__u32 gen_how;            /* enum gen_mode */
__u32 gen_flows;          /* GEN_CYCLE_FLOWS: number of flows */
__u32 gen_base;           /* source address of flows 0 .. 32767 (host order) */
__u32 gen_stamp;          /* nonzero: write bpf_ktime_get_ns() at GEN_OFF_STAMP */
__u32 gen_reply;          /* nonzero: flow i is the destination (a reply to client i) */
__u32 gen_csum;           /* nonzero: keep the IPv4 and TCP checksums valid (see csum_fix) */
__u32 gen_pos;            /* GEN_CYCLE_FLOWS: the next flow */
__u64 gen_seq;            /* packets generated (all runs); GEN_NEW_FLOWS: the next flow */

/* What the receiver accepts as "encapsulated toward a backend" (network
 * order; set by the loader). */
volatile const __u32 rx_node = 0;   /* outer source: the node's address */
volatile const __u32 rx_net = 0;    /* backend prefix ... */
volatile const __u32 rx_mask = 0;   /* ... and its mask */
volatile const __u32 rx_vip = 0;    /* inner destination */
volatile const __u16 rx_port = 0;   /* inner destination port */

/* The method under test (enum gen_method) and its ports (network order).
 * Plain globals: the harness switches methods between runs. */
__u32 rx_method;
__u16 rx_gue_port;
__u16 rx_nat_port;

/* Set rx_want to get the next encapsulated frame's first ENC_LEN bytes in
 * rx_sample (the harness checks one whole frame in Go). */
__u32 rx_want;
__u8 rx_sample[88];

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gen_stats);
} gen_rx SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, GEN_BACKENDS);
	__type(key, __u32);
	__type(value, __u64);
} gen_backend SEC(".maps");

/* Stamped frames' one-way times (ns): sample i at lat_samples[i mod
 * GEN_LAT_SAMPLES], lat_next the next i. Probes are sent one at a time. */
__u64 lat_samples[GEN_LAT_SAMPLES];
__u32 lat_next;

static __always_inline void flow_fields(__u8 *data, __u32 i)
{
	__u32 saddr = bpf_htonl(gen_base + (i >> 15));
	__u16 sport = bpf_htons(0x8000 | (i & 0x7fff));

	if (gen_reply) {
		__builtin_memcpy(data + GEN_OFF_DADDR, &saddr, 4);
		__builtin_memcpy(data + GEN_OFF_DPORT, &sport, 2);
		return;
	}
	__builtin_memcpy(data + GEN_OFF_SADDR, &saddr, 4);
	__builtin_memcpy(data + GEN_OFF_SPORT, &sport, 2);
}

/* csum_apply adds d (a sum of 16-bit words) to the one's complement sum
 * that checksum check closes, RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'). */
static __always_inline __u16 csum_apply(__u16 check, __u32 d)
{
	__u32 s = (__u16)~check + d;

	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return ~s;
}

/* csum_fix updates the template's checksums (valid for the template's own
 * source address and port) for the source address and port flow_fields
 * wrote, so that a receiving stack accepts the frame (the forwarder does
 * not need it; a backend does). Needs a template of IPv4 without options
 * and TCP, or UDP without a checksum (0), and no stamp (the payload is not
 * covered). */
static __always_inline void csum_fix(__u8 *data)
{
	__u16 *o = (__u16 *)(gen_tmpl + GEN_OFF_SADDR), *n = (__u16 *)(data + GEN_OFF_SADDR);
	__u32 d = (__u16)~o[0] + (__u16)~o[1] + n[0] + n[1];
	__u16 *ip = (__u16 *)(data + GEN_OFF_IPCSUM), *tcp = (__u16 *)(data + GEN_OFF_TCPCSUM);

	*ip = csum_apply(*ip, d);
	if (gen_tmpl[14 + 9] != 6)
		return; /* UDP: the template's checksum is 0 (none) */
	d += (__u16)~*(__u16 *)(gen_tmpl + GEN_OFF_SPORT) + *(__u16 *)(data + GEN_OFF_SPORT);
	*tcp = csum_apply(*tcp, d);
}

SEC("xdp")
int gen_tx(struct xdp_md *ctx)
{
	__u8 *data = (void *)(long)ctx->data;
	__u8 *data_end = (void *)(long)ctx->data_end;
	__u64 seq = gen_seq;

	if (data + GEN_FRAME > data_end)
		return XDP_ABORTED;
	__builtin_memcpy(data, gen_tmpl, GEN_FRAME);
	gen_seq = seq + 1;
	if (gen_how == GEN_NEW_FLOWS) {
		flow_fields(data, (__u32)seq);
	} else if (gen_how == GEN_CYCLE_FLOWS) {
		__u32 i = gen_pos;

		gen_pos = i + 1 >= gen_flows ? 0 : i + 1;
		flow_fields(data, i);
	}
	if (gen_csum && gen_how != GEN_CONSTANT)
		csum_fix(data);
	if (gen_stamp) {
		__u64 now = bpf_ktime_get_ns();

		__builtin_memcpy(data + GEN_OFF_STAMP, &now, 8);
	}
	return XDP_TX;
}

/* Offsets in a frame the forwarder encapsulated: Ethernet, outer IPv4 (no
 * options), GRE base header, then the generated frame from its IPv4 header. */
#define ENC_IP 14
#define ENC_GRE (ENC_IP + 20)
#define ENC_INNER (ENC_GRE + 4)
#define ENC_LEN (ENC_INNER + GEN_FRAME - 14)
#define ENC_GUE_INNER (ENC_GRE + 8) /* GUE: a UDP header in GRE's place */
_Static_assert(ENC_LEN == sizeof(rx_sample), "rx_sample holds one encapsulated frame");

static __always_inline void rx_time(__u8 *stamp, struct gen_stats *s)
{
	__u64 t0, now, d;

	if (!gen_stamp)
		return;
	__builtin_memcpy(&t0, stamp, 8);
	now = bpf_ktime_get_ns();
	if (!t0 || now < t0)
		return;
	d = now - t0;
	s->lat_n++;
	s->lat_sum += d;
	lat_samples[lat_next & (GEN_LAT_SAMPLES - 1)] = d;
	lat_next++;
}

/* rx_tunnel: a frame of tunnel method m (GRE or GUE, inner_off the
 * inner IPv4 header's offset) from the node to a backend, carrying the
 * generated packet. Returns the backend's last address byte, or -1. */
static __always_inline int rx_tunnel(__u8 *data, __u8 *data_end, __u32 m, __u32 inner_off)
{
	__u8 *in = data + inner_off;
	__u32 dst;

	if (in + GEN_FRAME - 14 > data_end || data[ENC_IP] != 0x45 ||
	    data[ENC_IP + 9] != (m == GEN_M_GRE ? 47 : 17))
		return -1;
	__builtin_memcpy(&dst, data + ENC_IP + 16, 4);
	if (*(__u32 *)(data + ENC_IP + 12) != rx_node || (dst & rx_mask) != rx_net || in[0] != 0x45 ||
	    in[9] != 6 || *(__u32 *)(in + 16) != rx_vip || *(__u16 *)(in + 22) != rx_port)
		return -1;
	if (m == GEN_M_GRE && *(__u32 *)(data + ENC_GRE) != bpf_htonl(0x0800))
		return -1;
	if (m == GEN_M_GUE && *(__u16 *)(data + ENC_GRE + 2) != rx_gue_port)
		return -1;
	return bpf_ntohl(dst) & (GEN_BACKENDS - 1);
}

/* rx_backend: the frame as method rx_method sends it to a backend
 * (enum gen_method). Returns the backend's last address byte, or -1; *in
 * is the client's packet's IPv4 header (for the stamp). */
static __always_inline int rx_backend(__u8 *data, __u8 *data_end, __u8 **in)
{
	__u8 *ip = data + 14;
	__u32 dst;

	switch (rx_method) {
	case GEN_M_GRE:
		*in = data + ENC_INNER;
		return rx_tunnel(data, data_end, GEN_M_GRE, ENC_INNER);
	case GEN_M_GUE:
		*in = data + ENC_GUE_INNER;
		return rx_tunnel(data, data_end, GEN_M_GUE, ENC_GUE_INNER);
	}
	*in = ip;
	if (ip[0] != 0x45 || ip[9] != 6)
		return -1;
	if (rx_method == GEN_M_DR) {
		if (data[0] != GEN_DR_MAC0 || data[1] != GEN_DR_MAC1 || data[2] != GEN_DR_MAC2 ||
		    data[3] != GEN_DR_MAC3 || data[4] != GEN_DR_MAC4 ||
		    *(__u32 *)(ip + 16) != rx_vip || *(__u16 *)(ip + 22) != rx_port)
			return -1;
		return data[5];
	}
	if (rx_method == GEN_M_NAT_REPLY) {
		__builtin_memcpy(&dst, ip + 16, 4);
		if (*(__u32 *)(ip + 12) != rx_vip || *(__u16 *)(ip + 20) != rx_port || (dst & rx_mask) == rx_net)
			return -1;
		return 1; /* the replies all come from backend 1 */
	}
	if (rx_method != GEN_M_NAT)
		return -1;
	__builtin_memcpy(&dst, ip + 16, 4);
	if ((dst & rx_mask) != rx_net || *(__u16 *)(ip + 22) != rx_nat_port)
		return -1;
	return bpf_ntohl(dst) & (GEN_BACKENDS - 1);
}

SEC("xdp")
int gen_count(struct xdp_md *ctx)
{
	__u8 *data = (void *)(long)ctx->data;
	__u8 *data_end = (void *)(long)ctx->data_end;
	__u32 zero = 0, b;
	struct gen_stats *s = bpf_map_lookup_elem(&gen_rx, &zero);
	__u8 *in = data;
	__u64 *n;
	int be;

	if (!s)
		return XDP_DROP;
	s->rx++;
	if (data + GEN_FRAME > data_end || *(__u16 *)(data + 12) != bpf_htons(0x0800))
		goto bad;
	be = rx_backend(data, data_end, &in);
	if (be >= 0) {
		s->encap++;
		s->bytes += data_end - data;
		b = be & (GEN_BACKENDS - 1);
		n = bpf_map_lookup_elem(&gen_backend, &b);
		if (n)
			(*n)++;
		if (rx_want && rx_method == GEN_M_GRE && data + ENC_LEN <= data_end) {
			__builtin_memcpy(rx_sample, data, ENC_LEN);
			rx_want = 0;
		}
		if (in + GEN_OFF_STAMP - 14 + 8 <= data_end)
			rx_time(in + GEN_OFF_STAMP - 14, s);
		return XDP_DROP;
	}
	if (data[14] == 0x45 && data[14 + 9] == 6 && *(__u32 *)(data + 14 + 16) == rx_vip) {
		s->plain++;
		rx_time(data + GEN_OFF_STAMP, s);
		return XDP_DROP;
	}
bad:
	s->bad++;
	return XDP_DROP;
}

SEC("xdp")
int gen_reflect(struct xdp_md *ctx)
{
	return XDP_TX;
}

/* gen_sink's flood: the inner IPv4 source prefix (network order), and the
 * switch (0: pass everything). Plain globals: set while attached. */
__u32 sink_net;
__u32 sink_mask;
__u32 sink_on;

/* gen_sink: a frame GRE/IPv4 (no options, base GRE header) carrying IPv4
 * from sink_net/sink_mask is dropped and counted (gen_rx.encap); the rest
 * goes on (XDP_PASS). */
SEC("xdp")
int gen_sink(struct xdp_md *ctx)
{
	__u8 *data = (void *)(long)ctx->data;
	__u8 *data_end = (void *)(long)ctx->data_end;
	__u32 zero = 0, src;
	struct gen_stats *s;
	__u8 *in;

	if (!sink_on || data + ENC_INNER + 20 > data_end)
		return XDP_PASS;
	if (*(__u16 *)(data + 12) != bpf_htons(0x0800) || data[ENC_IP] != 0x45 || data[ENC_IP + 9] != 47 ||
	    *(__u32 *)(data + ENC_GRE) != bpf_htonl(0x0800))
		return XDP_PASS;
	in = data + ENC_INNER;
	__builtin_memcpy(&src, in + 12, 4);
	if (in[0] != 0x45 || (src & sink_mask) != sink_net)
		return XDP_PASS;
	s = bpf_map_lookup_elem(&gen_rx, &zero);
	if (s)
		s->encap++;
	return XDP_DROP;
}
