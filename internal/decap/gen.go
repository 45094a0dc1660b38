package decap

// bpf2go compiles bpf/decap.c into decap_bpfel.o and writes decap_bpfel.go;
// both are committed. Little-endian only (x86-64, arm64). The object does
// not depend on the checkout path: bpf2go itself passes clang
// -fdebug-prefix-map=<abs bpf dir>=../../bpf and -fdebug-compilation-dir .
// and strips DWARF (BTF stays, naming ./../../bpf/decap*.[ch]). It does
// depend on the clang version (14, as scripts/deps.sh installs).
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type decap_counter decap ../../bpf/decap.c -- -I/usr/include/x86_64-linux-gnu
