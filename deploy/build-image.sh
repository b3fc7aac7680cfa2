#!/usr/bin/env bash
# Build the mpdp image without any registry:
#   1. base image mpdp-base:trixie (once): debootstrap --variant=minbase trixie (Debian 13, python3 3.13) from
#      apt's own Debian mirror, imported with `docker import`;
#   2. wheels for the image's Python (3.13, whatever the host runs): the project's own wheel, and its
#      dependencies as binary wheels for cp313 on manylinux (`pip download --python-version 3.13
#      --only-binary :all:`), pinned to this checkout's .venv (pip freeze), into build/deploy/context/wheels;
#   3. `docker build --network none -f deploy/Dockerfile`: pip installs from those wheels with --no-index;
#   4. the Prometheus image mpdp-prometheus:trixie (once): Debian's own `prometheus` package, debootstrapped
#      the same way (compose's `prometheus` service scrapes every role; docs/deploy.md §4).
# Usage: deploy/build-image.sh            (env: MPDP_IMAGE=mpdp:local, MPDP_BASE_IMAGE=mpdp-base:trixie,
#                                          MPDP_PROMETHEUS_IMAGE=mpdp-prometheus:trixie,
#                                          MPDP_REBUILD_BASE=1 to redo steps 1 and 4)
# The suite itself runs on the host's Python (3.11 or later); the compose federation runs on the image's 3.13,
# so every `make test` exercises both.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
PY="${PY:-$ROOT/.venv/bin/python}"
IMAGE="${MPDP_IMAGE:-mpdp:local}"
SUITE=trixie           # Debian 13
IMAGE_PYTHON=3.13      # its python3
BASE="${MPDP_BASE_IMAGE:-mpdp-base:$SUITE}"
PROM_IMAGE="${MPDP_PROMETHEUS_IMAGE:-mpdp-prometheus:$SUITE}"
BUILD="$ROOT/build/deploy"
t0=$SECONDS
mkdir -p "$BUILD"

debian_mirror() {
  # The first Debian mirror apt already uses (deb822 .sources or one-line sources.list).
  local uri
  uri="$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v -- '-security' | head -n1 || true)"
  [ -n "$uri" ] || uri="$(grep -hsE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '{print $2}' | grep -i debian | grep -v -- '-security' | head -n1 || true)"
  echo "${uri:-http://deb.debian.org/debian}"
}

