# xlb — see README.md. Every target that needs tools installs them first.
GO      ?= go
BIN     := bin
CMDS    := xlbd xlbctl xlb-decap xlb-lab
GOFLAGS ?=
export GOFLAGS
# The version every binary's --version prints (internal/version); empty
# when there is no git, and the binaries then say they carry none.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
LDFLAGS := -X github.com/xlbproject/xlb/internal/version.Version=$(VERSION)

.PHONY: all deps generate proto build check demo-kubernetes test soak test-unit test-packages test-e2e-a test-e2e-b test-e2e-c test-alone test-smoke test-beside fuzz demo bench performance check-generated clean dist install deb kube-bin

all: build

deps:
	@./scripts/deps.sh

# Regenerates the BPF objects, their Go bindings and the gRPC API code
# (all committed).
generate: deps
	$(GO) generate ./...
	@$(MAKE) --no-print-directory proto

# The real kube-apiserver and etcd that the Kubernetes tests run
# (internal/testenv/kubeenv), built from their Go modules (tools/kube) into
# a cache keyed by version: $XLB_KUBE_CACHE, /var/cache/xlb/kube by
# default. A no-op when both are there; the first build takes about 13
# minutes on two cores, once per machine.
kube-bin:
	@GO=$(GO) ./scripts/kube-bin.sh

# The API's Go code from api/xlb/v1/xlb.proto. protoc comes from apt
# (scripts/deps.sh); the plugins are go.mod tools, so their versions are pinned.
PROTOS := api/xlb/v1/xlb.proto
proto:
	protoc -I api -I /usr/include \
		--plugin=protoc-gen-go=$$($(GO) tool -n protoc-gen-go) \
		--plugin=protoc-gen-go-grpc=$$($(GO) tool -n protoc-gen-go-grpc) \
		--go_out=api --go_opt=paths=source_relative \
		--go-grpc_out=api --go-grpc_opt=paths=source_relative \
		$(PROTOS)

# bin/xlbd-variant is xlbd with the upgrade variant of the forwarder
# (bpf/xlb_variant.c): the e2e restart tests run it beside bin/xlbd.
# bin/xlbd-crash is xlbd with crash points (internal/crashpoint: it kills
# itself at the point its arm file names): e2e's crash tests run it. No
# other build has them.
build: deps
	@mkdir -p $(BIN)
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ $(addprefix ./cmd/,$(CMDS))
	$(GO) build -tags xlb_variant -ldflags '$(LDFLAGS)' -o $(BIN)/xlbd-variant ./cmd/xlbd
	$(GO) build -tags xlb_crashpoints -ldflags '$(LDFLAGS)' -o $(BIN)/xlbd-crash ./cmd/xlbd

# The inner loop (minutes): vet, the unit tests and the BPF_PROG_TEST_RUN
# fixtures, then the generated-file check. -short leaves out every test
# that builds network namespaces, veths or labs (testenv.RequireNetns).
# Needs root for the fixtures.
check:
	@./scripts/phases.sh "make check" \
		vet "$(GO) vet ./..." \
		unit "$(GO) test -count=1 -short -timeout 10m ./..." \
		generated "$(MAKE) --no-print-directory check-generated"

# Every test, phase by phase: scripts/phases.sh announces each phase and
# prints their times at the end. The binaries are built once (e2e and lab
# run bin/'s), and so are the API server and etcd of the Kubernetes tests
# when their cache lacks them (kube-bin). Lanes run side by side where they share nothing and do
# not starve each other: the packages other than e2e two at a time beside
# make fuzz (their namespaces are anonymous or randomly named, their pin
# directories random), then e2e in three groups (every test builds its own
# lab: a random namespace prefix, its own pins, daemons, ports and etcd).
# Each e2e test starts xlbd, whose forwarder the kernel verifies (0.7 s of
# CPU): beside the CPU-bound lanes starts missed the tests' 20 s deadlines
# on two cores. Three groups did too while each start also read the
# reals' arrays one entry at a time (2.3 s of CPU); two groups left the
# CPUs a third idle once it read them in batches. The "alone" phase runs
# what measures or floods and wants the machine to itself, but for the
# packaging tests, which run beside the bench smoke on the CPU its
# measurements leave (TEST_BESIDE).
test:
	@./scripts/phases.sh "make test" \
		build "$(MAKE) --no-print-directory build" \
		kube-bin "$(MAKE) --no-print-directory kube-bin" \
		vet "$(GO) vet ./..." \
		packages "$(MAKE) --no-print-directory -j2 test-packages fuzz" \
		e2e "$(MAKE) --no-print-directory -j3 test-e2e-a test-e2e-b test-e2e-c" \
		alone "$(MAKE) --no-print-directory test-alone"

