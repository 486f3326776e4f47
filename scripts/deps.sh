#!/usr/bin/env bash
# Installs what the test suite needs and is missing: PostgreSQL, Redis and
# MariaDB server binaries, Prometheus's promtool (which checks deploy/'s
# alert rules), systemd-analyze (its unit), Chromium (the dashboard's
# browser tests) and the Python modules and mypy that clients/python builds,
# tests and checks with, from Debian's
# packages (as root, via apt-get), and staticcheck through `go install`.
# Tests start their own throwaway servers;
# this script only makes the binaries available.
set -euo pipefail

need=()
pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
[ -n "$pg_bin" ] && [ -x "$pg_bin/initdb" ] && [ -x "$pg_bin/pg_ctl" ] || need+=(postgresql)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
# mariadbd lives in /usr/sbin, which a non-root PATH may lack.
command -v mariadb-install-db >/dev/null 2>&1 && { command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ]; } ||
  need+=(mariadb-server)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
# systemd-analyze checks deploy/'s unit (the package is installed, not run:
# the tests never start systemd).
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
# The dashboard's browser tests (leasehttp/ui) drive headless Chromium, found
# as $LEASE_CHROMIUM or on PATH as the tests look for it.
if [ -z "${LEASE_CHROMIUM:-}" ]; then
  command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 ||
    command -v google-chrome >/dev/null 2>&1 || command -v google-chrome-stable >/dev/null 2>&1 || need+=(chromium)
fi
# The Python client (clients/python) is built, installed and tested with
# Debian's python3 and its packages, offline: each module it imports, and the
# package that has it. $LEASE_DEPS_PYTHON points elsewhere for the script's
# own test.
py=${LEASE_DEPS_PYTHON:-/usr/bin/python3}
for pair in build:python3-build venv:python3-venv ensurepip:python3-venv setuptools:python3-setuptools \
  wheel:python3-wheel pytest:python3-pytest psycopg:python3-psycopg redis:python3-redis; do
  mod=${pair%%:*} pkg=${pair#*:}
  if ! { [ -x "$py" ] && "$py" -c "import $mod" >/dev/null 2>&1; } && [[ " ${need[*]-} " != *" $pkg "* ]]; then
    need+=("$pkg")
  fi
done
command -v mypy >/dev/null 2>&1 || need+=(mypy)

# service_of PACKAGE: the name of the service PACKAGE installs.
service_of() { if [ "$1" = mariadb-server ]; then echo mariadb; else echo "$1"; fi; }
# running SERVICE: whether the init system says SERVICE runs.
running() { command -v service >/dev/null 2>&1 && service "$1" status >/dev/null 2>&1; }

if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "deps: installing ${need[*]} with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    # Debian starts a packaged service on install; the tests start their
    # own servers and need none. A policy-rc.d that answers 101 (action
    # forbidden) keeps the install from starting any, and is removed
    # afterwards; one already there is the system's and is left as it is.
    # LEASE_DEPS_POLICY_RC_D points elsewhere for the script's own test.
    policy=${LEASE_DEPS_POLICY_RC_D:-/usr/sbin/policy-rc.d}
    own_policy=false
    if [ ! -e "$policy" ]; then
      own_policy=true
      trap 'rm -f "$policy"' EXIT
      printf '#!/bin/sh\n# written by lease scripts/deps.sh for one apt-get install\nexit 101\n' >"$policy"
      chmod 755 "$policy"
    fi
    # Should a service start anyway (that existing policy allowed it), stop
    # only what the install started: never a service that already ran, and
    # never one of a package this script did not install.
    ran_before=" "
    for pkg in "${need[@]}"; do
      svc=$(service_of "$pkg")
      if running "$svc"; then ran_before+="$svc "; fi
    done
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    if $own_policy; then
      rm -f "$policy"
      trap - EXIT
    fi
    for pkg in "${need[@]}"; do
      svc=$(service_of "$pkg")
      if [[ $ran_before != *" $svc "* ]] && running "$svc"; then
        echo "deps: stopping $svc, which the install started"
        service "$svc" stop >/dev/null 2>&1 || true
      fi
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
