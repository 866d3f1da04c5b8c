# shellcheck shell=bash
# Shared by scripts/compose-check.sh and scripts/rolling-restart.sh: sourced, not run.
# The compose project is the one COMPOSE_PROJECT_NAME names (compose's default otherwise).

# Sets the array compose_cmd: $COMPOSE if given (e.g. COMPOSE=docker-compose), else
# `docker compose` when the docker CLI has it, else Debian's docker-compose.
compose_command() {
  if [ -n "${COMPOSE:-}" ]; then
    read -r -a compose_cmd <<< "$COMPOSE"
  elif docker compose version > /dev/null 2>&1; then
    compose_cmd=(docker compose)
  else
    compose_cmd=(docker-compose)
  fi
}

# compose ARGS...: compose_cmd on the project.
compose() {
  local project=()
  [ -z "${COMPOSE_PROJECT_NAME:-}" ] || project=(-p "$COMPOSE_PROJECT_NAME")
  "${compose_cmd[@]}" "${project[@]}" "$@"
}

# The id of SERVICE's container.
container() { compose ps -q "$1"; }

# SERVICE's health as docker reports it (starting, healthy, unhealthy), or nothing.
health() { docker inspect -f '{{.State.Health.Status}}' "$(container "$1")" 2>/dev/null; }
healthy() { [ "$(health "$1")" = healthy ]; }

# The balancer's view of one server: UP, DOWN, MAINT, "UP 1/2" (going down), "DOWN 1/2"
# (coming up)…, read from HAProxy's statistics as CSV (LB_STATS_URL, e.g.
# http://127.0.0.1:8404/stats;csv) for the backend LB_BACKEND (default instances).
lb_status() {
  local csv
  csv="$(curl -fsS --max-time 3 "$LB_STATS_URL")" || return 1
  awk -F, -v backend="${LB_BACKEND:-instances}" -v server="$1" \
    '$1 == backend && $2 == server { print $18 }' <<< "$csv"
}
lb_up() { [ "$(lb_status "$1")" = UP ]; }
lb_out() { local status; status="$(lb_status "$1")" && [ "$status" != UP ]; }
