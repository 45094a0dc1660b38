package datapath

//go:generate go run ../sched/gen
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type vip_key -type vip_info -type vip_bucket -type vip_ent -type real_info -type node_info -type xlb_counters -type xlb_global -type xlb_stat -type ct_bucket -type xlb_encap -type xlb_family -type xlb_ct_state -type xlb_real_flags -type xlb_node_flags -type frag_conf -type frag_key -type frag_entry -type frag_event -type xlb_vip_flags -type xlb_vip_addr_flags -type xlb_frag_state -type xlb_frag_event_kind -type trace_marker -type trace_event -type xlb_ct_layout -type xlb_vip_match -type xlb_trace_const -type xlb_probe_ct -type xlb_flood_kind -type sync_conf -type sync_event -type sync_install -type sync_state -type xlb_sync_kind -type xlb_sync_stat -type xlb_sync_const -type svc_sched -type sched_ent -type xlb_sched -type real_conns -type sweep_ctx -type xlb_persist_layout -type xlb_stage -type defence_state -type xlb_defence_mode xlb ../../bpf/xlb.c -- -I/usr/include/x86_64-linux-gnu

// The upgrade variant (bpf/xlb_variant.c: the forwarder with other
// instructions and the same maps), linked instead of the normal one by
// `go build -tags xlb_variant` (variant.go). Upgrade tests use it.
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -tags xlb_variant -no-global-types xlbvariant ../../bpf/xlb_variant.c -- -I/usr/include/x86_64-linux-gnu -DXLB_BUILD_VARIANT=1
