#!/usr/bin/env bash
# UCI Adult over a local federation: three parties (separate processes, mutual TLS) hold a third of adult.data each,
# encode it by the shared schema (examples/adult/schema.yaml), and train a Pathak 2010 logistic regression at ε = 1;
# the published model is scored on adult.test. Prints one JSON object with the accuracy.
#
#   bash examples/adult/run.sh            # data from ../shared/data/adult beside the repository
#   MPDP_DATA=/path/to/data bash examples/adult/run.sh
#
# Environment: PYTHON (default: the repository's .venv/bin/python from `make setup`, else python3) must import mpdp and
# mpdp_services (pip install -e . in the repository);
# EPSILON (default 1), LAMBDA (default 1.5e-3), KEY_BITS (default 2048; below 2048 the federation runs in test mode,
# which only tests should do: small keys are not secure). Everything else lives in a temporary
# folder removed at the end (KEEP=1 keeps it and prints where).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
DATA="${MPDP_DATA:-$REPO/../shared/data}/adult"
# The project's venv (`make setup`) unless PYTHON names another interpreter that imports mpdp.
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$REPO/.venv/bin/python" ]]; then PYTHON="$REPO/.venv/bin/python"; else PYTHON=python3; fi
fi
EPSILON="${EPSILON:-1}"
LAMBDA="${LAMBDA:-1.5e-3}"   # at ε = 1: mean accuracy 0.836, 95 % of runs ≥ 0.824 (examples/adult/accuracy.py --runs 1000)
KEY_BITS="${KEY_BITS:-2048}"
SCHEMA="$HERE/schema.yaml"
PARTIES=(party-1 party-2 party-3)
mpdp() { "$PYTHON" -m mpdp_services.cli.main "$@"; }

for f in adult.data.gz adult.test.gz; do
  [[ -f "$DATA/$f" ]] || { echo "run.sh: $DATA/$f is missing (the Adult files live in ../shared/data/adult beside the repository, or set MPDP_DATA)" >&2; exit 1; }
done

WORK="$(mktemp -d "${TMPDIR:-/tmp}/mpdp-adult.XXXXXX")"
FED_PID=""
cleanup() {
  if [[ -n "$FED_PID" ]] && kill -0 "$FED_PID" 2>/dev/null; then
    kill -TERM "$FED_PID" 2>/dev/null || true   # `federation up` stops every role it started on SIGTERM
    wait "$FED_PID" 2>/dev/null || true
  fi
  if [[ "${KEEP:-0}" == 1 ]]; then echo "run.sh: kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# 1. Split adult.data three ways, row by row (each party's file is its own, private, and stays in its folder).
gzip -dc "$DATA/adult.data.gz" | awk -v dir="$WORK" 'NF { print > (dir "/party-" (n++ % 3 + 1) ".csv") }'

# 2. Each party checks its file against the schema, locally (the report stays with the party).
for p in "${PARTIES[@]}"; do
  mpdp schema check "$SCHEMA" "$WORK/$p.csv" --json > "$WORK/$p.check.json" || { cat "$WORK/$p.check.json" >&2; exit 1; }
done

# 3. Start the federation: a curator and three parties, each dataset encoded by the schema.
args=(--workdir "$WORK/fed" --parties 3 --key-bits "$KEY_BITS" --schema "$SCHEMA")
for p in "${PARTIES[@]}"; do args+=(--dataset "adult=$p:$WORK/$p.csv"); done
(( KEY_BITS >= 2048 )) || args+=(--test-mode)
"$PYTHON" -m mpdp_services.cli.main federation up "${args[@]}" > "$WORK/federation.log" 2>&1 &  # not the function: $! must be its pid
FED_PID=$!
for _ in $(seq 600); do
  [[ -f "$WORK/fed/endpoints.json" ]] && break
  kill -0 "$FED_PID" 2>/dev/null || { echo "run.sh: the federation did not start:" >&2; cat "$WORK/federation.log" >&2; exit 1; }
  sleep 0.5
done
[[ -f "$WORK/fed/endpoints.json" ]] || { echo "run.sh: the federation did not start within 300 s" >&2; exit 1; }

# 4. Train at ε = 1; the job carries the schema's sha256, so a party with another schema would refuse it.
trained="$(mpdp train logreg --endpoints "$WORK/fed" --dataset adult --parties "$(IFS=,; echo "${PARTIES[*]}")" \
           --epsilon "$EPSILON" --lam "$LAMBDA" --schema "$SCHEMA" --json)"
job="$("$PYTHON" -c 'import json, sys; print(json.loads(sys.argv[1])["job_id"])' "$trained")"

# 5. Score the published model on adult.test, encoded by the same schema.
scored="$(mpdp predict --endpoints "$WORK/fed" --job "$job" --data "$DATA/adult.test.gz" --schema "$SCHEMA" --json)"

"$PYTHON" - "$trained" "$scored" "$SCHEMA" <<'PY'
import json
import sys

from mpdp.schema import Schema

trained, scored = json.loads(sys.argv[1]), json.loads(sys.argv[2])
schema = Schema.load(sys.argv[3])
print(json.dumps({
    "accuracy": scored["accuracy"],
    "epsilon": trained["epsilon"],
    "delta": trained["delta"],
    "lambda": trained["lambda"],
    "mode": trained["mode"],
    "job_id": trained["job_id"],
    "parties": trained["parties"],
    "dimension": trained["dimension"],
    "test_rows": scored["rows"],
    "schema_sha256": schema.sha256(),
    "guarantee": trained["guarantee"]["statement"],
}))
PY
