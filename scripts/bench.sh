#!/usr/bin/env bash
# Measures payments-api against PostgreSQL's own limit on this machine, in one sitting:
#   pgbench (the two-transaction limit of a new payment's SQL with its event; the same SQL
#   batched 16 at a time, alone, with the ledger's rows, and with the events' numbering as
#   well), then the service over HTTP from a separate load-generating
#   process: new payments of one merchant, each run after a pgbench run of the naive limit
#   (a payment's claim insert and finishing update as two autocommit statements), new
#   payments spread over 100 merchants (the ledger's hot account), and replays, each run
#   after a pgbench run of the replay's lookup (three runs each: median and spread),
#   a storm of identical requests, new payments with the provider at 200 ms and 1 000
#   connections, then 10 000 (net.core.somaxconn raised to 16 384 for the sitting), a storm of 10 000 identical requests over three instances, and new
#   payments with 1 000 000 payments already stored, in turn with a new database
#   (scripts/table-size.sh). Peak RSS of the service throughout, and of the service alone
#   (provider-sim out of process) in a run of new payments; the storm's balance
#   transactions and `ledger verify` of the sitting's database at the end.
# Usage: scripts/bench.sh            (SECONDS_PER_RUN=10 CONNECTIONS=64 by default;
#                                     SLOW_CONNECTIONS for the first slow scenario, 1000)
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_RUN="${SECONDS_PER_RUN:-10}"
CONNECTIONS="${CONNECTIONS:-64}"
RUNS="${RUNS:-3}"
DB=payments_bench
PORT="${BENCH_PORT:-18080}"
source scripts/lib/bench.sh

command -v pgbench >/dev/null || { echo "pgbench is needed (apt-get install postgresql-client)" >&2; exit 1; }
postgres_up

# Linux's autogroup shares the CPU between sessions before threads: PostgreSQL's backends (the
# server's session) would get no more CPU than this script's session (the service and the load
# generator) however many of them are runnable, and wait on the run queue for up to 0.3-1.2 s
# when a burst of lookups needs more than half the machine (docs/benchmark.md, "the replay
# stall"). PostgreSQL on its own host, as in production, has no such neighbour; for the
# sitting the machine schedules threads alone, as it does with autogroup off
# (KEEP_AUTOGROUP=1 leaves it as it is).
AUTOGROUP=/proc/sys/kernel/sched_autogroup_enabled
SCHEDULING="autogroup not present"
if [ -r "$AUTOGROUP" ]; then
  SCHEDULING="autogroup $( [ "$(cat "$AUTOGROUP")" = 1 ] && echo on || echo off)"
  if [ "$(cat "$AUTOGROUP")" = 1 ] && [ "${KEEP_AUTOGROUP:-0}" != 1 ] && { echo 0 >"$AUTOGROUP"; } 2>/dev/null; then
    SCHEDULING="autogroup off for this sitting (on before it, and again after it)"
    RESTORE_AUTOGROUP=1
  fi
fi

# Past MAX_CONNECTIONS an instance's clients wait in its accept queue, which the kernel caps
# at net.core.somaxconn (4 096 by default): the 10 000-connection scenario needs room for
# them all, else connections are dropped and retried seconds later (docs/operations.md,
# "Connections"). Raised for the sitting, back after it.
SOMAXCONN=/proc/sys/net/core/somaxconn
if [ -w "$SOMAXCONN" ] && [ "$(cat "$SOMAXCONN")" -lt 16384 ]; then
  RESTORE_SOMAXCONN=$(cat "$SOMAXCONN")
  echo 16384 >"$SOMAXCONN"
fi

echo "== building (release)"
build_release
fresh_database "$DB"

