#!/usr/bin/env bash
# Checks the OpenAPI document the service serves with tools that are not ours:
#   1. starts the built `payments-api` on a free port with a temporary SQLite database,
#   2. validates GET /openapi.json with openapi-spec-validator (OpenAPI 3.1 rules, unique
#      operation ids, resolvable references),
#   3. generates a Python client with openapi-python-client (warnings are failures) and
#      makes a payment with it, replays it, reads it back and lists it; then registers a
#      local webhook endpoint, has the service send it a test event and parses that.
# The Python tools go into a venv under target/ (installed with pip on first use, pinned).
# Usage: scripts/check-openapi.sh   (PAYMENTS_API_BIN=path to use a binary already built)
set -euo pipefail
cd "$(dirname "$0")/.."

WORK="target/openapi-check"
VENV="$WORK/venv"
REQUIREMENTS="openapi-spec-validator==0.9.0 openapi-python-client==0.29.1"
step() { printf '\n==> %s\n' "$*"; }
fail() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

step "Python tools in $VENV"
if [ "$(cat "$VENV/requirements" 2>/dev/null)" != "$REQUIREMENTS" ]; then
  rm -rf "$VENV"
  python3 -m venv "$VENV" || fail "python3 -m venv failed (Debian: apt-get install -y python3-venv)"
  # shellcheck disable=SC2086 # one word per requirement
  "$VENV/bin/pip" install --quiet --disable-pip-version-check $REQUIREMENTS \
    || fail "pip could not install $REQUIREMENTS"
  echo "$REQUIREMENTS" > "$VENV/requirements"
fi
echo "$REQUIREMENTS"
# The generator runs ruff (one of its dependencies) on what it writes.
export PATH="$PWD/$VENV/bin:$PATH"

BIN="${PAYMENTS_API_BIN:-}"
if [ -z "$BIN" ]; then
  step "cargo build --bin payments-api"
  cargo build --quiet --bin payments-api
  BIN="target/debug/payments-api"
fi

TMP="$(mktemp -d)"
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT

step "payments-api on a free port, SQLite in $TMP"
API_KEY="sk_test_openapi_check_$(date +%s)_$$"
# Port 0: the service binds a free port and logs its URL, so no port can be taken between
# choosing and binding. Everything else is set here, so a .env file cannot change the run.
env -u PROVIDER_URL -u WEBHOOK_SECRETS \
  DATABASE_URL="sqlite://$TMP/payments.db" BIND_ADDR="127.0.0.1:0" \
  BOOTSTRAP_API_KEY="$API_KEY" LOG_FORMAT=json RUST_LOG=info WEBHOOK_ALLOW_PRIVATE_URLS=true \
  "$BIN" serve > "$TMP/server.log" 2>&1 &
SERVER_PID=$!
BASE_URL=""
for _ in $(seq 1 100); do
  BASE_URL="$(grep -o '"url":"http://127\.0\.0\.1:[0-9]*"' "$TMP/server.log" | head -n 1 | cut -d'"' -f4 || true)"
  [ -n "$BASE_URL" ] && break
  kill -0 "$SERVER_PID" 2>/dev/null || { cat "$TMP/server.log" >&2; fail "payments-api exited at start"; }
  sleep 0.1
done
[ -n "$BASE_URL" ] || { cat "$TMP/server.log" >&2; fail "payments-api did not log its URL within 10 s"; }
echo "$BASE_URL"

step "GET /openapi.json"
DOC="$TMP/openapi.json"
status="$(curl -sS -o "$DOC" -w '%{http_code}' "$BASE_URL/openapi.json")" || fail "cannot reach $BASE_URL"
[ "$status" = 200 ] || fail "GET /openapi.json answered $status: $(head -c 500 "$DOC")"
"$VENV/bin/python" -c 'import json, sys; d = json.load(open(sys.argv[1])); print(d["openapi"], len(d["paths"]), "paths")' "$DOC"

step "openapi-spec-validator"
"$VENV/bin/openapi-spec-validator" "$DOC" || fail "the document is not valid OpenAPI"

step "openapi-python-client generate (warnings fail)"
cat > "$TMP/generator.yaml" <<'EOF'
project_name_override: payments-api-client
package_name_override: payments_api_client
EOF
CLIENT="$TMP/client"
"$VENV/bin/openapi-python-client" generate --path "$DOC" --config "$TMP/generator.yaml" \
  --meta none --output-path "$CLIENT/payments_api_client" --overwrite --fail-on-warning \
  || fail "openapi-python-client could not generate a clean client"

step "the generated client makes a payment, reads it back, and parses a test delivery"
PYTHONPATH="$CLIENT" "$VENV/bin/python" scripts/openapi_client_smoke.py "$BASE_URL" "$API_KEY" \
  || { tail -n 20 "$TMP/server.log" >&2; fail "the generated client could not make and read a payment, or parse a test delivery"; }

kill -0 "$SERVER_PID" 2>/dev/null || fail "payments-api died during the check"
step "OpenAPI check passed"
