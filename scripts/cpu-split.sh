#!/usr/bin/env bash
# Where the time of a new payment goes on this machine: new payments (one merchant, 64
# connections, in-process provider at zero latency) against PostgreSQL, with the CPU time the
# service, PostgreSQL and the load generator each spent, per payment, and (where `perf` works)
# what PostgreSQL spent its share on; the WAL each payment wrote. Prints numbers; asserts
# nothing.
# Usage: scripts/cpu-split.sh            (SECONDS_PER_RUN=10 RUNS=2 PROFILE=1 by default)
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_RUN="${SECONDS_PER_RUN:-10}"
RUNS="${RUNS:-2}"
DB=payments_cpu_split
PORT="${BENCH_PORT:-18090}"
source scripts/lib/bench.sh
TICK=$(getconf CLK_TCK)

postgres_up
build_release
fresh_database "$DB"

: >/tmp/payments-cpu-split.log
serve_measured "$DB" "$PORT" 0 /tmp/payments-cpu-split.log
trap 'kill $SERVICE 2>/dev/null || true' EXIT
wait_ready "$PORT" /tmp/payments-cpu-split.log

# user + system CPU ticks of the given processes (those still alive: one may end between
# being listed and being read, as a psql's backend does)
ticks() {
  local t=0 p v
  for p in "$@"; do
    v=$(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null) && [ -n "$v" ] && t=$((t + v))
  done
  echo "$t"
}
# busy ticks of the whole machine: user, nice, system, irq, softirq, steal (not idle, iowait)
machine() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }
per_payment() { awk -v t="$1" -v n="$2" -v hz="$TICK" 'BEGIN { printf "%.0f", (n > 0) ? t / hz * 1e6 / n : 0 }'; }

"$LOADGEN" --key "$KEY" --url "http://127.0.0.1:$PORT" --scenario new --connections 64 --seconds 3 >/dev/null
echo "== new payments, 64 connections, ${SECONDS_PER_RUN}s per run; CPU per payment in microseconds"
for _ in $(seq 1 "$RUNS"); do
  postgres=$(pgrep -d ' ' -x postgres || true)
  s0=$(ticks "$SERVICE"); p0=$(ticks $postgres); m0=$(machine)
  w0=$("${PSQL[@]}" -d "$DB" -At -c "SELECT pg_current_wal_lsn()")
  "$LOADGEN" --key "$KEY" --url "http://127.0.0.1:$PORT" --scenario new --connections 64 \
    --seconds "$SECONDS_PER_RUN" >/tmp/payments-cpu-split.out &
  generator=$!
  # The generator's ticks, read until it exits (an exited process has none to read).
  g=0; while kill -0 "$generator" 2>/dev/null; do g=$(ticks "$generator"); sleep 0.2; done
  s1=$(ticks "$SERVICE"); p1=$(ticks $postgres); m1=$(machine)
  wal=$("${PSQL[@]}" -d "$DB" -At -c "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$w0')")
  result=$(grep '^RESULT' /tmp/payments-cpu-split.out)
  n=$(echo "$result" | field requests)
  echo "$result"
  echo "   service $(per_payment $((s1 - s0)) "$n") µs, PostgreSQL $(per_payment $((p1 - p0)) "$n") µs, load generator $(per_payment "$g" "$n") µs, the machine busy $(per_payment $((m1 - m0)) "$n") µs (the rest: the kernel's network work, other processes)"
  echo "   WAL written per payment: $(awk -v w="$wal" -v n="$n" 'BEGIN { printf "%.0f", (n > 0) ? w / n : 0 }') bytes"
done
"${PSQL[@]}" -d "$DB" -At -c "SELECT 'rows per payment: ' || string_agg(relname || ' ' || round(n_tup_ins::numeric / greatest(1, (SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'payments')), 2) || ' inserted', ', ' ORDER BY relname) FROM pg_stat_user_tables WHERE n_tup_ins > 100"
"${PSQL[@]}" -d "$DB" -At -c "SELECT 'index entries written per payment (inserts and non-HOT updates): ' || round(sum((t.n_tup_ins + t.n_tup_upd - t.n_tup_hot_upd) * i.indexes)::numeric / greatest(1, max(CASE WHEN t.relname = 'payments' THEN t.n_tup_ins END)), 1) FROM pg_stat_user_tables t JOIN (SELECT indrelid, count(*) AS indexes FROM pg_index GROUP BY indrelid) i ON i.indrelid = t.relid"
curl -fsS "http://127.0.0.1:$PORT/metrics" | awk '/^db_group_commit_batch_size_(sum|count)/ { split($1, k, "\""); v[k[2] " " ($1 ~ /_sum/ ? "sum" : "n")] = $2 } END { for (s in v) if (s ~ / sum$/) { name = substr(s, 1, length(s) - 4); printf "mean batch %s: %.1f\n", name, v[s] / v[name " n"] } }'

if [ "${PROFILE:-1}" = 1 ] && command -v perf >/dev/null; then
  # A run of its own: recording slows the machine, so its rate is not one of the above.
  rm -f /tmp/payments-cpu-split.perf
  "$LOADGEN" --key "$KEY" --url "http://127.0.0.1:$PORT" --scenario new --connections 64 --seconds 8 >/dev/null &
  generator=$!
  sleep 2
  perf record -a -F 999 -g -o /tmp/payments-cpu-split.perf -- sleep 5 >/dev/null 2>&1 || true
  wait "$generator" || true
fi
if [ -f /tmp/payments-cpu-split.perf ]; then
  echo "== where the machine's time went (perf, 5 s of a run of its own; % of all samples)"
  perf report -i /tmp/payments-cpu-split.perf --no-children --sort comm --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -n 6
  perf report -i /tmp/payments-cpu-split.perf --children --comm postgres --sort sym --stdio -g none 2>/dev/null |
    grep -E ' (PortalRun|ExecInsertIndexTuples|heap_insert|heap_update|ExecConstraints|pg_plan_queries|GetCachedPlan|pg_parse_query|parse_analyze_varparams|CommitTransactionCommand|XLogFlush|secure_read)$' || true
fi
