#!/usr/bin/env bash
# Primary failover under payment load (docs/operations.md), as CI runs it:
#
#   scripts/failover.sh
#
# Builds a pg_auto_failover monitor and two PostgreSQL 15 nodes with synchronous
# replication (as the postgres user, under a temp dir, on free loopback ports; the cluster
# on 5432 is never touched), runs payments-api on the multi-host URL
# `postgres://127.0.0.1:P1,127.0.0.1:P2/payments?target_session_attrs=read-write` with
# provider-sim over HTTP, puts a steady payment load on it, kills the primary node (its
# whole process group, and the postmaster's children, with SIGKILL), and checks once the
# standby is promoted (scripts/lib/failover_load.py): every payment answered 201 is still
# there with the same status; provider charges = succeeded payments, one to one; no 500;
# no answer slower than 10 s; the same service process throughout; new payments succeed.
# Prints the time from the kill to the first payment created after it. Exits non-zero on
# any failed check; removes every process it started and its temp dir on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/ops.sh

PG_BIN=/usr/lib/postgresql/15/bin
LOAD_BEFORE_KILL_S=6
LOAD_AFTER_RECOVERY_S=8
step() { printf '\n==> %s\n' "$*"; }
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

ensure_packages postgresql-15-auto-failover pg-auto-failover-cli

step "cargo build --bins"
cargo build --bins --quiet
API_BIN="$PWD/target/debug/payments-api"
SIM_BIN="$PWD/target/debug/provider-sim"

