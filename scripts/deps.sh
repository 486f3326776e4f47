#!/usr/bin/env bash
# Installs what the test suite needs and is missing: PostgreSQL and Redis
# server binaries from Debian's packages (as root, via apt-get), and
# staticcheck through `go install`. Tests start their own throwaway servers;
# this script only makes the binaries available.
set -euo pipefail

need=()
pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
[ -n "$pg_bin" ] && [ -x "$pg_bin/initdb" ] && [ -x "$pg_bin/pg_ctl" ] || need+=(postgresql)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)

if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "deps: installing ${need[*]} with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    # Debian starts the packaged services; the tests use their own.
    for svc in postgresql redis-server; do
      if command -v service >/dev/null 2>&1; then service "$svc" stop >/dev/null 2>&1 || true; fi
    done
  else
    echo "deps: missing ${need[*]}; install them (as root: apt-get install ${need[*]})" >&2
    exit 1
  fi
fi

STATICCHECK_VERSION=v0.8.2
gobin=$(go env GOPATH)/bin
if ! [ -x "$gobin/staticcheck" ] || ! "$gobin/staticcheck" -version 2>/dev/null | grep -q "${STATICCHECK_VERSION#v}"; then
  echo "deps: installing staticcheck $STATICCHECK_VERSION"
  go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi
