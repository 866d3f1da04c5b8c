# shellcheck shell=bash
# Shared by scripts/bench.sh, scripts/cpu-split.sh and scripts/instructions.sh: sourced, not
# run, from the repository's root. The measured service talks to the local PostgreSQL, with
# the bootstrap key below, and the load generator is benches/loadgen.rs.

PG="postgres://postgres@127.0.0.1:5432"
KEY=sk_test_bench_key_00000000000000000001
# (notices such as "database … does not exist, skipping" are not results)
PSQL=(env PGOPTIONS=--client-min-messages=warning psql -q -X -v ON_ERROR_STOP=1 -h 127.0.0.1 -U postgres)

# Starts the local cluster if PostgreSQL does not answer; fails if it still does not.
postgres_up() {
  pg_isready -q -h 127.0.0.1 -p 5432 || pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start
  pg_isready -q -h 127.0.0.1 -p 5432 -t 10
}

# Builds the release binaries and the load generator; sets LOADGEN to the generator's path.
build_release() {
  cargo build --release --bins -q
  cargo bench --bench loadgen --no-run -q 2>/dev/null || cargo bench --bench loadgen --no-run
  LOADGEN=$(ls -t target/release/deps/loadgen-* | grep -v '\.d$' | head -n 1)
}

# The binary measured: $BIN if set, else the release build.
service_binary() { echo "${BIN:-target/release/payments-api}"; }

# fresh_database DB: DB dropped, created and migrated.
fresh_database() {
  "${PSQL[@]}" -d postgres -c "DROP DATABASE IF EXISTS $1" -c "CREATE DATABASE $1"
  DATABASE_URL="$PG/$1" "$(service_binary)" migrate >/dev/null
}

# serve_measured DB PORT LATENCY_MS LOG [WRAPPER...]: the service on DB and PORT with its
# in-process provider at LATENCY_MS, in the background (under WRAPPER if given, e.g.
# valgrind), its output appended to LOG; SERVICE is its pid.
serve_measured() {
  local db=$1 port=$2 latency=$3 log=$4
  shift 4
  DATABASE_URL="$PG/$db" BIND_ADDR="127.0.0.1:$port" BOOTSTRAP_API_KEY="$KEY" \
    PROVIDER_LATENCY_MS="$latency" RUST_LOG=warn DATABASE_POOL_SIZE="${POOL_SIZE:-16}" \
    "$@" "$(service_binary)" serve >>"$log" 2>&1 &
  SERVICE=$!
}

# wait_ready PORT LOG [SECONDS]: until the service on PORT is ready (10 s at most by
# default); if it is not by then, prints its LOG and exits.
wait_ready() {
  local tries=$(( ${3:-10} * 10 ))
  for _ in $(seq 1 "$tries"); do
    curl -fsS "http://127.0.0.1:$1/health/ready" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "the service on port $1 did not start" >&2; cat "$2" >&2; exit 1
}

# peak_rss PID: the process's peak resident memory in MiB (0 once it is gone)
peak_rss() { awk '/VmHWM/ {printf "%.1f", $2/1024}' "/proc/$1/status" 2>/dev/null || echo 0; }
# field NAME: the value of NAME= in the load generator's RESULT line on stdin
field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" | head -n 1; }
# median of the numbers on stdin
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# ratio A B: A / B to two decimals
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
