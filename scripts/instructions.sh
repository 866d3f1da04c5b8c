#!/usr/bin/env bash
# Instructions per request in the service, counted by callgrind: new payments and replays
# against PostgreSQL, from the load generator in a separate process. Unlike a rate on this
# shared two-core machine, a count of instructions is the same from one run to the next
# (within about 1 %), so it says whether a change to the service's own code made a request
# cheaper. It counts only the service: PostgreSQL and the kernel are scripts/cpu-split.sh's.
# Two things it counts differently from the CPU: valgrind's simulated CPU has no SHA
# extensions, so SHA-256 runs its software path (several times the instructions of the real
# one), and a `rep stos`/`rep movs` (glibc's memset and memcpy of large blocks) counts once
# per iteration. Prints numbers; asserts nothing.
# Usage: scripts/instructions.sh       (SECONDS_PER_RUN=15 CONNECTIONS=64 TOP=25 by default;
#                                       BIN=path/to/payments-api to count another build;
#                                       ONLY=new or ONLY=replay to count one scenario,
#                                       ONLY=live the floor: GET /health/live;
#                                       ONLY=loadgen counts the load generator's own
#                                       instructions per replay instead, the service
#                                       running natively)
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_RUN="${SECONDS_PER_RUN:-15}"
CONNECTIONS="${CONNECTIONS:-64}"
TOP="${TOP:-25}"
DB=payments_instructions
PORT="${BENCH_PORT:-18095}"
source scripts/lib/bench.sh
OUT="${TMPDIR:-/tmp}/payments-instructions"

command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
postgres_up
build_release
mkdir -p "$OUT"

# per_request TOTAL REQUESTS: TOTAL / REQUESTS, rounded (0 without requests)
per_request() { awk -v t="$1" -v n="$2" 'BEGIN { printf "%.0f", (n > 0) ? t / n : 0 }'; }

# count SCENARIO: the service under callgrind, warmed up, then SECONDS_PER_RUN of SCENARIO
# counted; prints the requests, the instructions and their ratio, and keeps the profile.
count() {
  local scenario=$1 service result requests total
  fresh_database "$DB"
  rm -f "$OUT/$scenario".*
  serve_measured "$DB" "$PORT" 0 "$OUT/$scenario.log" \
    valgrind --tool=callgrind --callgrind-out-file="$OUT/$scenario.%p"
  service=$SERVICE
  wait_ready "$PORT" "$OUT/$scenario.log" 120
  # Warm-up: prepared statements, caches, the replays' keys; then only the run is counted.
  "$LOADGEN" --key "$KEY" --url "http://127.0.0.1:$PORT" --scenario "$scenario" \
    --connections "$CONNECTIONS" --seconds 5 >/dev/null
  callgrind_control --zero "$service" >/dev/null 2>&1
  result=$("$LOADGEN" --key "$KEY" --url "http://127.0.0.1:$PORT" --scenario "$scenario" \
    --connections "$CONNECTIONS" --seconds "$SECONDS_PER_RUN" | grep '^RESULT')
  callgrind_control --dump=counted "$service" >/dev/null 2>&1
  kill "$service"; wait "$service" 2>/dev/null || true
  requests=$(echo "$result" | field requests)
  total=$(sed -n 's/^summary: //p' "$OUT/$scenario.$service.1")
  echo "$scenario: $requests requests, $total instructions: $(per_request "$total" "$requests") per request"
  echo "   (under callgrind: $result)"
  echo "   the $TOP functions of the most instructions, with what they call (per request):"
  callgrind_annotate --auto=no --inclusive=yes "$OUT/$scenario.$service.1" 2>/dev/null \
    | grep -E '^ *[0-9,]+ \( *[0-9.]+%\) ' | grep -E 'payments_api::|diesel::|actix_http::|serde_json::' \
    | sed -E 's/^ *([0-9,]+) \( *[0-9.]+%\)  [^ ]*\.(rs|c|S):/\1 /; s/ \[[^]]*\]$//' \
    | awk -v n="$requests" -v top="$TOP" '{ count = $1; gsub(",", "", count); $1 = "" }
        !seen[$0]++ && shown++ < top { printf "   %8.0f %s\n", count / n, substr($0, 1, 110) }'
  echo "   profile: $OUT/$scenario.$service.1 (callgrind_annotate)"
}

# count_loadgen: the load generator under callgrind against the service running natively,
# SECONDS_PER_RUN of replays (its 100 keys made first, counted with them): its instructions
# per request. It shares the machine's two cores with the service, so its own cost per
# request is taken from what the service can be given.
count_loadgen() {
  local profile="$OUT/loadgen.out" result requests total
  fresh_database "$DB"
  serve_measured "$DB" "$PORT" 0 "$OUT/loadgen.log"
  wait_ready "$PORT" "$OUT/loadgen.log"
  result=$(valgrind --tool=callgrind --callgrind-out-file="$profile" "$LOADGEN" --key "$KEY" \
    --url "http://127.0.0.1:$PORT" --scenario replay --replay-keys 100 \
    --connections "$CONNECTIONS" --seconds "$SECONDS_PER_RUN" 2>/dev/null | grep '^RESULT')
  kill "$SERVICE"; wait "$SERVICE" 2>/dev/null || true
  requests=$(( $(echo "$result" | field requests) + 100 ))
  total=$(sed -n 's/^summary: //p' "$profile")
  echo "loadgen: $requests requests (100 of them the new payments that make the keys), $total instructions: $(per_request "$total" "$requests") per request"
  echo "   profile: $profile (callgrind_annotate)"
}

if [ "${ONLY:-}" = loadgen ]; then
  echo "== instructions per request in the load generator, $CONNECTIONS connections, ${SECONDS_PER_RUN}s counted"
  count_loadgen
  exit 0
fi
echo "== instructions per request in the service, $CONNECTIONS connections, ${SECONDS_PER_RUN}s counted"
[ -n "${ONLY:-}" ] && [ "$ONLY" != new ] || count new
[ -n "${ONLY:-}" ] && [ "$ONLY" != replay ] || count replay
# The floor: the replay's headers to GET /health/live (only when asked for).
[ "${ONLY:-}" != live ] || count live
