GO ?= go
FUZZTIME ?= 20s

.PHONY: test test-short test-clients lint generate check-generate bench fuzz build

build:
	$(GO) build -o bin/console ./cmd/console

# Every test: unit, integration, processes, the browser suite, with the race detector.
test:
	$(GO) test -race -count=1 -timeout 20m ./...

# The fast loop: every test but the heavy ones (big races, kill loops,
# 10,000-socket tests, the browser suite), which skip under -short. Four
# packages at a time: several spend most of their time waiting on a child
# process (PostgreSQL, the client suites), which leaves a core idle.
test-short:
	$(GO) test -short -race -count=1 -p 4 -timeout 10m ./...

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
