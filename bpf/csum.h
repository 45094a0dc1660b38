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

/* csum_fold64: the checksum field of a sum of 32-bit words (as loaded). */
static __always_inline __u16 csum_fold64(__u64 sum)
{
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* csum_ipv4_words is the checksum of a 20-byte header given as its five
 * 32-bit words (little-endian loads of the wire bytes, check = 0), summed
 * from registers instead of being read back from the packet. The sum is in
 * memory order, so the result is stored as is. The one's complement sum of
 * the ten 16-bit words equals the folded sum of the five 32-bit ones, as
 * 2^16 = 2^32 = 1 (mod 2^16 - 1). */
static __always_inline __u16 csum_ipv4_words(__u32 w0, __u32 w1, __u32 w2, __u32 w3, __u32 w4)
{
	return csum_fold64((__u64)w0 + w1 + w2 + w3 + w4);
}

/* csum_replace16: checksum check after a 16-bit word changed from old to
 * new (all three as loaded from memory). RFC 1624 eqn. 3, except that a
 * result of 0x0000 is written as 0xffff (the other zero): eqn. 3 yields
 * 0x0000 also when the data sum to 0 (an all-zero echo reply), where only
 * 0xffff verifies; 0xffff verifies whenever 0x0000 does. */
static __always_inline __u16 csum_replace16(__u16 check, __u16 old, __u16 new)
{
	__u16 c = csum_fold((__u32)(__u16)~check + (__u16)~old + new);

	return c ? c : 0xffff;
}
