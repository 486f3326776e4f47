# `make test` is the one test command: README and .ci/run call exactly it.
GO        ?= go
GOBIN     := $(shell $(GO) env GOPATH)/bin
PKGS      := ./...

.PHONY: test deps fmt-check vet staticcheck unit short bench

test: deps fmt-check vet staticcheck unit

deps:
	@scripts/deps.sh

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

staticcheck:
	$(GOBIN)/staticcheck $(PKGS)

# The full suite: real PostgreSQL, Redis and etcd started by the tests.
unit:
	$(GO) test -race -count=1 -timeout 12m $(PKGS)

# Without engines: tests that need PostgreSQL, Redis or etcd skip.
short:
	$(GO) test -race -short -count=1 $(PKGS)

# Benchmarks side by side, written to docs/BENCHMARKS.md.
bench:
	$(GO) run ./internal/benchreport -out docs/BENCHMARKS.md
