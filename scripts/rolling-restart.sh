#!/usr/bin/env bash
# A rolling restart of the service's instances behind the balancer of docker-compose.yml
# (docs/scaling.md): one instance at a time, the next only once the last is back in the
# balancer, so some instance always takes requests. For each one:
#   1. every other instance named must be UP in the balancer: the last one up is never stopped;
#   2. `compose stop` sends SIGTERM: the instance closes its listener at once (the balancer
#      marks it down at its first refused connection or failed health check) and drains the
#      requests it holds (up to 30 s; stop_grace_period is 40 s). It must exit 0: 137 would
#      be the SIGKILL at the end of the grace period;
#   3. `compose start`; docker reports it healthy (its /health/ready) and the balancer has it
#      UP again (two passed checks).
# Prints what each step took; exits non-zero at the first step that fails.
#
# Usage: scripts/rolling-restart.sh [SERVICE...]        (default: api1 api2)
# From the environment: COMPOSE_PROJECT_NAME and COMPOSE (scripts/lib/compose.sh), LB_STATS_URL
# (default http://127.0.0.1:${LB_STATS_PORT:-8404}/stats;csv), RESTART_TIMEOUT_S (120: the
# longest wait for an instance to come back).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/ops.sh
. scripts/lib/ops.sh
# shellcheck source=scripts/lib/compose.sh
. scripts/lib/compose.sh

export LB_STATS_URL="${LB_STATS_URL:-http://127.0.0.1:${LB_STATS_PORT:-8404}/stats;csv}"
TIMEOUT_S="${RESTART_TIMEOUT_S:-120}"
fail() { echo "rolling restart: FAIL: $*" >&2; exit 1; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

compose_command
services=("$@")
[ ${#services[@]} -gt 0 ] || services=(api1 api2)

for service in "${services[@]}"; do
  for other in "${services[@]}"; do
    [ "$other" = "$service" ] || lb_up "$other" \
      || fail "$other is not UP in the balancer ($(lb_status "$other" || echo "no statistics")): $service stays up"
  done
  id="$(container "$service")"
  [ -n "$id" ] || fail "no container for $service"

  began="$EPOCHREALTIME"
  compose stop "$service" > /dev/null 2>&1 &
  stopping=$!
  # When the balancer stopped sending it requests: the first look that finds it not UP.
  out=""
  while kill -0 "$stopping" 2> /dev/null; do
    if [ -z "$out" ] && lb_out "$service"; then
      out="$(since "$began")"
    fi
    sleep 0.1
  done
  wait "$stopping" || fail "compose stop $service failed"
  stopped="$(since "$began")"
  # With no request to it, only the health checks notice: it may exit before they do.
  if [ -z "$out" ]; then
    wait_until 10 lb_out "$service" || fail "$service stopped but is still UP in the balancer"
    out="$(since "$began")"
  fi
  code="$(docker inspect -f '{{.State.ExitCode}}' "$id")"
  [ "$code" = 0 ] || fail "$service exited $code on SIGTERM, not 0 (137: killed at the end of the grace period)"

  started="$EPOCHREALTIME"
  compose start "$service" > /dev/null 2>&1 || fail "compose start $service failed"
  wait_until "$TIMEOUT_S" healthy "$service" || fail "$service is not healthy ($(health "$service"))"
  ready="$(since "$started")"
  wait_until "$TIMEOUT_S" lb_up "$service" \
    || fail "$service is healthy but not UP in the balancer ($(lb_status "$service"))"
  # Times count from when `compose stop` / `compose start` began, their own start-up included.
  echo "$service: out of the balancer $out s after the stop began;" \
    "drained and exited 0 after $stopped s; started: healthy after $ready s," \
    "UP in the balancer after $(since "$started") s"
done
