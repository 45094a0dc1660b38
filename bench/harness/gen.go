package harness

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type lru_key -type lru_val -type ct_bucket -type xlb_global -type xlb_stat -type bench_flow_mode -type bench_ct_kind -type bench_stage bench bpf/bench.c -- -I../../bpf -I/usr/include/x86_64-linux-gnu