TEST_TIMEOUT ?= 30m
# TEST_ALONE: packages that want the machine to themselves (the bench
# smoke run has deadlines); E2E_ALONE: e2e's floods, which time every
# message, and the defence modes' flood; E2E_A, E2E_B and E2E_C split the rest of e2e into three groups
# of about equal time (156, 152 and 140 s of the 449 s measured two groups
# side by side): A to M; N to S but TestSoak and TestSync*; TestSoak,
# TestSync* and T to Z. The crash tests (16 and 23 s alone) go one to B,
# one to C.
TEST_ALONE ?= ./bench/report
# TEST_BESIDE: packages that run beside TEST_ALONE on the CPU it leaves
# (BESIDE_CPU; the bench pins its measurements to the last CPU): the
# packaging tests, which compress and build and measure nothing.
TEST_BESIDE ?= ./deploy
BESIDE_CPU  ?= 0
# TEST_FIRST: the longest packages of the lane (datapath 195 s, then
# bench/harness 110 s, bgp, lab and bench/throughput near 30 s each),
# listed first so that go test starts them first: started last, datapath
# ran alone for the lane's last minute with one CPU idle.
# TEST_VARIANT: the datapath tests of the test variant's forwarder
# (-tags xlb_variant: bpf/xlb_variant.c), whose clock a test moves.
TEST_VARIANT ?= ^TestVariant
TEST_FIRST ?= ./internal/datapath ./bench/harness ./internal/bgp ./lab ./bench/throughput ./internal/clusterconfig
E2E_ALONE  ?= ^(TestSYNFloodKeepsEstablished|TestACKFloodKeepsEstablished|TestUDPFloodKeepsEstablished|TestDefenceModesUnderFlood)$$
# TestSoak (no XLB_SOAK: 45 s of traffic, about 80 s in all) runs by make
# soak only (neither S[^oy] nor Sy matches it): a loaded run still finds,
# now and then, one UDP flow alternating between two live backends for a
# few seconds (two ways of one flow on two CPUs after a contested move,
# which a sync install rewrites one of, is the suspect).
E2E_A      ?= ^Test([ABD-M]|C[^r])
E2E_B      ?= ^Test([N-R]|S[^oy]|CrashKills)
E2E_C      ?= ^Test(Sy|[T-Z]|CrashAfter)
test-packages:
	$(GO) test -count=1 -p 2 -timeout $(TEST_TIMEOUT) $(TEST_FIRST) $$($(GO) list ./... | grep -v -e '/e2e$$' $(addprefix -e ,$(patsubst ./%,'/%$$',$(TEST_ALONE) $(TEST_BESIDE) $(TEST_FIRST))))
	$(GO) test -count=1 -tags xlb_variant -timeout $(TEST_TIMEOUT) -run '$(TEST_VARIANT)' ./internal/datapath
test-e2e-a:
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) -run '$(E2E_A)' -skip '$(E2E_ALONE)' ./e2e
test-e2e-b:
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) -run '$(E2E_B)' -skip '$(E2E_ALONE)' ./e2e
test-e2e-c:
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) -run '$(E2E_C)' -skip '$(E2E_ALONE)' ./e2e
test-alone:
	$(MAKE) --no-print-directory -j2 test-smoke test-beside
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) -run '$(E2E_ALONE)' ./e2e
test-smoke:
	$(GO) test -count=1 -p 1 -timeout $(TEST_TIMEOUT) $(TEST_ALONE)
