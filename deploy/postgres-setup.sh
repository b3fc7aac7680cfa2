#!/usr/bin/env bash
# Install PostgreSQL's server binaries on a Debian/Ubuntu host when missing (the test suite's real database, and a
# party that wants a local PostgreSQL for its rows): Debian's `postgresql` package, nothing outside apt.
# Idempotent; needs root for apt-get. Prints the folder holding initdb and pg_ctl. Usage: deploy/postgres-setup.sh
set -euo pipefail

find_bin() {
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && { echo "$d"; return 0; }
  done
  command -v initdb >/dev/null && command -v pg_ctl >/dev/null && { dirname "$(command -v initdb)"; return 0; }
  return 1
}

if ! bin=$(find_bin); then
  if [ "$(id -u)" != 0 ]; then
    echo "postgres-setup: PostgreSQL's server (initdb, pg_ctl) is missing; run this script as root (it calls apt-get install)" >&2
    exit 1
  fi
  if ! command -v apt-get >/dev/null; then
    echo "postgres-setup: PostgreSQL's server is missing and this host has no apt-get; install it by hand" >&2
    exit 1
  fi
  echo "postgres-setup: installing postgresql" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends postgresql >/dev/null
  bin=$(find_bin) || { echo "postgres-setup: postgresql installed, but initdb is still not found" >&2; exit 1; }
fi
echo "$bin"