PIDS=()
# start_service PORT LATENCY_MS: one instance, in the background; waits until it is ready.
start_service() {
  serve_measured "$DB" "$1" "$2" /tmp/payments-bench-service.log
  PIDS+=("$SERVICE")
  wait_ready "$1" /tmp/payments-bench-service.log
}
# The highest peak RSS of the sitting's measured instances; raise_peak RSS keeps the higher.
PEAK_RSS=0
raise_peak() { PEAK_RSS=$(awk -v a="$PEAK_RSS" -v b="$1" 'BEGIN { print (b > a) ? b : a }'); }
# Stops every instance, printing the peak RSS of each and remembering the highest.
stop_services() {
  local peaks=""
  for pid in "${PIDS[@]}"; do
    rss=$(peak_rss "$pid")
    peaks="$peaks $rss"
    raise_peak "$rss"
    kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
  done
  [ -n "$peaks" ] && echo "   peak RSS (MiB) of the instance(s) of this scenario:$peaks"
  PIDS=()
}
finish() {
  stop_services
  rm -f "${BATCHED_LEDGER:-}" "${BATCHED_EVERY:-}"
  if [ "${RESTORE_AUTOGROUP:-0}" = 1 ]; then echo 1 >"$AUTOGROUP"; fi
  if [ -n "${RESTORE_SOMAXCONN:-}" ]; then echo "$RESTORE_SOMAXCONN" >"$SOMAXCONN"; fi
}
trap finish EXIT
loadgen() { "${LOADGEN[@]}" --key "$KEY" "$@" | grep '^RESULT'; }
# median and spread ((max - min) / median) of numbers on stdin
stats() { sort -g | awk '{ v[NR] = $1 } END { m = v[int((NR + 1) / 2)]; printf "median %.0f, spread %.1f%% (%s runs: %s)", m, (m > 0 ? 100 * (v[NR] - v[1]) / m : 0), NR, join(v, NR) } function join(a, n,   s, i) { for (i = 1; i <= n; i++) s = s (i > 1 ? " / " : "") sprintf("%.0f", a[i]); return s }'; }
charges_at() { curl -fsS "http://127.0.0.1:$1/metrics" | awk '/^provider_calls_total\{operation="charge"/ {s += $2} END {print s + 0}'; }
mean_batch() { curl -fsS "http://127.0.0.1:$PORT/metrics" | awk -v s="$1" '$0 ~ "^db_group_commit_batch_size_sum\\{statement=\"" s "\"" {sum = $2} $0 ~ "^db_group_commit_batch_size_count\\{statement=\"" s "\"" {n = $2} END { if (n > 0) printf "%.1f", sum / n; else print "n/a" }'; }

echo "== limit: pgbench, $CONNECTIONS clients, prepared, $RUNS runs each"
"${PSQL[@]}" -d "$DB" -c "INSERT INTO merchants (id, name, created_at) VALUES ('mer_bench', 'bench', now()) ON CONFLICT DO NOTHING"
"${PSQL[@]}" -d "$DB" -c "INSERT INTO payments (id, merchant_id, idempotency_key, request_fingerprint, amount, currency, payment_method, metadata, status, amount_refunded, response_status, response_body, provider_attempts, created_at, updated_at)
  SELECT 'pay_lookup_' || n, 'mer_bench', 'lookup-' || n, 'fp', 2000, 'usd', 'pm_card_visa', '{}', 'succeeded', 0, 201, repeat('x', 400), 1, now(), now() FROM generate_series(1, 1000) n"