test-beside:
	taskset -c $(BESIDE_CPU) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(TEST_BESIDE)

# The soak (e2e/soak_test.go): two nodes with connection sync under mixed
# TCP and UDP traffic for SOAK, with config changes, health flaps, daemon
# restarts and the data plane's clock (xlbd-variant's test clock) past the
# conntrack stamp's wrap; it checks breaks, counters, the return to empty
# tables and bounded memory, and writes bench/out/soak (samples.csv,
# summary.json, soak.png).
SOAK         ?= 1h
SOAK_TIMEOUT ?= 3h
soak: build
	XLB_SOAK=$(SOAK) $(GO) test -count=1 -v -timeout $(SOAK_TIMEOUT) -run '^TestSoak$$' ./e2e

# Fuzzing, bounded: the packet fuzzer at its full size
# (10 M random and mutated packets through the loaded forwarder), then the
# native Go fuzzers of the config decoder, of its fast YAML reader against
# yaml.v3, of the API's request decoding, of the API's frame describer and
# of the sync message decoder for FUZZTIME each (plain `go test` runs only
# their seeds).
FUZZTIME ?= 30s
fuzz:
	XLB_FUZZ_PACKETS=10000000 $(GO) test -count=1 -run '^TestPacketFuzz$$' -v ./internal/datapath
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) -parallel 2 ./internal/config
	$(GO) test -run '^$$' -fuzz '^FuzzFastPathMatchesYAML$$' -fuzztime $(FUZZTIME) -parallel 2 ./internal/config
	$(GO) test -run '^$$' -fuzz '^FuzzAPIRequests$$' -fuzztime $(FUZZTIME) -parallel 2 ./internal/api
	$(GO) test -run '^$$' -fuzz '^FuzzDescribeFrame$$' -fuzztime $(FUZZTIME) -parallel 2 ./internal/api
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) -parallel 2 ./internal/peersync

# The unit tests alone: make check's test phase.
test-unit:
	$(GO) test -count=1 -short ./...

demo: build
	./$(BIN)/xlb-lab demo
	./$(BIN)/xlb-lab demo --scale

# The Kubernetes demo: a real API server (make kube-bin builds it once).
demo-kubernetes: build kube-bin
	./$(BIN)/xlb-lab demo --kubernetes

check-generated: generate performance
	@git diff --exit-code -- bpf internal api bench lab docs/CONFIG.md docs/PERFORMANCE.md || { echo "generated files differ from the committed ones: run 'make generate' (docs/PERFORMANCE.md: make performance) and commit" >&2; exit 1; }
	@test -z "$$(git status --porcelain --untracked-files=all -- internal bpf api bench lab)" || { git status --porcelain -- internal bpf api bench lab; echo "untracked generated files: commit them" >&2; exit 1; }

clean:
	rm -rf $(BIN) build

# Install and package. The binaries are static (CGO_ENABLED=0): the
# package depends on nothing and builds without network once the Go
# modules are in the module cache (make deps). Man pages and the bash
# completion are generated from the binaries' own help (scripts/docgen).
PREFIX      ?= /usr/local
DESTDIR     ?=
BINDIR      ?= $(PREFIX)/bin
MANDIR      ?= $(PREFIX)/share/man
DOCDIR      ?= $(PREFIX)/share/doc/xlb
UNITDIR     ?= $(PREFIX)/lib/systemd/system
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
SYSCONFDIR  ?= /etc
DIST        := build/dist
PKGCMDS     := xlbd xlbctl xlb-decap
DEBOUT      ?= build
MANVERSION  := $(or $(VERSION),unknown)

