package datapath

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type vip_key -type vip_info -type vip_bucket -type vip_ent -type real_info -type node_info -type xlb_counters -type xlb_global -type xlb_stat -type ct_bucket -type xlb_encap -type xlb_family -type xlb_ct_state -type xlb_real_flags -type xlb_node_flags xlb ../../bpf/xlb.c -- -I/usr/include/x86_64-linux-gnu
