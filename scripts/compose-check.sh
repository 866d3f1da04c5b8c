#!/usr/bin/env bash
# The compose demo from the files a user runs, on a machine that cannot pull images:
#   1. installs what is missing (docker.io, docker-compose, debootstrap) and starts dockerd;
#   2. makes the base images the files name, once (scripts/compose-base-images.sh);
#   3. `up --build`, waits on the health checks (PostgreSQL, the simulator, both instances of
#      the service, the balancer); checks the image (non-root user, PID 1 is the binary, its
#      health check) and prints its size;
#   4. runs scripts/demo.sh against it, through the balancer (the async payment finished by
#      the provider's webhook, which comes back through the balancer too);
#   5. a rolling restart under load (scripts/rolling-restart.sh, run by
#      scripts/lib/restart_load.py): one instance at a time stopped (SIGTERM, drained, exit 0)
#      and started while clients post payments; no client call may fail, and PostgreSQL and
#      the provider must hold exactly one payment and one charge per key;
#   6. every instance stopped and started at once while payments are in flight: requests in
#      flight are answered (the drain), the clients' retries carry the rest over, no payment
#      is lost or charged twice;
# shows the containers' logs on failure and always tears the project down (containers,
# network, volume). Uses `docker compose` when the CLI has it, else Debian's docker-compose
# (COMPOSE="docker-compose" chooses). Needs root (or sudo) for apt-get and dockerd.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/ops.sh
. scripts/lib/ops.sh
# shellcheck source=scripts/lib/compose.sh
. scripts/lib/compose.sh

