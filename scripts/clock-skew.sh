#!/usr/bin/env bash
# Two instances whose host clocks differ keep one clock, the database's (src/domain/time.rs):
#
#   scripts/clock-skew.sh        (API_BIN=PATH runs that binary instead of `cargo build`)
#
# Runs payments-api twice on a new database of the PostgreSQL at 127.0.0.1:5432, A on this
# host's clock, B under libfaketime 5 s behind, and checks with scripts/lib/clock_skew.py.
# Exits non-zero on any failed check; stops both instances and drops the database on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/ops.sh

SKEW_S=5
step() { printf '\n==> %s\n' "$*"; }
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

ensure_packages faketime
if [ -z "${API_BIN:-}" ]; then
  step "cargo build --bins"
  cargo build --bins --quiet
  API_BIN="$PWD/target/debug/payments-api"
fi
[ -x "$API_BIN" ] || fail "no payments-api binary at $API_BIN"

# libfaketime preloaded into the service itself, not through the `faketime` wrapper: killed
# with its process group, the wrapper leaves its shared memory in /dev/shm (and so does any
# preloaded process that execs another). Without FAKETIME_DONT_FAKE_MONOTONIC=1 the offset
# moves CLOCK_MONOTONIC to the faked wall time too.
# shellcheck disable=SC2016 # $LIB is for the dynamic loader (lib/x86_64-linux-gnu, ...)
BEHIND=('LD_PRELOAD=/usr/$LIB/faketime/libfaketime.so.1' "FAKETIME=-${SKEW_S}s"
  FAKETIME_DONT_FAKE_MONOTONIC=1)
step "libfaketime: a host clock ${SKEW_S} s behind"
real="$(date +%s.%N)"
faked="$(env "${BEHIND[@]}" date +%s.%N)"
echo "date: $real, under libfaketime: $faked"
python3 -c "import sys; sys.exit(abs($real - $faked - $SKEW_S) > 0.5)" \
  || fail "libfaketime does not put the clock ${SKEW_S} s behind"

T="$(mktemp -d "${TMPDIR:-/tmp}/clock-skew.XXXXXX")"
DB="clock_skew_$$"
DB_MADE=
declare -A GROUPS_STARTED=() # name -> process group id
pg() { psql -X -q -At -h 127.0.0.1 -p 5432 -U postgres -d postgres -v ON_ERROR_STOP=1 -c "$1"; }
cleanup() {
  status=$?
  set +e
  stop_groups "${GROUPS_STARTED[@]}"
  # What libfaketime made for B (pid = group id), should B not have exited by itself.
  pgid="${GROUPS_STARTED[b]:-none}"
  rm -f "/dev/shm/faketime_shm_$pgid" "/dev/shm/sem.faketime_sem_$pgid"
  if [ "$status" -ne 0 ]; then
    for name in a b; do
      [ -f "$T/$name.log" ] && { echo "--- last lines of $name.log" >&2; tail -n 15 "$T/$name.log" >&2; }
    done
  fi
  [ -z "$DB_MADE" ] || pg "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null
  rm -rf "$T"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start NAME COMMAND...: in a process group (and session) of its own, logged to $T/NAME.log.
start() {
  local name="$1"
  shift
  setsid "$@" >"$T/$name.log" 2>&1 </dev/null &
  GROUPS_STARTED[$name]=$!
  disown
}

step "database $DB on 127.0.0.1:5432"
pg "CREATE DATABASE $DB" || fail "cannot create database $DB"
DB_MADE=1
PORT_A="$(free_port)"
PORT_B="$(free_port)"
API_KEY="sk_test_$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
SERVICE=(env DATABASE_URL="postgres://postgres@127.0.0.1:5432/$DB" BOOTSTRAP_API_KEY="$API_KEY"
  WEBHOOK_SECRETS=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw PROVIDER_LATENCY_MS=0
  RUST_LOG=info LOG_FORMAT=json)
alive() { kill -0 "${GROUPS_STARTED[$1]}" 2>/dev/null; }
ready_or_gone() { curl -fsS "http://127.0.0.1:$2/health/ready" || ! alive "$1"; }
wait_ready() { # wait_ready NAME PORT
  if ! wait_until 60 ready_or_gone "$1" "$2" || ! alive "$1"; then
    fail "instance ${1^^} did not become ready"
  fi
}

# A first: it migrates the new database before B starts.
step "instance A on 127.0.0.1:$PORT_A (this host's clock)"
start a "${SERVICE[@]}" BIND_ADDR="127.0.0.1:$PORT_A" "$API_BIN"
wait_ready a "$PORT_A"
step "instance B on 127.0.0.1:$PORT_B (libfaketime: ${SKEW_S} s behind)"
start b "${SERVICE[@]}" "${BEHIND[@]}" BIND_ADDR="127.0.0.1:$PORT_B" "$API_BIN"
wait_ready b "$PORT_B"

step "24 payments alternately on A and B; checks"
timeout 90 python3 scripts/lib/clock_skew.py --a "http://127.0.0.1:$PORT_A" \
  --b "http://127.0.0.1:$PORT_B" --key "$API_KEY" --log-a "$T/a.log" --log-b "$T/b.log" \
  --skew-s "$SKEW_S" --count 24 || fail "one clock across hosts whose clocks differ"
for name in a b; do alive "$name" || fail "instance ${name^^} died"; done
step "clock skew passed"
