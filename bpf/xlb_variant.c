// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The upgrade variant of the forwarder (for the upgrade tests): bpf/xlb.c with the
 * same maps and different instructions, so that an upgrade to it really
 * replaces the attached program (another program tag) while every pinned
 * map stays compatible. Generated as the bpf2go ident xlbvariant with
 * -DXLB_BUILD_VARIANT=1 and linked into xlbd instead of the normal forwarder
 * by the Go build tag xlb_variant (internal/datapath/gen.go, variant.go).
 *
 * The difference is one check in front of parse_packet on a .rodata
 * constant. The loader freezes .rodata, so the verifier prunes the branch:
 * the variant forwards exactly like the normal build. xlb.c is included
 * unchanged, so the normal object is not affected by this file.
 *
 * The variant's second difference is its clock (XLB_CLOCK_NS, types.h):
 * the kernel's plus the offset in xlb_test_clock, which tests that run
 * days of connection tracking in minutes advance (the soak test). The
 * offset is 0 until a test writes it; xlbd built with the tag adds it to
 * the clock it hands the sweeps (internal/datapath/variant_on.go). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

static __always_inline __u64 variant_clock_ns(void);
#define XLB_CLOCK_NS() variant_clock_ns()

#include "consts.h"
#include "types.h"
#include "maps.h"
#include "parse.h"

/* xlb_test_clock: key 0 -> __u64 nanoseconds added to the clock of
 * conntrack, templates and lblc entries. Pinned like the other maps, so
 * the offset outlives a restart of xlbd; only ever moved forward. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} xlb_test_clock SEC(".maps");

static __always_inline __u64 variant_clock_ns(void)
{
	__u32 zero = 0;
	__u64 *off = bpf_map_lookup_elem(&xlb_test_clock, &zero);

	return bpf_ktime_get_coarse_ns() + (off ? *off : 0);
}

#ifndef XLB_BUILD_VARIANT
#error "build with -DXLB_BUILD_VARIANT=<n>"
#endif

volatile const __u32 xlb_build_variant = XLB_BUILD_VARIANT;

static __always_inline int variant_parse_packet(struct xdp_md *ctx, struct pkt *p)
{
	if (xlb_build_variant != XLB_BUILD_VARIANT)
		return PARSE_NOT_IP; /* never: .rodata is frozen */
	return parse_packet(ctx, p);
}

/* xlb.c's call of parse_packet becomes the check above (parse.h, already
 * included, is not read again). */
#define parse_packet variant_parse_packet
#include "xlb.c"
