#!/usr/bin/env bash
# Walks through the API against any running instance:
#   create -> replay -> reuse (422) -> decline -> async payment finished by webhook -> refund
# Usage: API_KEY=sk_test_... scripts/demo.sh [BASE_URL]     (default http://127.0.0.1:8080)
# Works against `cargo run` (key from its log) and `docker compose up`
# (key sk_test_compose_demo_key_000000000001). Needs bash and curl only.
set -euo pipefail

BASE_URL="${1:-${BASE_URL:-http://127.0.0.1:8080}}"
API_KEY="${API_KEY:?set API_KEY to an API key (the demo key is in the service log)}"
RUN="demo-$(date +%s)-$$"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

field() { sed -n "s/.*\"$1\":\"\{0,1\}\([^\",}]*\)\"\{0,1\}.*/\1/p" | head -n 1; }

# post PATH KEY BODY -> prints the status; body in $TMP/body, headers in $TMP/headers
post() {
  curl -sS -o "$TMP/body" -D "$TMP/headers" -w '%{http_code}' -X POST "$BASE_URL$1" \
    -H "Authorization: Bearer $API_KEY" -H 'Content-Type: application/json' \
    -H "Idempotency-Key: $2" -d "$3"
}
get() { curl -sS -H "Authorization: Bearer $API_KEY" "$BASE_URL$1"; }
expect() { if [ "$1" != "$2" ]; then echo "FAILED: expected $2, got $1: $(cat "$TMP/body")" >&2; exit 1; fi; }
step() { printf '\n== %s\n' "$*"; }

step "1. Create a payment (Idempotency-Key: $RUN-1)"
status=$(post /v1/payments "$RUN-1" '{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa"}')
expect "$status" 201
cp "$TMP/body" "$TMP/first"
PAYMENT_ID=$(field id < "$TMP/body")
echo "201 $PAYMENT_ID status=$(field status < "$TMP/body")"

step "2. Retry it (same key, same request written differently): a replay, byte-identical"
status=$(post /v1/payments "$RUN-1" '{"currency": "USD", "payment_method": "pm_card_visa", "amount": 2000}')
expect "$status" 201
grep -qi '^idempotent-replayed: true' "$TMP/headers" || { echo "FAILED: no Idempotent-Replayed header" >&2; exit 1; }
cmp -s "$TMP/first" "$TMP/body" || { echo "FAILED: the replay differs from the first answer" >&2; exit 1; }
echo "201 Idempotent-Replayed: true, identical body"

step "3. Same key, different request: refused, nothing runs"
status=$(post /v1/payments "$RUN-1" '{"amount": 9999, "currency": "usd", "payment_method": "pm_card_visa"}')
expect "$status" 422
echo "422 code=$(field code < "$TMP/body")"

step "4. A declined card: a created payment whose status is failed"
status=$(post /v1/payments "$RUN-2" '{"amount": 500, "currency": "eur", "payment_method": "pm_card_declined"}')
expect "$status" 201
echo "201 status=$(field status < "$TMP/body") failure_code=$(field failure_code < "$TMP/body")"

step "5. An asynchronous payment: 202 processing, finished by the provider's signed webhook"
status=$(post /v1/payments "$RUN-3" '{"amount": 3000, "currency": "usd", "payment_method": "pm_card_async"}')
expect "$status" 202
ASYNC_ID=$(field id < "$TMP/body")
echo "202 $ASYNC_ID status=$(field status < "$TMP/body")"
for _ in $(seq 1 60); do
  state=$(get "/v1/payments/$ASYNC_ID" | field status)
  [ "$state" != "processing" ] && break
  sleep 0.5
done
expect "$state" succeeded
echo "webhook arrived: status=$state"
status=$(post /v1/payments "$RUN-3" '{"amount": 3000, "currency": "usd", "payment_method": "pm_card_async"}')
expect "$status" 201
echo "retry of the original request: 201 (replay of the final answer)"

step "6. Refund part of the first payment, then retry the refund"
status=$(post "/v1/payments/$PAYMENT_ID/refunds" "$RUN-r1" '{"amount": 500}')
expect "$status" 201
echo "201 refund $(field id < "$TMP/body") status=$(field status < "$TMP/body")"
status=$(post "/v1/payments/$PAYMENT_ID/refunds" "$RUN-r1" '{"amount": 500}')
expect "$status" 201
echo "retry: 201 replayed; amount_refunded=$(get "/v1/payments/$PAYMENT_ID" | field amount_refunded)"

printf '\nDemo finished against %s\n' "$BASE_URL"
