# tgnotify — transactional outbox → NATS JetStream → Telegram.
# Every target documents itself: `make help` lists them.

GO          ?= go
BIN         := $(CURDIR)/bin
PKGS        := ./...
# The benchmark and chaos suites are a Go module of their own, so that what
# only they need (the plotting libraries of bench) stays out of the product's
# go.mod. Every target that builds, vets, tests or lints covers both modules.
TOOLS_MOD   := tools
# Pinned tool versions. nats-server is built from the version go.mod pins;
# the nats CLI, Mailpit (the SMTP server of the email tests and the demo) and
# staticcheck are built from their own pinned modules.
NATSCLI_VERSION     := v0.5.0
MAILPIT_VERSION     := v1.33.1
STATICCHECK_VERSION := v0.8.2
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS     := -s -w -X main.version=$(VERSION)
TEST_TIMEOUT ?= 25m

DAEMONS := publisher telegram-worker botapi-emulator shop
# Extra flags of `make demo`, e.g. DEMO_FLAGS="-orders 1000 -keep"; `bin/demo -h` lists them.
DEMO_FLAGS  ?=
# Extra flags of `make bench`, e.g. BENCH_FLAGS="-only 1,2 -runs 7"; `bin/bench -h` lists them.
BENCH_FLAGS ?=
# Extra flags of `make chaos`, e.g. CHAOS_FLAGS="-seed 42"; `bin/chaos -h` lists them.
# CHAOS_SHORT=1 in the environment selects the short run CI uses.
CHAOS_FLAGS ?=
# How long `make fuzz` runs each fuzz target.
FUZZTIME    ?= 3m

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: nats-tools $(BIN)/mailpit ## Build every binary into ./bin (daemons, emulator, shop, demo, bench, chaos, nats-server, nats CLI, mailpit).
	@mkdir -p $(BIN)
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/... ./examples/shop ./examples/demo
	$(GO) -C $(TOOLS_MOD) build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

.PHONY: nats-tools
nats-tools: $(BIN)/nats-server $(BIN)/nats ## Build the pinned nats-server and nats CLI into ./bin.

$(BIN)/nats-server: go.mod go.sum
	@mkdir -p $(BIN)
	$(GO) build -o $@ github.com/nats-io/nats-server/v2

$(BIN)/nats:
	@mkdir -p $(BIN)
	GOBIN=$(BIN) $(GO) install github.com/nats-io/natscli/nats@$(NATSCLI_VERSION)

.PHONY: mailpit
mailpit: $(BIN)/mailpit ## Build the pinned Mailpit (SMTP server with a REST API, for the email tests and the demo) into ./bin.

$(BIN)/mailpit:
	@mkdir -p $(BIN)
	GOBIN=$(BIN) $(GO) install github.com/axllent/mailpit@$(MAILPIT_VERSION)

.PHONY: test
test: build ## Vet and run the whole test suite of both modules with the race detector (the README's test command).
	$(GO) vet $(PKGS)
	$(GO) -C $(TOOLS_MOD) vet $(PKGS)
	TGNOTIFY_BIN=$(BIN) $(GO) test -race -timeout $(TEST_TIMEOUT) $(PKGS)
	TGNOTIFY_BIN=$(BIN) $(GO) -C $(TOOLS_MOD) test -race -timeout $(TEST_TIMEOUT) $(PKGS)

.PHONY: tidy-check
tidy-check: ## Fail if go.mod or go.sum of either module is not what `go mod tidy` would write.
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum not tidy: run go mod tidy"; exit 1; }
	@$(GO) -C $(TOOLS_MOD) mod tidy -diff || { echo "$(TOOLS_MOD)/go.mod/go.sum not tidy: run go mod tidy in $(TOOLS_MOD)/"; exit 1; }

.PHONY: demo
demo: build ## Run the whole system on this machine: a burst of orders, live progress, a report (DEMO_FLAGS="-orders 1000").
	$(BIN)/demo $(DEMO_FLAGS)

.PHONY: chaos
chaos: build ## Fault injection on the real binaries, then invariant checks (CHAOS_SHORT=1: ~4 min; default ~30 min; CHAOS_FLAGS="-seed N").
	$(BIN)/chaos $(CHAOS_FLAGS)

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (default 3m) with one worker; new failures land in testdata/fuzz.
	$(GO) test -run='^$$' -fuzz='^FuzzDecodePayload$$' -fuzztime=$(FUZZTIME) -parallel=1 ./pkg/notify
	$(GO) test -run='^$$' -fuzz='^FuzzValidate$$' -fuzztime=$(FUZZTIME) -parallel=1 ./pkg/notify
	$(GO) test -run='^$$' -fuzz='^FuzzParseResponse$$' -fuzztime=$(FUZZTIME) -parallel=1 ./pkg/botapi
	$(GO) test -run='^$$' -fuzz='^FuzzOnePassMatchesGeneral$$' -fuzztime=$(FUZZTIME) -parallel=1 ./pkg/botapi
	$(GO) test -run='^$$' -fuzz='^FuzzUnmarshalDecodesAsTheStream$$' -fuzztime=$(FUZZTIME) -parallel=1 ./pkg/notify
	$(GO) test -run='^$$' -fuzz='^FuzzDecodePayloadMatchesNotify$$' -fuzztime=$(FUZZTIME) -parallel=1 ./pkg/delivery
	$(GO) test -run='^$$' -fuzz='^FuzzHandEncodingMatchesEncodingJSON$$' -fuzztime=$(FUZZTIME) -parallel=1 ./pkg/delivery

.PHONY: bench
bench: build ## Run the benchmark suite (about 35 min on 2 cores); writes BENCHMARKS.md and docs/bench/ (BENCH_FLAGS="-only 2,5").
	$(BIN)/bench -out BENCHMARKS.md -plots docs/bench -results docs/bench/results.json \
		-command 'make bench$(if $(BENCH_FLAGS), BENCH_FLAGS="$(BENCH_FLAGS)")' $(BENCH_FLAGS)

.PHONY: lint
lint: ## gofmt check, go vet and staticcheck, in both modules.
	@out=$$(gofmt -l $$(git ls-files '*.go') 2>&1); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) -C $(TOOLS_MOD) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)
	$(GO) -C $(TOOLS_MOD) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)

.PHONY: clean
clean: ## Remove ./bin and demo/bench scratch directories.
	rm -rf $(BIN) .demo .bench .chaos