API_KEY=sk_test_compose_demo_key_000000000001
export COMPOSE_PROJECT_NAME="${COMPOSE_PROJECT_NAME:-payments-compose-check}"
step() { printf '\n--> %s\n' "$*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

step "docker, docker-compose, debootstrap"
command -v dockerd > /dev/null || ensure_packages docker.io
command -v debootstrap > /dev/null || ensure_packages debootstrap
if ! docker compose version > /dev/null 2>&1 && ! command -v docker-compose > /dev/null; then
  ensure_packages docker-compose
fi
if ! docker info > /dev/null 2>&1; then
  echo "starting dockerd (log: /var/log/dockerd.log)"
  # Niced: the builds run in its containers and share the machine's cores.
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" bash -c 'nohup nice -n 10 dockerd > /var/log/dockerd.log 2>&1 &'
  wait_until 60 docker info || { tail -n 20 /var/log/dockerd.log >&2; fail "dockerd did not start"; }
fi
# A docker CLI newer than the daemon negotiates the API down; if this one cannot talk to it,
# Debian's (/usr/bin/docker, the daemon's own version) is used.
if ! docker version > /dev/null 2>&1 && [ -x /usr/bin/docker ]; then
  export PATH="/usr/bin:$PATH"
fi
docker version --format 'docker client {{.Client.Version}}, daemon {{.Server.Version}}'
compose_command
"${compose_cmd[@]}" version | sed -n 1p   # sed reads it all: no SIGPIPE under pipefail

step "base images (built here once: no image registry is reachable)"
scripts/compose-base-images.sh

# Host ports of the project's own, free now: the check must not collide with a service
# already on 8080/9090/8404. The compose file reads them (defaults 8080, 9090, 8404).
PAYMENTS_API_PORT="$(free_port)"
PROVIDER_SIM_PORT="$(free_port)"
LB_STATS_PORT="$(free_port)"
export PAYMENTS_API_PORT PROVIDER_SIM_PORT LB_STATS_PORT
export LB_STATS_URL="http://127.0.0.1:$LB_STATS_PORT/stats;csv"
API="http://127.0.0.1:$PAYMENTS_API_PORT"
PROVIDER="http://127.0.0.1:$PROVIDER_SIM_PORT"
INSTANCES=(api1 api2)

ok=0
teardown() {
  if [ "$ok" -ne 1 ]; then
    echo "--- logs (the check failed) ---" >&2
    compose ps >&2 || true
    compose logs --no-color --tail=150 "${INSTANCES[@]}" provider >&2 || true
    compose logs --no-color --tail=60 lb >&2 || true
    compose logs --no-color --tail=40 postgres >&2 || true
  fi
  compose down -v --remove-orphans > /dev/null 2>&1 || true
}
trap teardown EXIT
compose down -v --remove-orphans > /dev/null 2>&1 || true

step "up --build"
started=$SECONDS
# Debian's docker-compose 1.29 builds through the API (no BuildKit); either builder caches
# the dependency layer (Dockerfile step 1).
compose build
echo "build: $((SECONDS - started)) s"
compose up -d
for service in postgres provider "${INSTANCES[@]}" lb; do
  wait_until 120 healthy "$service" || fail "$service is not healthy ($(health "$service"))"
  echo "$service: healthy"
done

step "the image"
IMAGE=payments-api:compose
size=$(docker image inspect -f '{{.Size}}' "$IMAGE")
echo "image $IMAGE: $((size / 1000000)) MB"
user=$(docker exec "$(container api1)" id -u)
[ "$user" != 0 ] || fail "the service runs as root"
echo "runs as uid $user ($(docker image inspect -f '{{.Config.User}}' "$IMAGE"))"
pid1=$(docker exec "$(container api1)" cat /proc/1/cmdline | tr '\0' ' ')
[ "${pid1%% *}" = payments-api ] || fail "PID 1 is '$pid1', not the service: SIGTERM would not reach it"
echo "PID 1: $pid1"
docker image inspect -f '{{json .Config.Healthcheck.Test}}' "$IMAGE"
lb_size=$(docker image inspect -f '{{.Size}}' payments-api-lb:compose)
echo "balancer image payments-api-lb:compose: $((lb_size / 1000000)) MB;" \
  "$(docker exec "$(container lb)" haproxy -v | sed -n 1p)"
for instance in "${INSTANCES[@]}"; do
  wait_until 30 lb_up "$instance" || fail "$instance is not UP in the balancer ($(lb_status "$instance"))"
done
echo "balancer: ${INSTANCES[*]} UP"

step "scripts/demo.sh against the compose project, through the balancer"
API_KEY=$API_KEY scripts/demo.sh "$API"

pid_of() { docker inspect -f '{{.State.Pid}}' "$(container "$1")"; }
psql_cmd="docker exec -i $(container postgres) psql -U postgres -d payments -At -v ON_ERROR_STOP=1"

step "a rolling restart with payments in flight (${INSTANCES[*]}, one at a time)"
started=$SECONDS
# COMPOSE_PROJECT_NAME, LB_STATS_URL and COMPOSE reach scripts/rolling-restart.sh through the
# environment.
python3 scripts/lib/restart_load.py --api "$API" --key "$API_KEY" --provider "$PROVIDER" \
  --restart "scripts/rolling-restart.sh ${INSTANCES[*]}" --psql "$psql_cmd" --stats "$LB_STATS_URL" \
  --steady 5 --cpu "lb=$(pid_of lb)" --cpu "api1=$(pid_of api1)" --cpu "api2=$(pid_of api2)" \
  --cpu "postgres=$(pid_of postgres)" --cpu "provider=$(pid_of provider)" \
  || fail "payments across the rolling restart (above)"
echo "rolling restart under load: $((SECONDS - started)) s"

step "every instance stopped and started at once, with payments in flight"
started=$SECONDS
ids=()
for instance in "${INSTANCES[@]}"; do ids+=("$(container "$instance")"); done
exit_file="$(mktemp)"
wait_healthy=""
for id in "${ids[@]}"; do
  wait_healthy+="until [ \"\$(docker inspect -f '{{.State.Health.Status}}' $id)\" = healthy ]; do sleep 0.2; done; "
done
python3 scripts/lib/restart_load.py --api "$API" --key "$API_KEY" --provider "$PROVIDER" \
  --psql "$psql_cmd" --stats "$LB_STATS_URL" \
  --stop "${compose_cmd[*]} stop ${INSTANCES[*]} && docker inspect -f '{{.State.ExitCode}}' ${ids[*]} > $exit_file" \
  --start "${compose_cmd[*]} start ${INSTANCES[*]} && $wait_healthy" \
  || fail "payments across the restart (above)"
# 0 is the service's own exit after draining on SIGTERM; 137 would be the SIGKILL at the end
# of the grace period (the signal never reached it, or it did not stop).
exit_codes="$(tr '\n' ' ' < "$exit_file")"
rm -f "$exit_file"
[ "$exit_codes" = "$(printf '0 %.0s' "${ids[@]}")" ] || fail "the instances exited $exit_codes on stop, not 0"
# Each instance stopped twice (the rolling restart, then this), each time on SIGTERM. (The log
# is read whole first: grep -c would stop reading early, and pipefail would take the writer's
# SIGPIPE for a failure.)
# No panic either, not even one the process's exit cut short: a thread panicking in its
# thread-local destructors while the main thread exits shows only as its message when the
# exit wins the race, as exit 134 when the abort does.
for instance in "${INSTANCES[@]}"; do
  log="$(compose logs --no-color "$instance")"
  stops="$(grep -c 'HTTP server stopped' <<< "$log" || true)"
  [ "$stops" -ge 2 ] || fail "$instance's log shows $stops stops on SIGTERM, not 2"
  panics="$(grep -c 'panicked' <<< "$log" || true)"
  [ "$panics" -eq 0 ] || fail "$instance's log shows $panics panics: $(grep -m 1 -A 1 'panicked' <<< "$log")"
done
echo "stopped on SIGTERM: exit 0 after draining; started again, healthy ($((SECONDS - started)) s)"

ok=1
step "compose check passed"
