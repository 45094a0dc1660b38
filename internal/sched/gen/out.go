package main

import (
	"bytes"
	"fmt"
	"go/format"

	"github.com/xlbproject/xlb/internal/sched"
)

// dispatch is one family's dispatch function: a switch over its kinds,
// each case calling the kind's function call (a format with %s for the
// file's base name).
type dispatch struct {
	f        sched.Family
	doc, sig string
	on, call string
	def      string
	walks    bool // first the walks of the family's kinds (least)
}

var dispatches = []dispatch{
	{sched.Hash, "sched_hash: the hash whose slot of the Maglev table a hash scheduler reads (h: the 5-tuple's).",
		"static __always_inline __u64 sched_hash(const struct svc_sched *s, const struct pkt *p, __u64 h)",
		"s->kind", "sched_%s_hash(s, p, h)", "h", false},
	{sched.Cursor, "sched_cursor_pick: a cursor scheduler's entry of s's n for the service's cursor c.",
		"static __always_inline __u32 sched_cursor_pick(const struct svc_sched *s, __u32 n, __u64 c)",
		"s->kind", "sched_%s_pick(s, n, c)", "0", false},
	{sched.Least, "sched_least_entry: a least scheduler's test of entry k (sched/common.h).",
		"static __always_inline long sched_least_entry(const __u32 kind, struct sched_least_walk *wk,\n\t\t\t\t\t      const struct svc_sched *s, __u32 k, __u32 rid,\n\t\t\t\t\t      __u64 a, __u64 in)",
		"kind", "sched_%s_entry(wk, s, k, rid, a, in)", "1", false},
	{sched.Least, "sched_least: the walk of s's n entries of a least scheduler.",
		"static __always_inline __u32 sched_least(const struct svc_sched *s, __u32 n)",
		"s->kind", "sched_%s_walk(s, n)", "0", true},
	{sched.Locality, "sched_locality_pick: a locality scheduler's decision on a live entry e (lblc.h).",
		"static __always_inline __u32 sched_locality_pick(const struct svc_sched *s, struct lblc_ent *e,\n\t\t\t\t\t\t struct lblc_walk *wk, __u64 now)",
		"s->kind", "sched_%s_pick(s, e, wk, now)", "0", false},
}

func dispatchH() ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */\n/* %s */\n", header)
	b.WriteString("/* sched/dispatch.h: which function of which scheduler file each kind\n * runs, by family (internal/sched.Family). */\n#pragma once\n\n#include \"common.h\"\n")
	for _, s := range sched.Kinds() {
		fmt.Fprintf(&b, "#include \"%s.h\"\n", s.File)
	}
	for _, d := range dispatches {
		if d.walks { // each kind's walk has a callback of its own (sched_walk)
			for _, s := range ofFamily(sched.Least) {
				fmt.Fprintf(&b, "\nstatic long sched_%[1]s_chunk(__u64 i, void *wk)\n{\n\treturn sched_least_chunk(i, wk, %[2]s);\n}\n", s.File, enumName(s))
				fmt.Fprintf(&b, "\nstatic __attribute__((noinline)) __u32 sched_%[1]s_walk(const struct svc_sched *s, __u32 n)\n{\n\treturn sched_walk(s, n, sched_%[1]s_chunk);\n}\n", s.File)
			}
		}
		fmt.Fprintf(&b, "\n/* %s */\n%s\n{\n\tswitch (%s) {\n", d.doc, d.sig, d.on)
		for _, s := range ofFamily(d.f) {
			fmt.Fprintf(&b, "\tcase %s:\n\t\treturn "+d.call+";\n", enumName(s), s.File)
		}
		fmt.Fprintf(&b, "\t}\n\treturn %s;\n}\n", d.def)
	}
	return b.Bytes(), nil
}

func stateGo() ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "// %s\n\npackage state\n\n// Scheduler kinds: svc_sched.kind, the data plane's enum xlb_sched.\nconst (\n", header)
	for _, s := range sched.Kinds() {
		fmt.Fprintf(&b, "\tSched%s SchedKind = %d // %s: %s\n", s.Ident, s.Kind, s.Name, s.Doc)
	}
	fmt.Fprintf(&b, ")\n\n// SchedListMax is the most entries a list scheduler's List may hold.\nconst SchedListMax = %d\n", sched.ListMax)
	return format.Source(b.Bytes())
}

func configGo() ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "// %s\n\npackage config\n\n// Schedulers, as the file names them.\nconst (\n", header)
	for i := range sched.List {
		s := &sched.List[i]
		fmt.Fprintf(&b, "\t// Scheduler%s is %s: %s.\n\tScheduler%s Scheduler = %d\n", s.Ident, s.Name, s.Doc, s.Ident, i+1)
	}
	b.WriteString(")\n\nvar schedulerNames = []enumName[Scheduler]{\n")
	for i := range sched.List {
		s := &sched.List[i]
		fmt.Fprintf(&b, "\t{%q, Scheduler%s},\n", s.Name, s.Ident)
	}
	b.WriteString("}\n")
	return format.Source(b.Bytes())
}
