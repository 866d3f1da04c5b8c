#!/usr/bin/env bash
# The concurrency and idempotency tests through Debian's pgbouncer (1.18) in transaction
# pooling mode, in front of the PostgreSQL at 127.0.0.1:5432, with
# DATABASE_PREPARED_STATEMENTS=off (docs/operations.md).
#
#   scripts/test-pgbouncer.sh                 # the default selection below
#   scripts/test-pgbouncer.sh refunds::       # other `cargo test --test api` arguments
#   DATABASE_PREPARED_STATEMENTS=on scripts/test-pgbouncer.sh   # must fail: named
#                                             # statements do not survive the pooler
#
# It starts its own pgbouncer (config, pidfile and log in a temp dir, a free loopback port)
# and stops it on exit. Each test gets a role of its own whose search_path is its schema
# (TEST_DATABASE_POOLER=1 in tests/api/support/database.rs): pgbouncer passes no `options` on.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/ops.sh

UPSTREAM_HOST=127.0.0.1
UPSTREAM_PORT=5432
DATABASE=postgres
PREPARED="${DATABASE_PREPARED_STATEMENTS:-off}"
if [ $# -eq 0 ]; then
  # Every test but those of ops::, whose database-outage tests put their own TCP proxy in
  # front of PostgreSQL (with `options`, which pgbouncer refuses) and whose binary tests
  # start it with an environment of their own, and the delivery and group-commit tests that
  # use that proxy; and the Rust client's tests (client::), which test the client, not the
  # pooler.
  set -- --skip ops:: --skip client:: --skip deliveries::instances::an_attempt_whose_outcome_the_database_missed \
    --skip group_commit::a_claim_whose_answer_was_lost --skip group_commit::a_finish_whose_commit_answer_was_lost
fi

ensure_packages pgbouncer

dir="$(postgres_temp_dir pgbouncer-test)"
cleanup() {
  if [ -f "$dir/pgbouncer.pid" ]; then
    kill "$(cat "$dir/pgbouncer.pid")" 2>/dev/null || true
    for _ in $(seq 1 50); do [ -f "$dir/pgbouncer.pid" ] || break; sleep 0.1; done
  fi
  if [ -n "${KEEP_LOG:-}" ]; then cp "$dir/pgbouncer.log" "$KEEP_LOG" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT

port="$(free_port)"
# auth_type trust needs every user in auth_file; auth_user lets pgbouncer look up the
# tests' per-test roles (which are not in it) through auth_query as postgres.
echo '"postgres" ""' >"$dir/userlist.txt"
cat >"$dir/pgbouncer.ini" <<INI
[databases]
* = host=$UPSTREAM_HOST port=$UPSTREAM_PORT

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
pool_mode = transaction
auth_type = trust
auth_file = $dir/userlist.txt
auth_user = postgres
max_client_conn = 2000
default_pool_size = 10
max_db_connections = 40
server_idle_timeout = 10
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
[ "$(id -u)" -ne 0 ] || chown -R postgres: "$dir"
as_postgres pgbouncer -d -q "$dir/pgbouncer.ini"
if ! wait_until 10 pg_isready -q -h 127.0.0.1 -p "$port" -d "$DATABASE" -U postgres; then
  echo "FAIL: pgbouncer did not start" >&2
  cat "$dir/pgbouncer.log" >&2 || true
  exit 1
fi
echo "pgbouncer $(pgbouncer --version | head -n 1 | awk '{print $2}') on 127.0.0.1:$port" \
  "(transaction pooling) -> $UPSTREAM_HOST:$UPSTREAM_PORT;" \
  "DATABASE_PREPARED_STATEMENTS=$PREPARED"

status=0
TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$port/$DATABASE" \
  TEST_DATABASE_POOLER=1 \
  DATABASE_PREPARED_STATEMENTS="$PREPARED" \
  timeout 1800 cargo test --test api -- "$@" || status=$?
if [ "$status" -ne 0 ]; then
  echo "FAIL: tests through pgbouncer (last lines of its log:)" >&2
  tail -n 20 "$dir/pgbouncer.log" >&2 || true
fi
exit "$status"
