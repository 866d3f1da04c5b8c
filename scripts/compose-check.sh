#!/usr/bin/env bash
# The compose demo from the files a user runs, on a machine that cannot pull images:
#   1. installs what is missing (docker.io, docker-compose, debootstrap) and starts dockerd;
#   2. makes the base images the files name, once (scripts/compose-base-images.sh);
#   3. `up --build`, waits on the health checks; checks the image (non-root user, PID 1 is
#      the binary, its health check) and prints its size;
#   4. runs scripts/demo.sh against it (the async payment finished by the provider's webhook);
#   5. stops and starts the service while payments are in flight: a clean SIGTERM exit (0,
#      within the grace period) and no payment lost (scripts/lib/restart_load.py);
# shows the containers' logs on failure and always tears the project down (containers,
# network, volume). Uses `docker compose` when the CLI has it, else Debian's docker-compose
# (COMPOSE="docker-compose" chooses). Needs root (or sudo) for apt-get and dockerd.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/ops.sh
. scripts/lib/ops.sh

API_KEY=sk_test_compose_demo_key_000000000001
PROJECT="${COMPOSE_PROJECT_NAME:-payments-compose-check}"
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
if [ -n "${COMPOSE:-}" ]; then
  read -r -a compose_cmd <<< "$COMPOSE"
elif docker compose version > /dev/null 2>&1; then
  compose_cmd=(docker compose)
else
  compose_cmd=(docker-compose)
fi
"${compose_cmd[@]}" version | sed -n 1p   # sed reads it all: no SIGPIPE under pipefail

step "base images (built here once: no image registry is reachable)"
scripts/compose-base-images.sh

# Host ports of the project's own, free now: the check must not collide with a service
# already on 8080/9090. The compose file reads them (defaults 8080, 9090).
PAYMENTS_API_PORT="$(free_port)"
PROVIDER_SIM_PORT="$(free_port)"
export PAYMENTS_API_PORT PROVIDER_SIM_PORT
API="http://127.0.0.1:$PAYMENTS_API_PORT"
PROVIDER="http://127.0.0.1:$PROVIDER_SIM_PORT"
compose() { "${compose_cmd[@]}" -p "$PROJECT" "$@"; }

ok=0
teardown() {
  if [ "$ok" -ne 1 ]; then
    echo "--- logs (the check failed) ---" >&2
    compose ps >&2 || true
    compose logs --no-color --tail=200 api provider >&2 || true
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
container() { compose ps -q "$1"; }
health() { docker inspect -f '{{.State.Health.Status}}' "$(container "$1")" 2>/dev/null; }
healthy() { [ "$(health "$1")" = healthy ]; }
for service in postgres provider api; do
  wait_until 120 healthy "$service" || fail "$service is not healthy ($(health "$service"))"
  echo "$service: healthy"
done

step "the image"
IMAGE=payments-api:compose
size=$(docker image inspect -f '{{.Size}}' "$IMAGE")
echo "image $IMAGE: $((size / 1000000)) MB"
user=$(docker exec "$(container api)" id -u)
[ "$user" != 0 ] || fail "the service runs as root"
echo "runs as uid $user ($(docker image inspect -f '{{.Config.User}}' "$IMAGE"))"
pid1=$(docker exec "$(container api)" cat /proc/1/cmdline | tr '\0' ' ')
[ "${pid1%% *}" = payments-api ] || fail "PID 1 is '$pid1', not the service: SIGTERM would not reach it"
echo "PID 1: $pid1"
docker image inspect -f '{{json .Config.Healthcheck.Test}}' "$IMAGE"

step "scripts/demo.sh against the compose project"
API_KEY=$API_KEY scripts/demo.sh "$API"

step "stop and start the service with payments in flight"
api_id=$(container api)
exit_file="$(mktemp)"
python3 scripts/lib/restart_load.py --api "$API" --key "$API_KEY" --provider "$PROVIDER" \
  --stop "${compose_cmd[*]} -p $PROJECT stop api && docker inspect -f '{{.State.ExitCode}}' $api_id > $exit_file" \
  --start "${compose_cmd[*]} -p $PROJECT start api && until [ \"\$(docker inspect -f '{{.State.Health.Status}}' $api_id)\" = healthy ]; do sleep 0.2; done" \
  || fail "payments across the restart (above)"
# 0 is the service's own exit after draining on SIGTERM; 137 would be the SIGKILL at the end
# of the grace period (the signal never reached it, or it did not stop).
exit_code="$(cat "$exit_file")"
rm -f "$exit_file"
[ "$exit_code" = 0 ] || fail "the service exited $exit_code on stop, not 0"
# (The log is read whole first: grep -q would stop reading early, and pipefail would take
# the writer's SIGPIPE for a failure.)
api_log="$(compose logs --no-color api)"
grep -q 'HTTP server stopped' <<< "$api_log" \
  || fail "the service's log does not show it stopping on SIGTERM"
echo "stopped on SIGTERM: exit 0 after draining; started again, healthy"

ok=1
step "compose check passed"
