#!/usr/bin/env bash
# Does a new payment slow down as the database grows? Two services, one on a new database
# and one on a database that holds ROWS payments of the same merchant, made through the
# service (with their events, balance transactions and ledger entries), measured in turn
# (new payments, 64 connections, in-process provider at zero latency), so that the host's
# drift falls on both alike. Per run: the rate, the p99, and per payment the WAL written, its
# full-page images, and the blocks PostgreSQL found in its shared buffers or had to read.
# Prints numbers; asserts nothing.
# Usage: scripts/table-size.sh         (ROWS=1000000 RUNS=3 SECONDS_PER_RUN=10 by default)
set -euo pipefail
cd "$(dirname "$0")/.."

ROWS="${ROWS:-1000000}"
RUNS="${RUNS:-3}"
SECONDS_PER_RUN="${SECONDS_PER_RUN:-10}"
CONNECTIONS="${CONNECTIONS:-64}"
PORT="${BENCH_PORT:-18100}"
source scripts/lib/bench.sh

postgres_up
build_release
: >/tmp/payments-table-size.log

# prepare DB: a new database with a merchant and its key; prints the key.
prepare() {
  fresh_database "$1"
  DATABASE_URL="$PG/$1" "$(service_binary)" api-keys create --merchant size 2>/dev/null
}
SMALL=payments_size_small LARGE=payments_size_large
SMALL_KEY=$(prepare "$SMALL") LARGE_KEY=$(prepare "$LARGE")
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true' EXIT
serve_measured "$SMALL" "$PORT" 0 /tmp/payments-table-size.log; PIDS+=("$SERVICE")
serve_measured "$LARGE" $((PORT + 1)) 0 /tmp/payments-table-size.log; PIDS+=("$SERVICE")
for p in "$PORT" $((PORT + 1)); do wait_ready "$p" /tmp/payments-table-size.log; done

# The large database grows through the service itself, so that every table a payment writes
# (events, balance transactions, ledger entries) holds its share, as in production.
echo "== growing the second database to $ROWS payments through the service"
stored() { "${PSQL[@]}" -d "$LARGE" -At -c "SELECT count(*) FROM payments"; }
started=$SECONDS
while [ "$(stored)" -lt "$ROWS" ]; do
  "$LOADGEN" --key "$LARGE_KEY" --url "http://127.0.0.1:$((PORT + 1))" --scenario new \
    --connections "$CONNECTIONS" --seconds 30 >/dev/null
done
echo "   $(stored) payments in $((SECONDS - started)) s"
# The instance that grew it starts again: what it measures is then its runs' memory, not the
# in-process provider's book of every charge it made (kept 8 days, docs/provider.md).
echo "   peak RSS of the instance that grew it: $(peak_rss "${PIDS[1]}") MiB (with its in-process provider's book of the charges)"
kill "${PIDS[1]}"; wait "${PIDS[1]}" 2>/dev/null || true
"${PSQL[@]}" -d "$LARGE" -c "VACUUM ANALYZE" -c "CHECKPOINT"
serve_measured "$LARGE" $((PORT + 1)) 0 /tmp/payments-table-size.log; PIDS[1]=$SERVICE
wait_ready $((PORT + 1)) /tmp/payments-table-size.log
"${PSQL[@]}" -d "$LARGE" -At -c "SELECT '   rows: ' || string_agg(relname || ' ' || n_live_tup, ', ' ORDER BY relname) FROM pg_stat_user_tables WHERE n_live_tup > 1000"
"${PSQL[@]}" -d "$LARGE" -At -c "SELECT '   the database: ' || pg_size_pretty(pg_database_size(current_database())) || '; shared_buffers ' || current_setting('shared_buffers')"

