# tgnotify — transactional outbox → NATS JetStream → Telegram.
# Every target documents itself: `make help` lists them.

GO          ?= go
BIN         := $(CURDIR)/bin
PKGS        := ./...
# Pinned tool versions. nats-server is built from the version go.mod pins;
# the nats CLI and staticcheck are built from their own pinned modules.
NATSCLI_VERSION     := v0.5.0
STATICCHECK_VERSION := v0.8.2
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS     := -s -w -X main.version=$(VERSION)
TEST_TIMEOUT ?= 25m

DAEMONS := publisher telegram-worker botapi-emulator shop
# Extra flags of `make demo`, e.g. DEMO_FLAGS="-orders 1000 -keep"; `bin/demo -h` lists them.
DEMO_FLAGS  ?=

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: tools ## Build every binary into ./bin (daemons, shop, emulator, nats-server, nats CLI).
	@mkdir -p $(BIN)
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/... ./examples/shop ./examples/demo

.PHONY: tools
tools: $(BIN)/nats-server $(BIN)/nats ## Build the pinned nats-server and nats CLI into ./bin.

$(BIN)/nats-server: go.mod go.sum
	@mkdir -p $(BIN)
	$(GO) build -o $@ github.com/nats-io/nats-server/v2

$(BIN)/nats:
	@mkdir -p $(BIN)
	GOBIN=$(BIN) $(GO) install github.com/nats-io/natscli/nats@$(NATSCLI_VERSION)

.PHONY: test
test: build ## Vet and run the whole test suite with the race detector (the README's test command).
	$(GO) vet $(PKGS)
	TGNOTIFY_BIN=$(BIN) $(GO) test -race -timeout $(TEST_TIMEOUT) $(PKGS)

.PHONY: demo
demo: build ## Run the whole system on this machine: a burst of orders, live progress, a report (DEMO_FLAGS="-orders 1000").
	$(BIN)/demo $(DEMO_FLAGS)

.PHONY: lint
lint: ## gofmt check, go vet and staticcheck.
	@out=$$(gofmt -l $$(git ls-files '*.go') 2>&1); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)

.PHONY: clean
clean: ## Remove ./bin and demo/bench scratch directories.
	rm -rf $(BIN) .demo .bench