T="$(postgres_temp_dir failover)"
declare -A GROUPS_STARTED=() # name -> process group id
cleanup() {
  status=$?
  set +e
  # The load and the service first, then the keepers (which stop their PostgreSQL).
  local in_order=()
  for name in load service provider node2 node1 monitor; do
    [ -n "${GROUPS_STARTED[$name]:-}" ] && in_order+=("${GROUPS_STARTED[$name]}")
  done
  stop_groups "${in_order[@]}"
  # PostgreSQL's children run in sessions of their own: stop any the keepers left.
  for pgdata in "$T"/monitor "$T"/node1 "$T"/node2; do
    [ -f "$pgdata/postmaster.pid" ] || continue
    pm="$(head -n 1 "$pgdata/postmaster.pid")"
    if [ -n "$pm" ] && kill -0 "$pm" 2>/dev/null; then
      as_postgres "$PG_BIN/pg_ctl" -D "$pgdata" stop -m immediate -w >/dev/null 2>&1 \
        || kill -KILL "$pm" 2>/dev/null
    fi
  done
  # FAILOVER_LOGS=DIR keeps the logs of the run.
  if [ -n "${FAILOVER_LOGS:-}" ] && [ -d "$T" ]; then
    mkdir -p "$FAILOVER_LOGS" && cp "$T"/*.log "$T"/results.jsonl "$FAILOVER_LOGS"/ 2>/dev/null
  fi
  if [ "$status" -ne 0 ] && [ -d "$T" ]; then
    for log in monitor node1 node2 service; do
      [ -f "$T/$log.log" ] && { echo "--- last lines of $log.log" >&2; tail -n 15 "$T/$log.log" >&2; }
    done
  fi
  rm -rf "$T"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# pg_autoctl keeps its state under XDG dirs, and the servers their Unix sockets under
# PG_REGRESS_SOCK_DIR (pg_autoctl's own knob, reached through PGHOST): all in here, nothing
# in the postgres user's home or in /var/run/postgresql.
mkdir -p "$T/sock"
[ "$(id -u)" -ne 0 ] || chown postgres: "$T/sock"
AUTOCTL_ENV=(env "XDG_CONFIG_HOME=$T/xdg/config" "XDG_DATA_HOME=$T/xdg/data"
  "XDG_RUNTIME_DIR=$T/xdg/run" "PG_CONFIG=$PG_BIN/pg_config"
  "PG_REGRESS_SOCK_DIR=$T/sock" "PGHOST=$T/sock")
AS_POSTGRES=()
[ "$(id -u)" -ne 0 ] || AS_POSTGRES=(runuser -u postgres --)
autoctl() { "${AS_POSTGRES[@]}" "${AUTOCTL_ENV[@]}" pg_autoctl "$@"; }
# start NAME COMMAND...: in a process group (and session) of its own, logged to $T/NAME.log.
start() {
  local name="$1"
  shift
  setsid "$@" >"$T/$name.log" 2>&1 </dev/null &
  GROUPS_STARTED[$name]=$!
  disown # its end is checked here, not reported by the shell
}
sql() { # sql PORT DB QUERY
  psql -X -q -At -h 127.0.0.1 -p "$1" -U postgres -d "$2" -c "$3" 2>/dev/null
}
monitor_sql() { sql "$MONITOR_PORT" pg_auto_failover "$1"; }
node_states() { monitor_sql "SELECT string_agg(nodename || '=' || reportedstate, ' ' ORDER BY nodename) FROM pgautofailover.node"; }
state_of() { monitor_sql "SELECT reportedstate FROM pgautofailover.node WHERE nodename = '$1'"; }
is_state() { [ "$(state_of "$1")" = "$2" ]; }

MONITOR_PORT="$(free_port)"
NODE1_PORT="$(free_port)"
NODE2_PORT="$(free_port)"
PROVIDER_PORT="$(free_port)"
API_PORT="$(free_port)"
MONITOR_URL="postgres://autoctl_node@127.0.0.1:$MONITOR_PORT/pg_auto_failover?sslmode=disable"

step "pg_auto_failover monitor on 127.0.0.1:$MONITOR_PORT"
autoctl create monitor --pgctl "$PG_BIN/pg_ctl" --pgdata "$T/monitor" --pgport "$MONITOR_PORT" \
  --hostname 127.0.0.1 --auth trust --no-ssl >"$T/monitor-create.log" 2>&1 \
  || { cat "$T/monitor-create.log" >&2; fail "pg_autoctl create monitor"; }
autoctl config set --pgdata "$T/monitor" postgresql.listen_addresses 127.0.0.1 >/dev/null
start monitor "${AS_POSTGRES[@]}" "${AUTOCTL_ENV[@]}" pg_autoctl run --pgdata "$T/monitor"
wait_until 30 monitor_sql "SELECT 1" || fail "the monitor did not start"
# Failure detection in seconds instead of the defaults' ~50 s (health checks every 5 s, a
# node unhealthy after 20 s, a 30 s wait for the old primary to demote itself). The keepers'
# network_partition_timeout is set below the demote timeout: a primary cut off from the
# monitor and its standby stops taking writes before the standby may be promoted.
for setting in health_check_period=1000 health_check_timeout=1000 health_check_max_retries=1 \
  health_check_retry_delay=500 node_considered_unhealthy_timeout=3000 \
  primary_demote_timeout=5000; do
  monitor_sql "ALTER SYSTEM SET pgautofailover.${setting%%=*} = ${setting#*=}" >/dev/null
done
monitor_sql "SELECT pg_reload_conf()" >/dev/null

create_node() { # create_node NAME PORT
  autoctl create postgres --pgctl "$PG_BIN/pg_ctl" --pgdata "$T/$1" --pgport "$2" \
    --listen 127.0.0.1 --hostname 127.0.0.1 --name "$1" --dbname payments \
    --monitor "$MONITOR_URL" --auth trust --no-ssl >"$T/$1-create.log" 2>&1 \
    || { cat "$T/$1-create.log" >&2; fail "pg_autoctl create postgres $1"; }
  autoctl config set --pgdata "$T/$1" timeout.network_partition_timeout 3 >/dev/null
  start "$1" "${AS_POSTGRES[@]}" "${AUTOCTL_ENV[@]}" pg_autoctl run --pgdata "$T/$1"
}
step "node1 on 127.0.0.1:$NODE1_PORT, node2 on 127.0.0.1:$NODE2_PORT"
create_node node1 "$NODE1_PORT"
wait_until 60 is_state node1 single \
  || fail "node1 did not become a single primary: $(node_states)"
create_node node2 "$NODE2_PORT"
in_sync() {
  [ "$(node_states)" = "node1=primary node2=secondary" ] \
    && [ -n "$(sql "$NODE1_PORT" payments "SHOW synchronous_standby_names")" ] \
    && [ "$(sql "$NODE1_PORT" payments "SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum') AND state = 'streaming'")" = 1 ]
}
wait_until 90 in_sync || fail "no synchronous standby: $(node_states)"
echo "nodes: $(node_states); synchronous_standby_names = $(sql "$NODE1_PORT" payments "SHOW synchronous_standby_names")"

step "provider-sim on 127.0.0.1:$PROVIDER_PORT, payments-api on 127.0.0.1:$API_PORT"
start provider env PROVIDER_SIM_BIND="127.0.0.1:$PROVIDER_PORT" PROVIDER_LATENCY_MS=50 \
  RUST_LOG=warn "$SIM_BIN"
API_KEY="sk_test_failover_$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
DATABASE_URL="postgres://postgres@127.0.0.1:$NODE1_PORT,127.0.0.1:$NODE2_PORT/payments?target_session_attrs=read-write"
echo "DATABASE_URL=$DATABASE_URL"
start service env DATABASE_URL="$DATABASE_URL" BIND_ADDR="127.0.0.1:$API_PORT" \
  BOOTSTRAP_API_KEY="$API_KEY" PROVIDER_URL="http://127.0.0.1:$PROVIDER_PORT" \
  WEBHOOK_SECRETS=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw PROCESSING_LEASE_MS=2000 \
  RECOVERY_INTERVAL_MS=500 DATABASE_POOL_SIZE=8 RUST_LOG=info LOG_FORMAT=json "$API_BIN"
SERVICE_PID="${GROUPS_STARTED[service]}"
wait_until 30 curl -fsS "http://127.0.0.1:$PROVIDER_PORT/v1/charges" || fail "provider-sim did not start"
wait_until 60 curl -fsS "http://127.0.0.1:$API_PORT/health/ready" || fail "payments-api did not start"

step "payment load, then kill -9 of the primary"
touch "$T/results.jsonl"
start load python3 scripts/lib/failover_load.py load --api "http://127.0.0.1:$API_PORT" \
  --key "$API_KEY" --out "$T/results.jsonl" --stop-file "$T/stop" --workers 4
sleep "$LOAD_BEFORE_KILL_S"
created="$(grep -c '"status": 201' "$T/results.jsonl" || true)"
[ "$created" -gt 0 ] || fail "no payment succeeded before the kill"
primary_port() { monitor_sql "SELECT nodeport FROM pgautofailover.node WHERE reportedstate = 'primary'"; }
[ "$(primary_port)" = "$NODE1_PORT" ] || fail "node1 is not the primary: $(node_states)"
postmaster="$(head -n 1 "$T/node1/postmaster.pid")"
children="$(pgrep -P "$postmaster" | tr '\n' ' ')"
kill_time="$(date +%s.%N)"
# The keeper's group holds pg_autoctl and the postmaster; PostgreSQL's children set up
# sessions of their own, so they are killed by pid: nothing of the node may shut down cleanly.
# shellcheck disable=SC2086
kill -KILL -- "-${GROUPS_STARTED[node1]}" $children
unset 'GROUPS_STARTED[node1]'
echo "killed node1 ($created payments created before): keeper group, postmaster $postmaster, children $children"
gone() { ! kill -0 -- "$1" 2>/dev/null; }
wait_until 10 gone "$postmaster" || fail "node1's postmaster survived SIGKILL"

wait_until 120 is_state node2 wait_primary \
  || fail "node2 was not promoted: $(node_states)"
promoted="$(date +%s.%N)"
echo "node2 is primary $(python3 -c "print(f'{$promoted - $kill_time:.1f}')") s after the kill: $(node_states)"
recovered() { python3 - "$T/results.jsonl" "$kill_time" <<'PY'
import json, sys
kill = float(sys.argv[2])
sys.exit(0 if any(
    a["status"] == 201 and a["started"] >= kill and not a["replayed"]
    for a in map(json.loads, open(sys.argv[1]))) else 1)
PY
}
wait_until 60 recovered || fail "no payment was created after the failover"
sleep "$LOAD_AFTER_RECOVERY_S"
touch "$T/stop"
load_pgid="${GROUPS_STARTED[load]}"
wait_until 120 gone "-$load_pgid" || fail "the load did not finish its open keys"
unset 'GROUPS_STARTED[load]'

step "checks"
kill -0 "$SERVICE_PID" 2>/dev/null || fail "payments-api died"
python3 scripts/lib/failover_load.py check --api "http://127.0.0.1:$API_PORT" --key "$API_KEY" \
  --provider "http://127.0.0.1:$PROVIDER_PORT" --results "$T/results.jsonl" \
  --kill-time "$kill_time" || fail "checks after the failover"
kill -0 "$SERVICE_PID" 2>/dev/null || fail "payments-api died"
echo "payments-api ran as pid $SERVICE_PID throughout"
step "failover passed"