# counters DB: WAL bytes, full-page images, blocks hit and read (the whole cluster's WAL; the
# database's blocks)
counters() {
  "${PSQL[@]}" -d "$1" -At -F ' ' -c "SELECT w.wal_bytes, w.wal_fpi, d.blks_hit, d.blks_read FROM pg_stat_wal w, pg_stat_database d WHERE d.datname = current_database()"
}
# run NAME DB PORT KEY: one run; prints its line and keeps its rate in RATE
run() {
  local name=$1 db=$2 port=$3 key=$4 before after result n
  "${PSQL[@]}" -d "$db" -c "CHECKPOINT"
  before=$(counters "$db")
  FROM_LSN=$("${PSQL[@]}" -d "$db" -At -c "SELECT pg_current_wal_lsn()")
  result=$("$LOADGEN" --key "$key" --url "http://127.0.0.1:$port" --scenario new \
    --connections "$CONNECTIONS" --seconds "$SECONDS_PER_RUN" | grep '^RESULT')
  sleep 1 # the backends report their statistics at most once a second
  after=$(counters "$db")
  TO_LSN=$("${PSQL[@]}" -d "$db" -At -c "SELECT pg_current_wal_lsn()")
  n=$(echo "$result" | field requests)
  RATE=$(echo "$result" | field rps)
  echo "$name: $(echo "$result" | sed 's/^RESULT //')"
  echo "$before $after $n" | awk '{ n = ($9 > 0) ? $9 : 1; printf "   per payment: WAL %.0f bytes, %.2f full-page images, %.1f blocks hit, %.2f read\n", ($5 - $1) / n, ($6 - $2) / n, ($7 - $3) / n, ($8 - $4) / n }'
}

# each warmed up, then measured in turn
for p in "$PORT:$SMALL_KEY" "$((PORT + 1)):$LARGE_KEY"; do
  "$LOADGEN" --key "${p#*:}" --url "http://127.0.0.1:${p%%:*}" --scenario new --connections "$CONNECTIONS" --seconds 3 >/dev/null
done
echo "== new payments, $CONNECTIONS connections, ${SECONDS_PER_RUN}s per run, in turn"
RATIOS=()
for i in $(seq 1 "$RUNS"); do
  run "run $i, new database" "$SMALL" "$PORT" "$SMALL_KEY"; small=$RATE
  run "run $i, $ROWS stored" "$LARGE" $((PORT + 1)) "$LARGE_KEY"; large=$RATE
  LARGE_WAL=("$FROM_LSN" "$TO_LSN")
  RATIOS+=("$(ratio "$large" "$small")")
  echo "   stored/new: ${RATIOS[-1]}"
done
echo "stored/new per pair: ${RATIOS[*]}; median $(printf '%s\n' "${RATIOS[@]}" | median)"

echo "peak RSS (MiB) of the two instances: $(for p in "${PIDS[@]}"; do printf '%s ' "$(peak_rss "$p")"; done)"

# Which pages the stored database's last run wrote whole into the WAL (the first change of a
# page after a checkpoint): by relation, from pg_walinspect.
echo "== full-page images of the last run on the stored database, by relation (pg_walinspect)"
"${PSQL[@]}" -d "$LARGE" -c "CREATE EXTENSION IF NOT EXISTS pg_walinspect"
"${PSQL[@]}" -d "$LARGE" -c "
  WITH image AS (
    SELECT regexp_matches(block_ref, 'rel [0-9]+/([0-9]+)/([0-9]+) fork [a-z_]+ blk ([0-9]+) \\(FPW\\)', 'g') AS m
    FROM pg_get_wal_records_info('${LARGE_WAL[0]}', '${LARGE_WAL[1]}') WHERE block_ref LIKE '%FPW%')
  SELECT CASE WHEN i.m[1]::oid <> d.oid THEN '(other databases)' ELSE coalesce(c.relname, i.m[2]) END AS relation,
         count(*) AS images, count(DISTINCT i.m[2] || '/' || i.m[3]) AS pages
  FROM image i CROSS JOIN (SELECT oid FROM pg_database WHERE datname = current_database()) d
  LEFT JOIN pg_class c ON c.relfilenode = i.m[2]::oid AND i.m[1]::oid = d.oid
  GROUP BY 1 ORDER BY 2 DESC LIMIT 6"
