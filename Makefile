# `make test` is the one test command: README and .ci/run call exactly it.
GO        ?= go
GOBIN     := $(shell $(GO) env GOPATH)/bin
PKGS      := ./...
# Two modules: the library (what users require) and tools/, the campaigns
# and benchmarks (simulator, chaos, damage, make bench), whose go.mod holds
# what only they need (porcupine, toxiproxy, the rival locks). Every Go step
# runs in both; tools/ uses this checkout through a replace directive.
TOOLS     := tools
IN_BOTH    = for m in . $(TOOLS); do (cd $$m && $(1)) || exit 1; done
TS        := clients/typescript
PY        := clients/python
# redocly: no update check or telemetry from the test run.
REDOCLY_ENV := REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true

.PHONY: test checks deps fmt-check vet staticcheck unit alloc-check sim-ci sim chaos short bench ts-deps ts-check openapi-lint py-check

N ?= 100000

# The checks first, three at a time (installing the engines is mostly
# waiting on the network and the disk, which vet's and the TypeScript
# tools' work fills), then the suites; last the allocation counts and the
# simulator without the race detector, side by side (neither times anything).
test:
	@$(MAKE) --no-print-directory -j3 --output-sync=target checks
	@$(MAKE) --no-print-directory unit
	@$(MAKE) --no-print-directory -j2 --output-sync=target alloc-check sim-ci

checks: fmt-check vet staticcheck ts-check openapi-lint py-check

# What each check needs installed first (deps: the Debian packages and
# staticcheck; ts-deps: the TypeScript tools).
staticcheck py-check: deps
ts-check openapi-lint: ts-deps

deps:
	@scripts/deps.sh

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(call IN_BOTH,$(GO) vet $(PKGS))

# The TypeScript client's dependencies, exactly as the lockfile has them
# (development tools only: the package itself depends on nothing). Its
# tests run in `unit`, as the Go test clients/typescript (node --test).
ts-deps:
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || \
		{ echo "ts-deps: node and npm not found: install Node.js 20 or later (Debian: apt-get install nodejs npm)" >&2; exit 1; }
	cd $(TS) && npm ci --no-audit --no-fund --loglevel=error
	cd $(TS)/tools && npm ci --no-audit --no-fund --loglevel=error

# tsc --noEmit in strict mode over the package, its tests and its benchmark,
# and the wire types (src/openapi.ts) still what openapi-typescript makes of
# leasehttp/openapi.json (it runs from $(TS)/tools: see $(TS)/README.md).
ts-check:
	cd $(TS) && npx --no-install tsc -p tsconfig.json --noEmit
	cd $(TS)/tools && npm run -s check:openapi

# mypy --strict over the Python client, its tests and its benchmark worker
# (Debian's mypy, which reads Debian's python3 packages: psycopg, redis,
# pytest). Its tests run in `unit`, as the Go test clients/python, which
# builds the wheel offline, installs it into a fresh venv and runs pytest
# against the installed copy.
py-check:
	cd $(PY) && mypy --strict --cache-dir=/dev/null src tests bench

# The OpenAPI document passes redocly's recommended rules, each an error.
openapi-lint:
	cd $(TS) && $(REDOCLY_ENV) npx --no-install redocly lint ../../leasehttp/openapi.json --config redocly.yaml --format stylish

staticcheck:
	$(call IN_BOTH,$(GOBIN)/staticcheck $(PKGS))

# The full suite: real PostgreSQL, Redis and etcd started by the tests, one
# module after the other. (Run side by side they saved nothing here: make
# test took 16 min 34 s, against 16 min 44 s one after the other, with the
# engines installed; and under that load the tools module's chaos run on
# PostgreSQL proved nothing: its one pause ended before another worker's
# newer write, so no late write was rejected.) The
# simulator runs a smaller share of its schedules under the race detector
# (LEASE_SIM_SCHEDULES lock schedules, and a quarter as many of each of the
# election, semaphore and session workloads)...
#
# go test runs the packages in the order it is given them, two at a time;
# the root module's longest (by a quiet make test of 2026-12-07: etcdstore
# 271 s, the Python client 181 s, boltstore 158 s, leasehttp 127 s, ...)
# go first, so that none starts last and runs on alone while the other
# slot idles. ./... adds the rest once each.
SLOW_FIRST := ./etcdstore ./clients/python ./boltstore ./leasehttp ./clients/typescript \
	./redisstore ./internal/cli ./pgstore ./fence/sqlfence
