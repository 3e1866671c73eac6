GO ?= go
FUZZTIME ?= 20s

.PHONY: test test-short test-clients npm-deps lint generate check-generate bench fuzz build

build:
	$(GO) build -o bin/console ./cmd/console

# The npm packages the suites use (the TypeScript client's, axe-core for the
# accessibility check, the official MCP TypeScript SDK), from the committed
# lock files. A directory is installed again only when its lock file is
# newer than what npm ci recorded. Without npm nothing is installed, and the
# tests that need the packages fail saying so.
NPM_DIRS := clients/typescript e2e/axe e2e/mcp-ts
npm-deps: $(NPM_DIRS:%=%/node_modules/.package-lock.json)

%/node_modules/.package-lock.json: %/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		echo "npm ci in $*"; (cd $* && npm ci --no-audit --no-fund --loglevel=error); \
	else echo "npm not found: the suites that need $* will fail (install Node.js 20 and npm, then make npm-deps)"; fi

# Every test: unit, integration, processes, the browser suite, with the race
# detector. Nothing is skipped: a test whose tool is missing (Chromium,
# PostgreSQL, strace, python3-cryptography, the npm packages) fails and says
# how to install it (COUNTERSIGN_TEST_ALL=1, see internal/testkit.Need).
# Then the allocation budget, counted without the race detector, which
# makes allocations of its own. cmd/console takes 6-8 minutes on two
# cores and up to 18 on a machine loaded by other builds: the timeout per
# package leaves room for that.
test: npm-deps
	COUNTERSIGN_TEST_ALL=1 $(GO) test -race -count=1 -timeout 30m ./...
	$(GO) test -count=1 -run '^TestWholeFlowAllocations$$' ./internal/console/

# The packages whose short tests take longest (go test -short -json), named
# first so that go test starts them first (it runs packages in the order
# given, each once) and the quick ones fill the gaps, rather than a long one
# starting last and running alone on an idle core. A slow package not named
# here still runs, only later.
LONGEST := ./internal/pgstore/ ./clients/ ./internal/console/ ./e2e/ ./internal/mcp/ ./internal/db/

# The fast loop: every test but the heavy ones (big races, kill loops,
# 10,000-socket tests, the browser suite), which skip under -short. Four
# packages at a time: several spend most of their time waiting on a child
# process (PostgreSQL, the client suites), which leaves a core idle.
test-short:
	$(GO) test -short -race -count=1 -p 4 -timeout 10m $(LONGEST) ./...

# The Python and TypeScript clients' suites alone, against a console built from this tree.
test-clients:
	$(GO) test -count=1 -v ./clients/

lint:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

generate:
	$(GO) tool templ generate

# Fails when the committed generated code differs from what the sources produce.
check-generate: generate
	@if [ -n "$$(git status --porcelain -- '*_templ.go')" ]; then \
		git status --short -- '*_templ.go'; git diff -- '*_templ.go' | head -40; \
		echo "generated templ code is stale or uncommitted: run make generate and commit"; exit 1; fi

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

fuzz:
	./scripts/fuzz.sh $(FUZZTIME)
