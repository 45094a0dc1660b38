/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* synctypes.h: connection sync's part of the Go <-> BPF ABI (types.h,
 * which includes it where the section stood): the records the forwarder
 * reports, what xlbd installs, and their counters. */
#pragma once

/* --- connection sync (sync.h) --- */

/* Why a record was sent. Append only. */
enum xlb_sync_kind {
	XLB_SYNC_EV_NEW = 1,     /* a new tracked flow */
	XLB_SYNC_EV_STATE = 2,   /* its conntrack state changed */
	XLB_SYNC_EV_REFRESH = 3, /* still live: keeps the peers' entry alive */
	XLB_SYNC_EV_TEMPLATE = 4, /* a persistence template made or held on (persist.h):
				   * hash is the client's source hash, hold its ticks to live */
	/* A NAT flow recorded for its replies (nat.h): two log slots. The
	 * first: hash = client port | VIP port << 16 (network order, as
	 * loaded), rid the real; the second: the client's address (16 bytes,
	 * IPv4 in the first 4), nothing else. */
	XLB_SYNC_EV_NAT = 5,
	/* An lblc/lblcr entry made, changed, or used past a refresh boundary
	 * (lblc.h): hash = the service id, rid one of its backends; xlbd
	 * reads the entry (the destination is the service's VIP address). */
	XLB_SYNC_EV_LBLC = 6,
};

/* xlb_sync_conf value (one element), written by xlbd. */
struct sync_conf {
	__u32 enabled;       /* 0: no record is made */
	__u32 refresh_shift; /* a live flow is reported every 2^shift ticks */
};

/* xlb_sync_log record: one decision. rid is this node's real id (xlbd
 * turns it into the (VIP, backend) pair peers understand). */
struct sync_event {
	__u64 hash;  /* the flow hash v1 */
	__u32 rid;
	__u8 state;  /* enum xlb_ct_state */
	__u8 kind;   /* enum xlb_sync_kind */
	__u16 hold;  /* XLB_SYNC_EV_TEMPLATE: ticks the template lives on; else 0 */
};

/* xlb_sync_apply's input: the frame's data is an array of these (at most
 * XLB_SYNC_APPLY_MAX). hbits: how many low bits of hash are known (a bulk
 * copy knows the tag and the sender's bucket bits only); an entry whose
 * bucket this node cannot derive is skipped. */
struct sync_install {
	__u64 hash;
	__u32 rid;  /* this node's real id */
	__u16 age;  /* conntrack ticks since the sender last saw the flow */
	__u8 state; /* enum xlb_ct_state, never FREE */
	__u8 hbits;
	__u8 proto; /* IPPROTO_TCP or IPPROTO_UDP: the timeout of an entry found */
	__u8 kind;  /* 0: a flow; XLB_SYNC_EV_TEMPLATE: a persistence template of
		     * the client whose source hash is hash, held age ticks from now
		     * (state, hbits and proto unused) */
	__u8 pad[6];
};

/* xlb_sync_apply_state's input: the frame's data is an array of these (at
 * most XLB_SYNC_STATE_MAX), peers' NAT flows and lblc entries in this
 * node's terms (sync.h). */
struct sync_state {
	__u8 kind;     /* XLB_SYNC_EV_NAT or XLB_SYNC_EV_LBLC */
	__u8 family;   /* enum xlb_family of addr (and vip) */
	__u8 proto;    /* NAT: IPPROTO_TCP or IPPROTO_UDP */
	__u8 pad;
	__be16 cport;  /* NAT: the client's port */
	__be16 vport;  /* NAT: the port the client sent to */
	__u32 age;     /* ticks since the sender last recorded the flow (NAT), used the entry (LBLC) */
	__u32 mod_age; /* LBLC: ticks since the entry's backends last changed */
	__u32 svc_id;  /* LBLC: this node's service id */
	__u32 pad2;
	__u8 addr[16]; /* NAT: the client's address; LBLC: the destination */
	__u8 vip[16];  /* NAT: the VIP address */
	__u32 rid[XLB_LBLC_SET_MAX]; /* NAT: rid[0], the real; LBLC: the backends, 0: none */
};

/* xlb_sync_stats indexes (per CPU). Append only. */
enum xlb_sync_stat {
	XLB_SYNC_STAT_UNUSED = 0,  /* (records made: counted by xlbd as it reads them) */
	XLB_SYNC_STAT_LOST,        /* buffer full or busy: record lost (the flow is unprotected) */
	XLB_SYNC_STAT_APPLIED,     /* installs written into the connection table */
	XLB_SYNC_STAT_KEPT,        /* installs skipped: this node tracks the flow live to another real */
	XLB_SYNC_STAT_SKIPPED,     /* installs skipped: bucket unknown (hbits), bad state, or the
				    * store lost its compare-and-swap three times */
	XLB_SYNC_STAT__MAX,
};

enum xlb_sync_const {
	XLB_SYNC_APPLY_MAX = 128, /* sync_install records per xlb_sync_apply run */
	XLB_SYNC_REFRESH_SHIFT = 6, /* default: 64 ticks, ~17 s */
	XLB_SYNC_KEEP_TICKS = 4,    /* ~1 s: see sync_install_one */
	XLB_SYNC_SLOTS = 1 << 15,   /* records per CPU in xlb_sync_log */
	XLB_SYNC_STATE_MAX = 32,    /* sync_state records per xlb_sync_apply_state run */
};

/* xlb_sync_cpus value: one CPU's position in xlb_sync_log, a cache line
 * of its own. */
struct sync_cpu {
	__u64 head; /* records this CPU wrote: the next goes to slot head % XLB_SYNC_SLOTS */
	__u64 tail; /* records xlbd took (written by xlbd only) */
	__u64 busy; /* a run on this CPU is writing a record */
	__u64 pad[5];
};

XLB_ABI_SIZE(sync_conf, 8);
XLB_ABI_SIZE(sync_event, 16);
XLB_ABI_SIZE(sync_install, 24);
XLB_ABI_SIZE(sync_cpu, 64);
XLB_ABI_SIZE(sync_state, 88);
