/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* csum.h: Internet checksum of a freshly written IPv4 header. */
#pragma once

#include <linux/ip.h>
#include <linux/types.h>

static __always_inline __u16 csum_fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* csum_ipv4 sums the 20-byte header (check must be 0). The sum is taken in
 * memory order, so the result is stored as is. */
static __always_inline __u16 csum_ipv4(const struct iphdr *ip)
{
	const __u16 *w = (const __u16 *)ip;
	__u32 sum = 0;

#pragma unroll
	for (int i = 0; i < IPV4_HLEN / 2; i++)
		sum += w[i];
	return csum_fold(sum);
}
