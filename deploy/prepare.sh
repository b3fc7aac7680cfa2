#!/usr/bin/env bash
# Everything `docker compose up` needs, once:
#   host packages and the compose plugin, a running engine, the image (offline build), certificates and
#   configs for every site (mpdp provision deploy/federation.yaml), and demo data: scikit-learn's
#   breast-cancer set split into one CSV per party plus a held-out test CSV for the operator.
#
#   deploy/prepare.sh            then   docker compose up -d --wait   and   docker compose run --rm operator
#
# Output goes to $MPDP_COMPOSE_DIR (default runs/compose, git-ignored): sites/ (handed to the containers),
# ca/ (the CA key: stays here, never mounted), data/. Existing sites are kept; MPDP_REPROVISION=1 rotates
# every key and certificate.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
PY="${PY:-$ROOT/.venv/bin/python}"
OUT="${MPDP_COMPOSE_DIR:-$ROOT/runs/compose}"
SITE_UID=10001   # the image's mpdp user

[ -x "$PY" ] || { echo "prepare: $PY missing; run \`make setup\` first" >&2; exit 1; }
"$HERE/host-setup.sh"
"$HERE/engine.sh" start
"$HERE/build-image.sh"

if [ ! -d "$OUT/sites/curator" ] || [ -n "${MPDP_REPROVISION:-}" ]; then
  "$PY" -m mpdp_services.cli.main provision sites "$HERE/federation.yaml" --out "$OUT/sites" --ca "$OUT/ca" --force
fi
parties="$("$PY" -c 'import sys, yaml; print(",".join(p["name"] for p in yaml.safe_load(open(sys.argv[1]))["parties"]))' "$HERE/federation.yaml")"
"$PY" -m mpdp_services.cli.main provision demo-data --parties "$parties" --out "$OUT/data" >/dev/null

# The federation's HTTP token: every role's metrics endpoint (and the dashboard) asks for it, Prometheus sends it.
mkdir -p "$OUT/metrics"
if [ ! -s "$OUT/metrics/token" ] || [ -n "${MPDP_REPROVISION:-}" ]; then
  (umask 077 && "$PY" -c 'import secrets; print(secrets.token_urlsafe(32))' > "$OUT/metrics/token")
fi
chmod 0700 "$OUT/metrics" && chmod 0600 "$OUT/metrics/token"

# The containers run as uid $SITE_UID: they must read their site folder (site.key is 0600), data and token.
if [ "$(id -u)" = 0 ]; then
  chown -R "$SITE_UID:$SITE_UID" "$OUT/sites" "$OUT/data" "$OUT/metrics"
else
  echo "prepare: not root; run: sudo chown -R $SITE_UID:$SITE_UID $OUT/sites $OUT/data $OUT/metrics" >&2
fi
chmod 0700 "$OUT/ca"
echo "prepare: ready. Next: docker compose up -d --wait && docker compose run --rm operator" >&2