if [ -n "${MPDP_REBUILD_BASE:-}" ] || ! docker image inspect "$BASE" >/dev/null 2>&1; then
  command -v debootstrap >/dev/null || { echo "build-image: debootstrap missing; run deploy/host-setup.sh" >&2; exit 1; }
  rootfs="$(mktemp -d /var/tmp/mpdp-rootfs.XXXXXX)"
  trap 'rm -rf "$rootfs"' EXIT
  mirror="$(debian_mirror)"
  echo "build-image: debootstrap $SUITE from $mirror (about a minute)" >&2
  if ! debootstrap --variant=minbase --include=python3,python3-venv "$SUITE" "$rootfs" "$mirror" >"$BUILD/debootstrap.log" 2>&1; then
    echo "build-image: debootstrap failed; last lines of $BUILD/debootstrap.log:" >&2; tail -n 20 "$BUILD/debootstrap.log" >&2; exit 1
  fi
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/*
  tar -C "$rootfs" -c . | docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - "$BASE" >/dev/null
  rm -rf "$rootfs"
  trap - EXIT
  echo "build-image: base image $BASE imported ($((SECONDS - t0)) s)" >&2
fi
mkdir -p "$BUILD"

# Wheels for the image's Python, pinned to the versions this checkout is tested with: the project's own wheel
# (pure Python) built here, every dependency a binary wheel for cp$IMAGE_PYTHON downloaded from the index.
tw=$SECONDS
ctx="$BUILD/context"
rm -rf "$ctx"
mkdir -p "$ctx/wheels"
"$PY" -m pip freeze --exclude-editable | grep -v '^-e ' > "$BUILD/constraints.txt"
"$PY" -m pip wheel --quiet --disable-pip-version-check --no-deps --wheel-dir "$ctx/wheels" "$ROOT" 2> "$BUILD/wheels.log" \
  || { echo "build-image: pip wheel failed; see $BUILD/wheels.log" >&2; tail -n 20 "$BUILD/wheels.log" >&2; exit 1; }
# the core dependencies and the image's extras (deploy/Dockerfile installs mpdp[parquet,postgres]: a party's Parquet and SQL datasets)
"$PY" -c 'import tomllib, sys; p = tomllib.load(open(sys.argv[1], "rb"))["project"]; print("\n".join(p["dependencies"] + p["optional-dependencies"]["parquet"] + p["optional-dependencies"]["postgres"]))' \
  "$ROOT/pyproject.toml" > "$BUILD/requirements.txt"
platforms=()
for p in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux_2_5 manylinux1; do platforms+=(--platform "${p}_x86_64"); done
abi="cp${IMAGE_PYTHON/./}"
"$PY" -m pip download --quiet --disable-pip-version-check --only-binary :all: --python-version "$IMAGE_PYTHON" --implementation cp \
  --abi "$abi" --abi abi3 --abi none "${platforms[@]}" -c "$BUILD/constraints.txt" -r "$BUILD/requirements.txt" -d "$ctx/wheels" 2>> "$BUILD/wheels.log" \
  || { echo "build-image: pip download (cp$IMAGE_PYTHON wheels) failed; see $BUILD/wheels.log" >&2; tail -n 20 "$BUILD/wheels.log" >&2; exit 1; }
t1=$SECONDS

version="$("$PY" -c 'import mpdp; print(mpdp.__version__)')"
# The legacy builder (no buildx needed) honours --network none for every RUN step.
DOCKER_BUILDKIT=0 docker build --network none --build-arg BASE="$BASE" --label org.opencontainers.image.version="$version" \
  -f "$HERE/Dockerfile" -t "$IMAGE" "$ctx" >"$BUILD/docker-build.log" 2>&1 \
  || { echo "build-image: docker build failed; last lines of $BUILD/docker-build.log:" >&2; tail -n 30 "$BUILD/docker-build.log" >&2; exit 1; }
echo "build-image: $IMAGE built (wheels $((t1 - tw)) s, docker build $((SECONDS - t1)) s, total $((SECONDS - t0)) s)" >&2

# 4. Prometheus from Debian's package: the binary runs as the image's uid 10001 (the token file's owner).
if [ -n "${MPDP_REBUILD_BASE:-}" ] || ! docker image inspect "$PROM_IMAGE" >/dev/null 2>&1; then
  command -v debootstrap >/dev/null || { echo "build-image: debootstrap missing; run deploy/host-setup.sh" >&2; exit 1; }
  tp=$SECONDS
  promfs="$(mktemp -d /var/tmp/mpdp-promfs.XXXXXX)"
  trap 'rm -rf "$promfs"' EXIT
  echo "build-image: debootstrap $SUITE with prometheus (about a minute)" >&2
  if ! debootstrap --variant=minbase --include=prometheus "$SUITE" "$promfs" "$(debian_mirror)" >"$BUILD/debootstrap-prometheus.log" 2>&1; then
    echo "build-image: debootstrap (prometheus) failed; last lines of $BUILD/debootstrap-prometheus.log:" >&2; tail -n 20 "$BUILD/debootstrap-prometheus.log" >&2; exit 1
  fi
  rm -rf "$promfs"/var/cache/apt/archives/*.deb "$promfs"/var/cache/apt/*.bin "$promfs"/var/lib/apt/lists/* "$promfs"/usr/share/doc/* "$promfs"/usr/share/man/*
  tar -C "$promfs" -c . | docker import --change 'USER 10001:10001' --change 'WORKDIR /tmp' \
    --change 'ENTRYPOINT ["/usr/bin/prometheus"]' --change 'CMD ["--config.file=/etc/mpdp/prometheus.yml", "--storage.tsdb.path=/tmp/prometheus"]' \
    - "$PROM_IMAGE" >/dev/null
  rm -rf "$promfs"
  trap - EXIT
  echo "build-image: $PROM_IMAGE imported ($((SECONDS - tp)) s)" >&2
fi
