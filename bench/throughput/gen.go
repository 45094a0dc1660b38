package throughput

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type gen_mode -type gen_method -type gen_stats tput bpf/gen_tput.c -- -I/usr/include/x86_64-linux-gnu