#
# In the tools module the chaos package is most of the wait (215 s, 55 s of
# it on the processor), its tests one after the other: its replica tests
# (114 s) run in a go test of their own beside the module's. -skip holds
# for every package of the module, so a test elsewhere whose name matches
# would run nowhere: the recipe refuses that first.
CHAOS_SIDE := Replica
unit:
	LEASE_SIM_SCHEDULES=2000 $(GO) test -race -count=1 -timeout 12m $(SLOW_FIRST) $(PKGS)
	@cd $(TOOLS) && if grep -rlE --include='*_test.go' '(func Test|t\.Run\(")[^(]*$(CHAOS_SIDE)' . | grep -v '^\./chaos/'; then \
	echo "unit: the tests above match -skip '$(CHAOS_SIDE)' outside tools/chaos and would run nowhere: rename them or narrow CHAOS_SIDE" >&2; exit 1; fi
	@cd $(TOOLS) && side=$$(mktemp) && \
	{ $(GO) test -race -count=1 -timeout 12m -run '$(CHAOS_SIDE)' ./chaos >"$$side" 2>&1 & pid=$$!; } && \
	LEASE_SIM_SCHEDULES=2000 $(GO) test -race -count=1 -timeout 12m -skip '$(CHAOS_SIDE)' $(PKGS); rc=$$?; \
	wait $$pid; src=$$?; echo "chaos, -run '$(CHAOS_SIDE)':"; cat "$$side"; rm -f "$$side"; \
	[ $$rc = 0 ] && [ $$src = 0 ]

# Allocation counts mean nothing under the race detector (it makes
# sync.Pool drop items): the hot-path allocation tests run again without it.
alloc-check:
	$(GO) test -count=1 -run 'DoesNotAllocate' ./memstore ./leasehttp ./boltstore

# ...and its CI budget without it: 20,000 lock schedules and 5,000 each of
# election, semaphore and session (about 40 s here).
sim-ci:
	cd $(TOOLS) && LEASE_SIM_SCHEDULES=20000 $(GO) test -count=1 -run 'TestSimulation' ./sim

# More schedules: make sim N=1000000 (N lock, N/4 each of election, semaphore and session)
sim:
	cd $(TOOLS) && LEASE_SIM_SCHEDULES=$(N) $(GO) test -count=1 -timeout 0 -run 'TestSimulation' -v ./sim

# Chaos on real engines, the damage campaign of the default store's files
# (504 recipes) and the bits of a lease.db flipped one at a time (every one
# of a small store's, about 9,300, and 20,000 of a larger one's), the long
# forms (short forms run in make test).
chaos:
	cd $(TOOLS) && LEASE_CHAOS_LONG=1 $(GO) test -count=1 -timeout 30m -run 'Chaos' -v ./chaos
	cd $(TOOLS) && LEASE_CHAOS_LONG=1 $(GO) test -count=1 -timeout 30m -run 'TestCampaign' -v ./damage
	LEASE_CHAOS_LONG=1 $(GO) test -count=1 -timeout 30m -run 'TestEveryBitFlipped' -v ./boltstore

# Without engines: tests that need PostgreSQL, Redis or etcd skip.
short:
	$(call IN_BOTH,$(GO) test -race -short -count=1 $(PKGS))

# Benchmarks side by side, written to docs/BENCHMARKS.md. Run it on a quiet
# machine; BENCHFLAGS passes e.g. "-count 5" or "-pkg ./memstore". It installs
# what the benchmarks run (engines, the TypeScript client's tools) as make test does.
bench: deps ts-deps
	cd $(TOOLS) && $(GO) run ./benchreport -out ../docs/BENCHMARKS.md $(BENCHFLAGS)
