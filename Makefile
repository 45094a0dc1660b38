# xlb — see README.md. Every target that needs tools installs them first.
GO      ?= go
BIN     := bin
CMDS    := xlbd xlbctl xlb-decap xlb-lab
GOFLAGS ?=
export GOFLAGS

.PHONY: all deps generate build test test-unit demo bench check-generated clean

all: build

deps:
	@./scripts/deps.sh

# Regenerates the BPF objects and their Go bindings (committed).
generate: deps
	$(GO) generate ./...

build: deps
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ $(addprefix ./cmd/,$(CMDS))

# Privileged tests (netns, XDP) run serially: they share the kernel.
test: build
	$(GO) vet ./...
	$(GO) test -count=1 -p 1 -timeout 40m ./...

test-unit:
	$(GO) test -count=1 -short ./...

demo: build
	./$(BIN)/xlb-lab demo

check-generated: generate
	@git diff --exit-code -- bpf internal || { echo "generated files differ from the committed ones: run 'make generate' and commit" >&2; exit 1; }
	@test -z "$$(git status --porcelain --untracked-files=all -- internal bpf)" || { git status --porcelain -- internal bpf; echo "untracked generated files: commit them" >&2; exit 1; }

clean:
	rm -rf $(BIN)
