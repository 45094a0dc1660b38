# xlb — see README.md. Every target that needs tools installs them first.
GO      ?= go
BIN     := bin
CMDS    := xlbd xlbctl xlb-decap xlb-lab
GOFLAGS ?=
export GOFLAGS

.PHONY: all deps generate proto build test test-unit fuzz demo bench check-generated clean

all: build

deps:
	@./scripts/deps.sh

# Regenerates the BPF objects, their Go bindings and the gRPC API code
# (all committed).
generate: deps
	$(GO) generate ./...
	@$(MAKE) --no-print-directory proto

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

build: deps
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ $(addprefix ./cmd/,$(CMDS))

# Privileged tests (netns, XDP) run serially: they share the kernel.
test: build
	$(GO) vet ./...
	$(GO) test -count=1 -p 1 -timeout 40m ./...
	@$(MAKE) --no-print-directory fuzz

# Fuzzing, bounded: the packet fuzzer at its full size
# (10 M random and mutated packets through the loaded forwarder), then the
# native Go fuzzers of the config decoder, of its fast YAML reader against
# yaml.v3, of the API's request decoding and of the sync message decoder
# for FUZZTIME each (plain `go test` runs only their seeds).
FUZZTIME ?= 30s
fuzz:
	XLB_FUZZ_PACKETS=10000000 $(GO) test -count=1 -run '^TestPacketFuzz$$' -v ./internal/datapath
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) -parallel 2 ./internal/config
	$(GO) test -run '^$$' -fuzz '^FuzzFastPathMatchesYAML$$' -fuzztime $(FUZZTIME) -parallel 2 ./internal/config
	$(GO) test -run '^$$' -fuzz '^FuzzAPIRequests$$' -fuzztime $(FUZZTIME) -parallel 2 ./internal/api
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) -parallel 2 ./internal/peersync

test-unit:
	$(GO) test -count=1 -short ./...

demo: build
	./$(BIN)/xlb-lab demo
	./$(BIN)/xlb-lab demo --scale

check-generated: generate
	@git diff --exit-code -- bpf internal api bench lab || { echo "generated files differ from the committed ones: run 'make generate' and commit" >&2; exit 1; }
	@test -z "$$(git status --porcelain --untracked-files=all -- internal bpf api bench lab)" || { git status --porcelain -- internal bpf api bench lab; echo "untracked generated files: commit them" >&2; exit 1; }

clean:
	rm -rf $(BIN)

# Benchmarks (cmd/xlb-bench): every part at full size; prints each
# figure and writes bench/out/report.json, report.md, PNG plots and Go CPU
# profiles (bench/out/profiles). Needs root; takes a while. Parts alone:
# make bench BENCH_PARTS="pkt control".
BENCH_PARTS ?= all
BENCH_FLAGS ?=
.PHONY: bench-smoke
bench: build
	$(GO) build -o $(BIN)/ ./cmd/xlb-bench
	./$(BIN)/xlb-bench -out bench/out -profile bench/out/profiles $(BENCH_FLAGS) $(BENCH_PARTS)

# Every part shortened (under two minutes): proves they work, as CI's
# TestBenchSmoke does; figures not for quoting. Writes bench/out/smoke.
bench-smoke: build
	$(GO) build -o $(BIN)/ ./cmd/xlb-bench
	./$(BIN)/xlb-bench -smoke -out bench/out/smoke $(BENCH_FLAGS) $(BENCH_PARTS)