# pgbench_tps SCRIPT [DATABASE]: its transactions per second on DATABASE ($DB by default)
pgbench_tps() { pgbench -n -h 127.0.0.1 -U postgres -c "$CONNECTIONS" -j 2 -M prepared -T "$SECONDS_PER_RUN" -f "$1" "${2:-$DB}" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p'; }
# batched_rate SCRIPT: payments/s of a script whose transactions each write a batch of 16
batched_rate() { awk -v t="$(pgbench_tps "$1")" 'BEGIN { printf "%.0f", t * 16 }'; }
LIMIT_NAIVE=(); LIMIT_NEW=(); LIMIT_BATCHED=(); LIMIT_LEDGER=(); LIMIT_EVERY=(); LIMIT_LOOKUP=()
# The batch with the ledger's rows (new_payment_batched.sql with ledger_rows.sql before its
# COMMIT), and with the events' numbering after it as well: every write of a new payment.
BATCHED_LEDGER=$(mktemp --suffix=.sql); BATCHED_EVERY=$(mktemp --suffix=.sql)
{ grep -v '^COMMIT;$' scripts/pgbench/new_payment_batched.sql; cat scripts/pgbench/ledger_rows.sql; echo 'COMMIT;'; } >"$BATCHED_LEDGER"
cat "$BATCHED_LEDGER" scripts/pgbench/event_numbering.sql >"$BATCHED_EVERY"
"${PSQL[@]}" -d "$DB" -c "CREATE SEQUENCE IF NOT EXISTS bench_event_seq"
for _ in $(seq 1 "$RUNS"); do
  LIMIT_NEW+=("$(pgbench_tps scripts/pgbench/new_payment.sql)")
  LIMIT_BATCHED+=("$(batched_rate scripts/pgbench/new_payment_batched.sql)")
  LIMIT_LEDGER+=("$(batched_rate "$BATCHED_LEDGER")")
  LIMIT_EVERY+=("$(batched_rate "$BATCHED_EVERY")")
done
# The ledger is append-only (its triggers refuse DELETE); TRUNCATE fires no row trigger.
"${PSQL[@]}" -d "$DB" -c "TRUNCATE ledger_entries, balance_transactions"
"${PSQL[@]}" -d "$DB" -c "DELETE FROM events WHERE merchant_id = 'mer_bench'" -c "DELETE FROM payments WHERE merchant_id = 'mer_bench' AND idempotency_key NOT LIKE 'lookup-%'" -c "DROP SEQUENCE bench_event_seq" -c "VACUUM ANALYZE" -c "CHECKPOINT"

: >/tmp/payments-bench-service.log
start_service "$PORT" 0
# The naive limit and the lookup limit are measured in turn with the service's new payments
# and replays (pgbench, then the service, RUNS times): this host's speed drifts by a quarter
# within minutes, and a ratio of two numbers measured minutes apart would be as much the
# drift's as the service's. Each pair's ratio is kept too. The naive limit runs on a new
# database each time, as it did when it ran first: on a table with statistics (ANALYZE) and
# no vacuum, PostgreSQL plans its `UPDATE … WHERE id = … AND status = 'processing'` as a scan
# of the partial index of unfinished payments, whose dead entries grow with every run, and
# the "limit" halves (measured: 4 466 tps on a new database, 2 080 on the same one after a run
# of the service and its ANALYZE).
NAIVE_DB="${DB}_naive"
naive_limit() {
  fresh_database "$NAIVE_DB"
  "${PSQL[@]}" -d "$NAIVE_DB" -c "INSERT INTO merchants (id, name, created_at) VALUES ('mer_bench', 'bench', now())" -c "CHECKPOINT" >/dev/null
  pgbench_tps scripts/pgbench/new_payment_naive.sql "$NAIVE_DB"
}
echo "== new payments in turn with the naive limit (release, PostgreSQL, in-process provider at zero latency, $CONNECTIONS connections, ${SECONDS_PER_RUN}s per run)"
NEW=(); REPLAY=(); LIVE=(); NEW_PAIRS=(); REPLAY_PAIRS=(); LIVE_PAIRS=()
for _ in $(seq 1 "$RUNS"); do
  naive=$(naive_limit); LIMIT_NAIVE+=("$naive")
  "${PSQL[@]}" -d "$DB" -c "CHECKPOINT"
  line=$(loadgen --url "http://127.0.0.1:$PORT" --scenario new --connections "$CONNECTIONS" --seconds "$SECONDS_PER_RUN"); NEW+=("$line")
  NEW_PAIRS+=("$(ratio "$(echo "$line" | field rps)" "$naive")")
  echo "$line (naive just before: $naive tps)"
done
CLAIM_BATCH=$(mean_batch payment_claim); FINISH_BATCH=$(mean_batch payment_finish)
# The same payments spread over 100 merchants (a key each, taken in turn): one merchant's
# balance must not be a hot row that serialises its payments.
KEYS_100=$(for i in $(seq 1 100); do DATABASE_URL="$PG/$DB" target/release/payments-api api-keys create --merchant "bench-$i" 2>/dev/null; done | paste -sd, -)
SPREAD=()
for _ in $(seq 1 "$RUNS"); do
  line=$("${LOADGEN[@]}" --key "$KEYS_100" --url "http://127.0.0.1:$PORT" --scenario new --connections "$CONNECTIONS" --seconds "$SECONDS_PER_RUN" | grep '^RESULT'); echo "$line"; SPREAD+=("$line")
done
for _ in $(seq 1 "$RUNS"); do
  lookup=$(pgbench_tps scripts/pgbench/replay_lookup.sql); LIMIT_LOOKUP+=("$lookup")
  line=$(loadgen --url "http://127.0.0.1:$PORT" --scenario replay --connections "$CONNECTIONS" --seconds "$SECONDS_PER_RUN"); REPLAY+=("$line")
  REPLAY_PAIRS+=("$(ratio "$(echo "$line" | field rps)" "$lookup")")
  echo "$line (lookup just before: $lookup tps)"
  # The replay's headers to GET /health/live: the floor of a request in this service's HTTP
  # stack, so the replay ratio that no answer of this service could pass on this host.
  line=$(loadgen --url "http://127.0.0.1:$PORT" --scenario live --connections "$CONNECTIONS" --seconds "$SECONDS_PER_RUN"); LIVE+=("$line")
  LIVE_PAIRS+=("$(ratio "$(echo "$line" | field rps)" "$lookup")")
  echo "$line"
done
CHARGES_BEFORE=$(charges_at "$PORT")
STORM=$(loadgen --url "http://127.0.0.1:$PORT" --scenario storm --storm 500 --connections 500)
STORM_CHARGES=$(( $(charges_at "$PORT") - CHARGES_BEFORE ))
stop_services

# Each scenario starts with the WAL of the ones before it flushed, so that PostgreSQL's
# checkpoint of their writes does not land inside its measurement.
flush_wal() { "${PSQL[@]}" -d "$DB" -c "CHECKPOINT"; }

# The same new payments with the provider out of process (provider-sim over HTTP): the
# service's own memory, without the in-process simulator's book of every charge it made.
flush_wal
SIM_PORT=$((PORT + 10))
echo "== service alone: provider-sim out of process, $CONNECTIONS connections"
PROVIDER_SIM_BIND="127.0.0.1:$SIM_PORT" RUST_LOG=warn target/release/provider-sim >>/tmp/payments-bench-service.log 2>&1 &
SIM_PID=$!
for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$SIM_PORT/v1/charges?limit=1" >/dev/null 2>&1 && break; sleep 0.1; done
PROVIDER_URL="http://127.0.0.1:$SIM_PORT" start_service "$PORT" 0
ALONE=$(loadgen --url "http://127.0.0.1:$PORT" --scenario new --connections "$CONNECTIONS" --seconds "$SECONDS_PER_RUN"); echo "$ALONE"
ALONE_RSS=$(peak_rss "${PIDS[0]}")
SIM_RSS=$(peak_rss "$SIM_PID")
stop_services
kill "$SIM_PID" 2>/dev/null || true; wait "$SIM_PID" 2>/dev/null || true

flush_wal
SLOW_MS=200; SLOW_CONNECTIONS="${SLOW_CONNECTIONS:-1000}"
# A closed loop of SLOW_CONNECTIONS waiting SLOW_MS per request cannot go faster than this.
SLOW_CEILING=$((SLOW_CONNECTIONS * 1000 / SLOW_MS))
echo "== slow provider: $SLOW_MS ms, $SLOW_CONNECTIONS connections"
start_service "$PORT" "$SLOW_MS"
SLOW=$(loadgen --url "http://127.0.0.1:$PORT" --scenario new --connections "$SLOW_CONNECTIONS" --seconds "$SECONDS_PER_RUN"); echo "$SLOW"
stop_services

# 10 000 clients: the instance holds MAX_CONNECTIONS (3 072) of them at once, the rest wait in
# its accept queue. Its peak RSS has a target of its own (160 MiB), not the 64 MiB of the
# scenarios up to 1 000 connections.
flush_wal
echo "== slow provider: $SLOW_MS ms, 10 000 connections"
start_service "$PORT" "$SLOW_MS"
SLOW10K=$(loadgen --url "http://127.0.0.1:$PORT" --scenario new --connections 10000 --seconds "$SECONDS_PER_RUN"); echo "$SLOW10K"
SLOW10K_RSS=$(peak_rss "${PIDS[0]}")
kill "${PIDS[0]}" 2>/dev/null || true; wait "${PIDS[0]}" 2>/dev/null || true
PIDS=()
echo "   peak RSS (MiB) of the instance: $SLOW10K_RSS"

flush_wal
echo "== storm: 10 000 identical requests over 3 instances (provider at 200 ms), 1 000 at a time"
for i in 0 1 2; do start_service $((PORT + i)) 200; done
CHARGES_BEFORE=0; for i in 0 1 2; do CHARGES_BEFORE=$((CHARGES_BEFORE + $(charges_at $((PORT + i))))); done
STORM3=$(loadgen --url "http://127.0.0.1:$PORT,http://127.0.0.1:$((PORT + 1)),http://127.0.0.1:$((PORT + 2))" --scenario storm --storm 10000 --connections 1000)
CHARGES_AFTER=0; for i in 0 1 2; do CHARGES_AFTER=$((CHARGES_AFTER + $(charges_at $((PORT + i))))); done
STORM3_CHARGES=$((CHARGES_AFTER - CHARGES_BEFORE))
STORM_ROWS=$("${PSQL[@]}" -d "$DB" -tAc "SELECT count(*) FROM payments WHERE idempotency_key LIKE 'storm-%'")
STORM_TXNS=$("${PSQL[@]}" -d "$DB" -tAc "SELECT count(*) FROM balance_transactions t JOIN payments p ON p.id = t.source_id WHERE p.idempotency_key LIKE 'storm-%'")
stop_services

# New payments on a database that holds 1 000 000 payments with all their rows, made through
# the service, measured in turn with runs on a new database (scripts/table-size.sh).
echo "== new payments with 1 000 000 payments stored, in turn with a new database (scripts/table-size.sh)"
SIZE_LOG=/tmp/payments-bench-size.log
RUNS="$RUNS" SECONDS_PER_RUN="$SECONDS_PER_RUN" CONNECTIONS="$CONNECTIONS" BENCH_PORT=$((PORT + 20)) \
  scripts/table-size.sh | tee "$SIZE_LOG"
SIZE_RATIOS=$(sed -n 's/^stored\/new per pair: //p' "$SIZE_LOG")
SIZE_RSS=$(sed -n 's/^peak RSS (MiB) of the two instances: //p' "$SIZE_LOG")
for rss in $SIZE_RSS; do raise_peak "$rss"; done
# Its last line either way: a violation is reported in the summary, not by a silent exit.
LEDGER=$(DATABASE_URL="$PG/$DB" target/release/payments-api ledger verify 2>&1 | tail -n 1 || true)

new_rps=$(for l in "${NEW[@]}"; do echo "$l" | field rps; done | median)
replay_rps=$(for l in "${REPLAY[@]}"; do echo "$l" | field rps; done | median)
live_rps=$(for l in "${LIVE[@]}"; do echo "$l" | field rps; done | median)
limit_new=$(printf '%s\n' "${LIMIT_NEW[@]}" | median)
limit_naive=$(printf '%s\n' "${LIMIT_NAIVE[@]}" | median)
spread_rps=$(for l in "${SPREAD[@]}"; do echo "$l" | field rps; done | median)
limit_batched=$(printf '%s\n' "${LIMIT_BATCHED[@]}" | median)
limit_ledger=$(printf '%s\n' "${LIMIT_LEDGER[@]}" | median)
limit_every=$(printf '%s\n' "${LIMIT_EVERY[@]}" | median)
limit_lookup=$(printf '%s\n' "${LIMIT_LOOKUP[@]}" | median)
slow_rps=$(echo "$SLOW" | field rps)
slow10k_rps=$(echo "$SLOW10K" | field rps)
cat <<SUMMARY

== summary ($(date -u +%F), $(nproc) cores, $(uname -m), $SCHEDULING)
pgbench   : naive (claim insert + finishing update, two autocommit statements) $(printf '%s\n' "${LIMIT_NAIVE[@]}" | stats) tps
pgbench   : two-transaction new payment $(printf '%s\n' "${LIMIT_NEW[@]}" | stats) tps
pgbench   : batched (16 per batch) $(printf '%s\n' "${LIMIT_BATCHED[@]}" | stats) payments/s
pgbench   : batched with the ledger's rows (every row a new payment inserts) $(printf '%s\n' "${LIMIT_LEDGER[@]}" | stats) payments/s; $(ratio "$limit_ledger" "$limit_naive")x the naive limit
pgbench   : batched with the ledger's rows and the events' numbering (every write of a new payment) $(printf '%s\n' "${LIMIT_EVERY[@]}" | stats) payments/s; $(ratio "$limit_every" "$limit_naive")x the naive limit
pgbench   : replay lookup $(printf '%s\n' "${LIMIT_LOOKUP[@]}" | stats) tps
new       : $(for l in "${NEW[@]}"; do echo "$l" | field rps; done | stats) requests/s; last run: $(echo "${NEW[-1]}" | sed 's/^RESULT //')
            mean batch: $CLAIM_BATCH claims, $FINISH_BATCH finishes per statement
new x100  : $(for l in "${SPREAD[@]}"; do echo "$l" | field rps; done | stats) requests/s over 100 merchants; last run: $(echo "${SPREAD[-1]}" | sed 's/^RESULT //')
replay    : $(for l in "${REPLAY[@]}"; do echo "$l" | field rps; done | stats) requests/s; last run: $(echo "${REPLAY[-1]}" | sed 's/^RESULT //')
live      : $(for l in "${LIVE[@]}"; do echo "$l" | field rps; done | stats) requests/s (GET /health/live with the replay's headers: the floor of a request here); replay/live $(ratio "$replay_rps" "$live_rps"), live/lookup limit $(ratio "$live_rps" "$limit_lookup") (each run over the lookup run before its replay: $(printf '%s\n' "${LIVE_PAIRS[@]}" | paste -sd' ')), the most any replay could reach on this host
storm     : $(echo "$STORM" | sed 's/^RESULT //' | tr '\n' ' ') provider charges: $STORM_CHARGES
slow      : $(echo "$SLOW" | sed 's/^RESULT //')
slow 10k  : $(echo "$SLOW10K" | sed 's/^RESULT //'); /new $(ratio "$slow10k_rps" "$new_rps") (target >= 0.8, 0 errors, 0 starved: every client answered during the run); peak RSS $SLOW10K_RSS MiB (target <= 160 MiB)
storm x3  : $(echo "$STORM3" | sed 's/^RESULT //' | tr '\n' ' ') provider charges: $STORM3_CHARGES, rows for storm keys: $STORM_ROWS, their balance transactions: $STORM_TXNS (2 storms: target 2 and 2)
new @1M   : stored/new per pair: $SIZE_RATIOS (its runs: $SIZE_LOG)
ledger    : new (one merchant)/new over 100 merchants $(ratio "$new_rps" "$spread_rps") (target >= 0.9), new/naive limit $(ratio "$new_rps" "$limit_naive") (target >= 2; each run over the naive run just before it: $(printf '%s\n' "${NEW_PAIRS[@]}" | paste -sd' '))
ratios    : new/two-transaction limit $(ratio "$new_rps" "$limit_new") (target >= 1.0), new/batched limit $(ratio "$new_rps" "$limit_batched"), new/batched limit with the ledger $(ratio "$new_rps" "$limit_ledger"), with every write $(ratio "$new_rps" "$limit_every"), replay/lookup limit $(ratio "$replay_rps" "$limit_lookup") (target >= 2.5; each run over the lookup run just before it: $(printf '%s\n' "${REPLAY_PAIRS[@]}" | paste -sd' '))
            slow($SLOW_MS ms, $SLOW_CONNECTIONS conn)/new $(ratio "$slow_rps" "$new_rps") (target >= 0.8; $SLOW_CONNECTIONS connections at $SLOW_MS ms allow at most $SLOW_CEILING/s: $(ratio "$slow_rps" "$SLOW_CEILING") of that), new@1M/new ${SIZE_RATIOS##* } (target >= 0.9; in turn with a new database)
peak RSS  : ${PEAK_RSS} MiB, the highest of every instance over every scenario (target <= 64 MiB)
alone     : $(echo "$ALONE" | sed 's/^RESULT //'); peak RSS of the service $ALONE_RSS MiB, of provider-sim $SIM_RSS MiB
ledger    : $LEDGER
SUMMARY