dist:
	@mkdir -p $(DIST)/bin $(DIST)/man
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(DIST)/bin/ $(addprefix ./cmd/,$(PKGCMDS))
	$(GO) build -o $(DIST)/docgen ./scripts/docgen
	$(DIST)/bin/xlbd -h 2>&1 | $(DIST)/docgen man xlbd 8 "the xlb L4 load balancer daemon (XDP forwarder, health checks, BGP, API)" "$(MANVERSION)" > $(DIST)/man/xlbd.8
	$(DIST)/bin/xlbctl help | $(DIST)/docgen man xlbctl 8 "operate a running xlbd over its API" "$(MANVERSION)" > $(DIST)/man/xlbctl.8
	$(DIST)/bin/xlb-decap help | $(DIST)/docgen man xlb-decap 8 "strip xlb's GRE and IPIP encapsulation on a backend with XDP" "$(MANVERSION)" > $(DIST)/man/xlb-decap.8
	$(DIST)/docgen bash-completion > $(DIST)/xlbctl.bash

# The config is installed only where none exists (the package marks it a
# conffile instead). The units name $(BINDIR).
install: dist
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(UNITDIR) $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(SYSCONFDIR)/xlb
	install -m 0755 $(addprefix $(DIST)/bin/,$(PKGCMDS)) $(DESTDIR)$(BINDIR)/
	for u in xlbd.service xlb-decap@.service; do \
		sed 's|/usr/bin/|$(BINDIR)/|g' deploy/$$u > $(DESTDIR)$(UNITDIR)/$$u && chmod 0644 $(DESTDIR)$(UNITDIR)/$$u || exit 1; done
	for m in $(PKGCMDS); do gzip -9nc $(DIST)/man/$$m.8 > $(DESTDIR)$(MANDIR)/man8/$$m.8.gz || exit 1; done
	install -m 0644 $(DIST)/xlbctl.bash $(DESTDIR)$(BASHCOMPDIR)/xlbctl
	install -m 0644 README.md docs/*.md $(DESTDIR)$(DOCDIR)/
	install -m 0644 examples/*.yaml $(DESTDIR)$(DOCDIR)/examples/
	test -e $(DESTDIR)$(SYSCONFDIR)/xlb/xlb.yaml || install -m 0644 examples/xlb.yaml $(DESTDIR)$(SYSCONFDIR)/xlb/xlb.yaml

# A Debian package (dpkg-deb, no network): build/xlb_<version>_<arch>.deb.
deb:
	rm -rf build/deb
	$(MAKE) --no-print-directory install DESTDIR=$(CURDIR)/build/deb/root PREFIX=/usr UNITDIR=/usr/lib/systemd/system
	./scripts/deb.sh build/deb/root "$(VERSION)" $(DEBOUT)

# Benchmarks (cmd/xlb-bench): every part at full size; prints each
# figure and writes bench/out/report.json, report.md, PNG plots and Go CPU
# profiles (bench/out/profiles). Needs root; takes a while. Parts alone:
# make bench BENCH_PARTS="pkt control".
BENCH_PARTS ?= all
BENCH_FLAGS ?=
.PHONY: bench-smoke
bench: build kube-bin
	$(GO) build -o $(BIN)/ ./cmd/xlb-bench
	./$(BIN)/xlb-bench -out bench/out -profile bench/out/profiles $(BENCH_FLAGS) $(BENCH_PARTS)

# docs/PERFORMANCE.md's figures, from bench/report.json: the committed
# report of a full make bench (to publish a new one: make bench, copy
# bench/out/report.json to bench/report.json, make performance).
performance:
	$(GO) run ./cmd/xlb-bench -docs docs/PERFORMANCE.md -report bench/report.json

# Every part shortened (under two minutes): proves they work, as CI's
# TestBenchSmoke does; figures not for quoting. Writes bench/out/smoke.
bench-smoke: build
	$(GO) build -o $(BIN)/ ./cmd/xlb-bench
	./$(BIN)/xlb-bench -smoke -out bench/out/smoke $(BENCH_FLAGS) $(BENCH_PARTS)
