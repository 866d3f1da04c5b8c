#!/usr/bin/env bash
# Measures payments-api against PostgreSQL's own limit on this machine, in one run:
#   new / replay / storm scenarios over HTTP from a separate load-generating process,
#   pgbench doing the same SQL work (the limit), the ratios, and the service's peak RSS;
#   then "new" again with 1 000 000 payments already in the table.
# Usage: scripts/bench.sh            (SECONDS_PER_RUN=10 CONNECTIONS=64 by default)
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_RUN="${SECONDS_PER_RUN:-10}"
CONNECTIONS="${CONNECTIONS:-64}"
PG="postgres://postgres@127.0.0.1:5432"
DB=payments_bench
PORT="${BENCH_PORT:-18080}"
KEY=sk_test_bench_key_00000000000000000001
PSQL=(psql -q -X -v ON_ERROR_STOP=1 -h 127.0.0.1 -U postgres)

command -v pgbench >/dev/null || { echo "pgbench is needed (apt-get install postgresql-client)" >&2; exit 1; }
pg_isready -q -h 127.0.0.1 -p 5432 || pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start
pg_isready -q -h 127.0.0.1 -p 5432 -t 10

echo "== building (release)"
cargo build --release --bins -q
cargo bench --bench loadgen --no-run -q 2>/dev/null || cargo bench --bench loadgen --no-run
LOADGEN=(cargo bench -q --bench loadgen --)

"${PSQL[@]}" -d postgres -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB"
DATABASE_URL="$PG/$DB" target/release/payments-api migrate >/dev/null

SERVICE_PID=
start_service() {
  DATABASE_URL="$PG/$DB" BIND_ADDR="127.0.0.1:$PORT" BOOTSTRAP_API_KEY="$KEY" \
    PROVIDER_LATENCY_MS=0 RUST_LOG=warn DATABASE_POOL_SIZE="${POOL_SIZE:-16}" \
    target/release/payments-api serve >/tmp/payments-bench-service.log 2>&1 &
  SERVICE_PID=$!
  for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$PORT/health/ready" >/dev/null 2>&1 && return; sleep 0.1; done
  echo "the service did not start" >&2; cat /tmp/payments-bench-service.log >&2; exit 1
}
stop_service() { kill "$SERVICE_PID" 2>/dev/null || true; wait "$SERVICE_PID" 2>/dev/null || true; }
trap 'stop_service' EXIT
peak_rss_mib() { awk '/VmHWM/ {printf "%.1f", $2/1024}' "/proc/$SERVICE_PID/status"; }
field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" | head -n 1; }

start_service
echo "== service (release, PostgreSQL, in-process provider at zero latency, $CONNECTIONS connections, ${SECONDS_PER_RUN}s per scenario)"
NEW=$("${LOADGEN[@]}" --url "http://127.0.0.1:$PORT" --key "$KEY" --scenario new --connections "$CONNECTIONS" --seconds "$SECONDS_PER_RUN" | grep '^RESULT')
REPLAY=$("${LOADGEN[@]}" --url "http://127.0.0.1:$PORT" --key "$KEY" --scenario replay --connections "$CONNECTIONS" --seconds "$SECONDS_PER_RUN" | grep '^RESULT')
charges_so_far() { curl -fsS "http://127.0.0.1:$PORT/metrics" | awk '/^provider_calls_total\{operation="charge"/ {s += $2} END {print s + 0}'; }
CHARGES_BEFORE=$(charges_so_far)
STORM=$("${LOADGEN[@]}" --url "http://127.0.0.1:$PORT" --key "$KEY" --scenario storm --storm 500 | grep '^RESULT')
STORM_CHARGES=$(( $(charges_so_far) - CHARGES_BEFORE ))
STORM_ROWS=$("${PSQL[@]}" -d "$DB" -tAc "SELECT count(*) FROM payments WHERE idempotency_key LIKE 'storm-%'")
RSS=$(peak_rss_mib)
stop_service

echo "== limit: pgbench, $CONNECTIONS clients, prepared"
"${PSQL[@]}" -d "$DB" -c "INSERT INTO merchants (id, name, created_at) VALUES ('mer_bench', 'bench', now()) ON CONFLICT DO NOTHING"
"${PSQL[@]}" -d "$DB" -c "INSERT INTO payments (id, merchant_id, idempotency_key, request_fingerprint, amount, currency, payment_method, metadata, status, amount_refunded, response_status, response_body, provider_attempts, created_at, updated_at)
  SELECT 'pay_lookup_' || n, 'mer_bench', 'lookup-' || n, 'fp', 2000, 'usd', 'pm_card_visa', '{}', 'succeeded', 0, 201, repeat('x', 400), 1, now(), now() FROM generate_series(1, 1000) n"
pgbench_tps() { pgbench -n -h 127.0.0.1 -U postgres -c "$CONNECTIONS" -j 2 -M prepared -T "$SECONDS_PER_RUN" -f "$1" "$DB" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p'; }
LIMIT_NEW=$(pgbench_tps scripts/pgbench/new_payment.sql)
LIMIT_LOOKUP=$(pgbench_tps scripts/pgbench/replay_lookup.sql)
echo "pgbench two-transaction new payment: $LIMIT_NEW tps; replay lookup: $LIMIT_LOOKUP tps"

echo "== preload: 1 000 000 payments"
"${PSQL[@]}" -d "$DB" -c "INSERT INTO payments (id, merchant_id, idempotency_key, request_fingerprint, amount, currency, payment_method, metadata, status, amount_refunded, response_status, response_body, provider_attempts, created_at, updated_at)
  SELECT 'pay_' || md5(n::text), 'mer_bench', 'preload-' || n, 'fp', 2000, 'usd', 'pm_card_visa', '{}', 'succeeded', 0, 201, repeat('x', 400), 1, now(), now() FROM generate_series(1, 1000000) n"
"${PSQL[@]}" -d "$DB" -c "VACUUM ANALYZE payments"
# Flush the bulk load now, so its checkpoint does not land inside the measurement.
"${PSQL[@]}" -d "$DB" -c "CHECKPOINT"
start_service
NEW_1M=$("${LOADGEN[@]}" --url "http://127.0.0.1:$PORT" --key "$KEY" --scenario new --connections "$CONNECTIONS" --seconds "$SECONDS_PER_RUN" | grep '^RESULT')
RSS_1M=$(peak_rss_mib)
stop_service

new_rps=$(echo "$NEW" | field rps); replay_rps=$(echo "$REPLAY" | field rps); new_1m_rps=$(echo "$NEW_1M" | field rps)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
cat <<SUMMARY

== summary ($(date -u +%F), $(nproc) cores, $(uname -m))
new       : $(echo "$NEW" | sed 's/^RESULT //')
replay    : $(echo "$REPLAY" | sed 's/^RESULT //')
storm     : $(echo "$STORM" | sed 's/^RESULT //' | tr '\n' ' ')
storm     : provider charge calls during the storm: $STORM_CHARGES, payment rows for its key: $STORM_ROWS (target: 1 and 1)
new @1M   : $(echo "$NEW_1M" | sed 's/^RESULT //')
limit     : new $LIMIT_NEW tps, lookup $LIMIT_LOOKUP tps
ratios    : new/limit $(ratio "$new_rps" "$LIMIT_NEW") (target >= 0.6), replay/limit $(ratio "$replay_rps" "$LIMIT_LOOKUP") (target >= 0.25), new@1M/new $(ratio "$new_1m_rps" "$new_rps") (target >= 0.9)
peak RSS  : ${RSS} MiB (empty table run), ${RSS_1M} MiB (1M run) (target <= 64 MiB)
SUMMARY
