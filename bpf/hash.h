/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* hash.h: flow hash v1, the one function that maps a 5-tuple to a Maglev
 * slot and a conntrack bucket and tag. Its Go twin is internal/maglev
 * (FlowHash); docs/ARCHITECTURE.md defines it and testdata/ binds both. */
#pragma once

#include <linux/types.h>

#define HASH_K 0x9E3779B97F4A7C15ULL
#define HASH_SEED 0x5851F42D4C957F2DULL

static __always_inline __u64 hash_mix(__u64 h, __u64 v)
{
	h ^= v;
	h *= HASH_K;
	h ^= h >> 32;
	return h;
}

static __always_inline __u64 hash_fmix64(__u64 x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

/* hash_flow4 and hash_flow6 take the words as loaded from the wire
 * (little-endian loads of network-order bytes). ports = sport | dport << 16
 * as one 32-bit load of the L4 header's first four bytes. */
static __always_inline __u64 hash_flow4(__u32 src, __u32 dst, __u32 ports, __u8 proto)
{
	__u64 h = hash_mix(HASH_SEED, (__u64)src | (__u64)dst << 32);

	h = hash_mix(h, (__u64)ports | (__u64)proto << 32);
	return hash_fmix64(h);
}

static __always_inline __u64 hash_flow6(const __u64 *src, const __u64 *dst, __u32 ports,
					__u8 proto)
{
	__u64 h = hash_mix(HASH_SEED, src[0]);

	h = hash_mix(h, src[1]);
	h = hash_mix(h, dst[0]);
	h = hash_mix(h, dst[1]);
	h = hash_mix(h, (__u64)ports | (__u64)proto << 32);
	return hash_fmix64(h);
}

/* Maglev slot in [0, m): multiply-shift of the high 32 bits. */
static __always_inline __u32 hash_slot(__u64 h, __u32 m)
{
	return ((h >> 32) * (__u64)m) >> 32;
}
